package obs

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// TracingEnabled reports whether the standard OpenTelemetry variables ask
// for trace export: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, and OTEL_SDK_DISABLED not true.
func TracingEnabled() bool {
	if os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// SetupTracing installs the process's tracer provider and W3C trace-context
// propagation when TracingEnabled, exporting over OTLP/gRPC as the standard
// variables say (endpoint, headers, OTEL_EXPORTER_OTLP_INSECURE, ...). The
// service name is OTEL_SERVICE_NAME, else service. Tracing is off by
// default: without the variables it does nothing and the global provider
// stays a no-op, so the gRPC handlers cost nothing. shutdown flushes.
func SetupTracing(ctx context.Context, service string, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	if !TracingEnabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return installTracing(ctx, service, sdktrace.WithBatcher(exp), log)
}

// installTracing installs a provider with the given span processor option.
func installTracing(ctx context.Context, service string, proc sdktrace.TracerProviderOption, log *slog.Logger) (func(context.Context) error, error) {
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(proc, sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log.Info("tracing on: exporting spans over OTLP/gRPC", "service", service)
	return tp.Shutdown, nil
}
