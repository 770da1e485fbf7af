package transport

import (
	"context"
	"io"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceContextAcrossPlanes: with the W3C propagator installed, the
// span context of the caller's ctx reaches the handler's ctx as its remote
// parent on every plane, tracestate included, without the caller passing
// any header and without its headers map being changed; a call without a
// span adds nothing.
func TestTraceContextAcrossPlanes(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("switchyard=1")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	for _, plane := range []Plane{PlaneTCP, PlaneHTTP, PlaneNATS} {
		t.Run(string(plane), func(t *testing.T) {
			cfg := testConfig(t, plane)
			s, err := NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.Handle("span", func(ctx context.Context, req *Request, w ResponseWriter) error {
				sc := trace.SpanContextFromContext(ctx)
				return w.Send([]byte(sc.TraceID().String() + " " + sc.SpanID().String() + " " + sc.TraceState().String() + " " + boolText(sc.IsRemote())))
			})
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			c := testClient(t, cfg)
			call := func(ctx context.Context, h Headers) string {
				t.Helper()
				st, err := c.Call(ctx, s.Address("span"), "span", h, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := recvAll(st)
				if err != io.EOF || len(got) != 1 {
					t.Fatalf("got %q, %v", got, err)
				}
				return string(got[0])
			}
			h := Headers{HeaderRequestID: "r1"}
			if got, want := call(trace.ContextWithSpanContext(context.Background(), parent), h), "4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 switchyard=1 remote"; got != want {
				t.Fatalf("handler saw %q, want %q", got, want)
			}
			if len(h) != 1 {
				t.Fatalf("the caller's headers were changed: %v", h)
			}
			if got, want := call(context.Background(), h), "00000000000000000000000000000000 0000000000000000  local"; got != want {
				t.Fatalf("without a span the handler saw %q, want %q", got, want)
			}
		})
	}
}

func boolText(remote bool) string {
	if remote {
		return "remote"
	}
	return "local"
}
