// Package obstest helps tests look at what the services export: an
// in-process OTLP/gRPC trace receiver built on the OpenTelemetry collector
// protos, which a real OTLP exporter can send to.
package obstest

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Receiver is an OTLP/gRPC trace receiver (the collector's TraceService)
// on 127.0.0.1, keeping every span it is sent.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// Addr is host:port of the receiver.
	Addr string

	mu    sync.Mutex
	spans []ReceivedSpan
}

// ReceivedSpan is one span as it arrived, with its resource's service name.
type ReceivedSpan struct {
	Service string
	Span    *tracev1.Span
}

// TraceID is the span's trace id in hex.
func (s ReceivedSpan) TraceID() string { return hex.EncodeToString(s.Span.GetTraceId()) }

// StartReceiver starts a receiver, stopped by the test's cleanup.
func StartReceiver(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: lis.Addr().String()}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return r
}

// Export implements the collector's TraceService.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, ReceivedSpan{Service: service, Span: s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...)
}
