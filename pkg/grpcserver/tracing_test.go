package grpcserver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestCallsAreTracedWithTheCallersContext: with a provider installed (as
// obs.SetupTracing does), a call to any service of the server makes a server
// span in the client's trace: W3C trace context crosses gRPC.
func TestCallsAreTracedWithTheCallersContext(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		_ = tp.Shutdown(context.Background())
	})
	s := start(t, Config{})
	cc, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, parent := tp.Tracer("test").Start(context.Background(), "frontend request")
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	// The server ends its span after it has sent the answer, so the client
	// can have the answer first (seen under load: "no server span among 2
	// spans"): wait for it, within a bound.
	var server *tracetest.SpanStub
	for deadline := time.Now().Add(10 * time.Second); server == nil; time.Sleep(5 * time.Millisecond) {
		spans := exp.GetSpans()
		for i := range spans {
			if spans[i].Name == "grpc.health.v1.Health/Check" && spans[i].SpanKind.String() == "server" {
				server = &spans[i]
			}
		}
		if server == nil && time.Now().After(deadline) {
			t.Fatalf("no server span among %d spans", len(spans))
		}
	}
	if server.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("server span in trace %s, the caller's is %s", server.SpanContext.TraceID(), parent.SpanContext().TraceID())
	}
}
