package frontend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-llm/switchyard/pkg/obs/obstest"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// switchProcessor is the one span processor of the test process's tracer
// provider (OpenTelemetry's global tracers bind to the first provider ever
// installed, so there is one for the whole process); each test plugs its
// own exporters in and out.
type switchProcessor struct {
	mu  sync.RWMutex
	cur []sdktrace.SpanProcessor
}

func (p *switchProcessor) set(ps ...sdktrace.SpanProcessor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = ps
}

func (p *switchProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, c := range p.cur {
		c.OnStart(ctx, s)
	}
}

func (p *switchProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, c := range p.cur {
		c.OnEnd(s)
	}
}

func (p *switchProcessor) Shutdown(context.Context) error   { return nil }
func (p *switchProcessor) ForceFlush(context.Context) error { return nil }

var (
	tracingOnce sync.Once
	spans       = &switchProcessor{}
)

// installTracing installs, once per process, W3C propagation and a tracer
// provider that samples only traces whose caller sampled them (so the other
// tests of the package, which send no traceparent, record nothing).
func installTracing() {
	tracingOnce.Do(func() {
		res := resource.NewSchemaless(semconv.ServiceName("switchyard-test"))
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	})
}

// span is what the test checks of one span, from either exporter.
type span struct {
	name, id, parent string
	kind             trace.SpanKind
}

// TestRequestTrace follows one chat request over each request plane: its
// trace (started by the client's traceparent) holds the frontend's spans
// (request, parse, template, tokenize, route, generate, first token), the
// router service's Route (client and server spans, through otelgrpc) and the
// worker's (generate, engine queue, prefill), parented across the process
// boundaries: the worker's span is a child of the frontend's generate span,
// which the request plane's headers carried. The spans are read from an
// in-memory exporter and from a real OTLP/gRPC export to a receiver built on
// the collector protos, which must agree.
func TestRequestTrace(t *testing.T) {
	installTracing()
	planes := []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP, transport.PlaneNATS}
	if testing.Short() {
		// Each plane's propagation is tested on its own in pkg/transport
		// (TestTraceContextAcrossPlanes); the long form runs all three here.
		planes = planes[:1]
	}
	for _, plane := range planes {
		t.Run(string(plane), func(t *testing.T) {
			ctx := testCtx(t)
			mem := tracetest.NewInMemoryExporter()
			rcv := obstest.StartReceiver(t)
			otlp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(rcv.Addr), otlptracegrpc.WithInsecure())
			if err != nil {
				t.Fatal(err)
			}
			spans.set(sdktrace.NewSimpleSpanProcessor(mem), sdktrace.NewSimpleSpanProcessor(otlp))
			t.Cleanup(func() {
				spans.set()
				if err := otlp.Shutdown(context.Background()); err != nil {
					t.Errorf("OTLP exporter: %v", err)
				}
			})

			s := startStack(t, stackOpts{plane: plane})
			s.addMocker(0)
			s.waitInstances(1)

			traceID := fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
			body, _ := json.Marshal(map[string]any{"model": testModel, "max_tokens": 4,
				"messages":             []map[string]string{{"role": "user", "content": "Trace this request, please."}},
				"chat_template_kwargs": map[string]any{"enable_thinking": false}})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			const clientSpan = "00f067aa0ba902b7"
			req.Header.Set("traceparent", "00-"+traceID+"-"+clientSpan+"-01")
			resp, err := s.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("chat: %d %s", resp.StatusCode, b)
			}

			const root = "POST /v1/chat/completions"
			fromMem := func() []span {
				var out []span
				for _, sp := range mem.GetSpans() {
					if sp.SpanContext.TraceID().String() == traceID {
						out = append(out, span{name: sp.Name, id: sp.SpanContext.SpanID().String(), parent: sp.Parent.SpanID().String(), kind: sp.SpanKind})
					}
				}
				return out
			}
			fromOTLP := func() []span {
				var out []span
				for _, sp := range rcv.Spans() {
					if sp.TraceID() == traceID {
						out = append(out, span{name: sp.Span.Name, id: fmt.Sprintf("%x", sp.Span.SpanId), parent: fmt.Sprintf("%x", sp.Span.ParentSpanId),
							kind: trace.SpanKind(sp.Span.Kind)})
					}
				}
				return out
			}
			// The request's span ends after its response is written; wait
			// for it in both exporters.
			deadline := time.Now().Add(30 * time.Second)
			for !hasSpan(fromMem(), root) || !hasSpan(fromOTLP(), root) {
				if time.Now().After(deadline) {
					t.Fatalf("the request's span never arrived: memory %v, OTLP %v", names(fromMem()), names(fromOTLP()))
				}
				time.Sleep(10 * time.Millisecond)
			}
			got := fromMem()
			if a, b := names(got), names(fromOTLP()); !slices.Equal(a, b) {
				t.Fatalf("in-memory spans %v, OTLP receiver spans %v", a, b)
			}
			byName := map[string]span{}
			for _, sp := range got {
				byName[sp.name] = sp // one of each in a request without migration
			}
			route := "switchyard.router.v1.RouterService/Route"
			for _, c := range []struct {
				name, parent string
				kind         trace.SpanKind
			}{
				{root, "client", trace.SpanKindServer},
				{"frontend.parse", root, trace.SpanKindInternal},
				{"frontend.template", root, trace.SpanKindInternal},
				{"frontend.tokenize", root, trace.SpanKindInternal},
				{"frontend.route", root, trace.SpanKindInternal},
				{route + "@client", "frontend.route", trace.SpanKindClient},
				{route + "@server", route + "@client", trace.SpanKindServer},
				{"frontend.generate", root, trace.SpanKindInternal},
				{"frontend.first_token", root, trace.SpanKindInternal},
				{"worker.generate", "frontend.generate", trace.SpanKindServer},
				{"engine.queue", "worker.generate", trace.SpanKindInternal},
				{"engine.prefill", "worker.generate", trace.SpanKindInternal},
			} {
				sp, ok := byName[c.name]
				if strings.HasPrefix(c.name, route) { // client and server span share the RPC's name
					sp, ok = findKind(got, route, c.kind)
				}
				if !ok {
					t.Errorf("no span %s in the trace: %v", c.name, names(got))
					continue
				}
				want := clientSpan
				if c.parent != "client" {
					p, ok := byName[c.parent]
					if strings.HasPrefix(c.parent, route) {
						p, ok = findKind(got, route, trace.SpanKindClient)
					}
					if !ok {
						continue // reported above
					}
					want = p.id
				}
				if sp.parent != want || sp.kind != c.kind {
					t.Errorf("span %s: parent %s kind %v, want parent %s (%s) kind %v", c.name, sp.parent, sp.kind, want, c.parent, c.kind)
				}
			}
		})
	}
}

func hasSpan(ss []span, name string) bool {
	return slices.ContainsFunc(ss, func(s span) bool { return s.name == name })
}

func findKind(ss []span, name string, kind trace.SpanKind) (span, bool) {
	for _, s := range ss {
		if s.name == name && s.kind == kind {
			return s, true
		}
	}
	return span{}, false
}

func names(ss []span) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.name + "/" + s.kind.String()
	}
	sort.Strings(out)
	return out
}
