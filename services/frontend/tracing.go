package frontend

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: every /v1 request is one trace (or joins the caller's, from a
// W3C traceparent header): a server span for the request, and in it
// frontend.parse, frontend.template, frontend.tokenize, then per attempt
// frontend.route (the router service's Route joins through otelgrpc: a
// traced request is routed with a unary Route call, not on a RouteStream) and
// frontend.generate (the worker's spans join through the request plane's
// headers), and frontend.first_token from the request's arrival to its first
// token. With tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT) the global
// provider is a no-op and none of this costs more than a few calls.

// tracer makes the frontend's spans.
var tracer = otel.Tracer("github.com/switchyard-llm/switchyard/services/frontend")

// startRequestSpan starts the server span of an API request, a child of the
// caller's trace context when the request carries one.
func startRequestSpan(r *http.Request, endpoint string) (context.Context, trace.Span) {
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
			attribute.String("switchyard.endpoint", endpoint)))
}

// endRequestSpan ends it with the response's status and model.
func endRequestSpan(span trace.Span, rec *recorder) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", rec.status))
	if rec.model != "" {
		span.SetAttributes(attribute.String("gen_ai.request.model", rec.model))
	}
	if g := rec.gen; g != nil {
		span.SetAttributes(attribute.String("switchyard.request_id", g.id), attribute.Int("gen_ai.usage.input_tokens", int(g.prompt)),
			attribute.Int("gen_ai.usage.output_tokens", int(g.output)), attribute.Int("switchyard.cached_prompt_tokens", int(g.cached)))
	}
	if c := rec.counted(); c >= 500 {
		span.SetStatus(codes.Error, http.StatusText(c))
	}
	span.End()
}

// startSpan starts a span of one step of a request. A step of a request
// whose own span does not record (tracing off, or its trace not sampled)
// would not record either under the standard samplers (parent-based, the
// default, or a ratio of the trace id, which the step shares), so it gets
// the no-op span and costs nothing.
func startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noopSpan
	}
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// noopSpan records nothing.
var noopSpan = trace.SpanFromContext(context.Background())

// endSpan ends a step's span, marking it failed when err is set.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// firstTokenSpan records frontend.first_token: from the request's arrival
// to its first generated token (the time to first token).
func firstTokenSpan(ctx context.Context, start, now time.Time) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := tracer.Start(ctx, "frontend.first_token", trace.WithTimestamp(start))
	span.End(trace.WithTimestamp(now))
}
