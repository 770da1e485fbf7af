package transport

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context crosses every request plane in the request's Headers
// (traceparent, tracestate: W3C Trace Context), written and read with the
// process's OpenTelemetry propagator (otel.GetTextMapPropagator). Every
// plane's client adds the trace context of the call's ctx, and every server
// hands its handler a ctx whose remote parent is the caller's span, so a
// worker's spans join the frontend's trace whichever plane carried the
// request. With tracing off the propagator is a no-op and nothing is added.

// HeaderCarrier adapts Headers to OpenTelemetry's TextMapCarrier, with
// lower-case keys as the http plane delivers them.
type HeaderCarrier Headers

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the value of key.
func (h HeaderCarrier) Get(key string) string { return h[strings.ToLower(key)] }

// Set sets key to value.
func (h HeaderCarrier) Set(key, value string) { h[strings.ToLower(key)] = value }

// Keys lists the keys.
func (h HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// withTrace returns headers plus the trace context of ctx. It copies
// headers before adding (the caller's map is not changed) and returns them
// as they are when ctx has no span to propagate.
func withTrace(ctx context.Context, headers Headers) Headers {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	out := make(Headers, len(headers)+2)
	for k, v := range headers {
		out[k] = v
	}
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(out))
	return out
}

// traceContext returns ctx with the remote span context the request's
// headers carry, if any.
func traceContext(ctx context.Context, req *Request) context.Context {
	if req == nil || req.Headers[HeaderTraceParent] == "" {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier(req.Headers))
}
