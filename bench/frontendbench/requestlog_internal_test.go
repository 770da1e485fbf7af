package frontendbench

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestSpanLog: the span log keeps a request's first route attempt (when it
// was let go, when it was decided, the worker) and its first token, by
// the trace id the bench chose, and nothing of other spans or later
// attempts.
func TestSpanLog(t *testing.T) {
	l := &spanLog{m: map[trace.TraceID]*spanRecord{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(l), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	id := traceOf(3, 42)
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: id, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
	span := func(name string, from, to int, attrs ...attribute.KeyValue) {
		_, s := tr.Start(parent, name, trace.WithTimestamp(at(from)), trace.WithAttributes(attrs...))
		s.End(trace.WithTimestamp(at(to)))
	}
	span("frontend.tokenize", 1, 2)
	span("frontend.route", 300, 301, attribute.Int("switchyard.attempt", 0), attribute.String("switchyard.instance_id", "ab"))
	span("frontend.route", 900, 901, attribute.Int("switchyard.attempt", 1), attribute.String("switchyard.instance_id", "cd"))
	span("frontend.first_token", 0, 800)
	// A trace the bench did not start is not sampled: nothing kept.
	_, s := tr.Start(context.Background(), "frontend.route")
	s.End()

	if n := len(l.m); n != 1 {
		t.Fatalf("%d traces kept, want 1", n)
	}
	r := l.take(id)
	if r == nil {
		t.Fatal("no record of the request's trace")
	}
	want := spanRecord{routed: at(300), decided: at(301), firstToken: at(800), worker: "ab"}
	if !r.routed.Equal(want.routed) || !r.decided.Equal(want.decided) || !r.firstToken.Equal(want.firstToken) || r.worker != want.worker {
		t.Errorf("record %+v, want %+v", *r, want)
	}
	if l.take(id) != nil || len(l.m) != 0 {
		t.Error("take left the record behind")
	}
	if traceOf(3, 42) == traceOf(4, 42) || traceOf(3, 42) == traceOf(3, 43) {
		t.Error("trace ids of two requests alike")
	}
	if got := traceparent(id, 42); !strings.HasPrefix(got, "00-"+id.String()+"-") || !strings.HasSuffix(got, "-01") {
		t.Errorf("traceparent %q", got)
	}
}

// TestWriteRequestCSV: one row per request, the frontend's columns empty
// when not recorded, TTFT only of the completed and Retry-After only of
// the shed.
func TestWriteRequestCSV(t *testing.T) {
	ms := time.Millisecond
	flows := []Flow{{Name: "A", Tenant: "A"}, {Name: "high", Tenant: "H", Priority: 10}}
	rs := []FlowResult{
		{Name: "A", Requests: []Request{
			{ID: 2, Frontend: 1, Sent: 250 * ms, Status: "ok", TTFT: 812345 * time.Microsecond, Traced: true,
				Routed: 400 * ms, Decided: 401 * ms, Worker: "ab", FirstToken: 1062 * ms},
			{ID: 3, Sent: 500 * ms, Status: "shed-timeout", RetryAfter: 20, Traced: true, Routed: -1, Decided: -1, FirstToken: -1},
		}},
		{Name: "high", Requests: []Request{{ID: 4, Sent: 1500 * ms, Status: "ok", TTFT: 580 * ms}}},
	}
	var b strings.Builder
	if err := WriteRequestCSV(&b, "bands", "on", 2, flows, rs); err != nil {
		t.Fatal(err)
	}
	if err := WriteRequestCSV(&b, "tenants, 2 frontends", "off", 1, flows[1:], rs[1:]); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"bands,on,2,A,A,0,1,2,0.2500,ok,812.3,,0.4000,0.4010,ab,1.0620",
		"bands,on,2,A,A,0,0,3,0.5000,shed-timeout,,20,,,,",
		"bands,on,2,high,H,10,0,4,1.5000,ok,580.0,,,,,",
		`"tenants, 2 frontends",off,1,high,H,10,0,4,1.5000,ok,580.0,,,,,`,
	}, "\n") + "\n"
	if got := b.String(); got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}
	if n, m := strings.Count(RequestCSVHeader, ","), strings.Count(strings.Split(want, "\n")[0], ","); n != m {
		t.Errorf("header has %d commas, rows %d", n, m)
	}
}
