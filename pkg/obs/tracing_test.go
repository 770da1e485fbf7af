package obs

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// receiver is an OTLP/gRPC trace receiver built on the collector protos.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu  sync.Mutex
	got []*collectortrace.ExportTraceServiceRequest
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func TestTracingIsOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	before := otel.GetTracerProvider()
	shutdown, err := SetupTracing(context.Background(), "x", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("SetupTracing installed a provider without OTEL_EXPORTER_OTLP_ENDPOINT")
	}
}

// TestOTLPExportToAReceiver exports a span over real OTLP/gRPC, configured
// by the standard variables only, to an in-process receiver.
func TestOTLPExportToAReceiver(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rcv)
	go gs.Serve(lis)
	defer gs.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_SERVICE_NAME", "router-replica-2")
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	ctx := context.Background()
	shutdown, err := SetupTracing(ctx, "router", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(ctx, "Route")
	span.End()
	if err := shutdown(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var names []string
	service := ""
	for _, req := range rcv.got {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	if len(names) != 1 || names[0] != "Route" || service != "router-replica-2" {
		t.Fatalf("receiver got spans %v of service %q; want [Route] of router-replica-2 (OTEL_SERVICE_NAME)", names, service)
	}
}
