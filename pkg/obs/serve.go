package obs

import (
	"context"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/switchyard-llm/switchyard/pkg/undo"
)

// ServeMetrics starts the --debug-addr and --metrics-addr servers of a
// process that is not a gRPC server (the mocker, the adapter), each when its
// address is set: /metrics serves a registry of the process's own with the
// Go and process collectors and cs. stop closes both; metrics is the bound
// /metrics address, nil when it is off. On an error nothing is left bound.
func ServeMetrics(ctx context.Context, metricsAddr, debugAddr string, log *slog.Logger, cs ...prometheus.Collector) (stop func(), metrics net.Addr, err error) {
	var u undo.Stack
	defer u.OnError(&err)
	debug, err := StartDebug(ctx, debugAddr, log)
	if err != nil {
		return nil, nil, err
	}
	u.Push(func() { _ = debug.Close() })
	if metricsAddr == "" {
		return u.Unwind, nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	srv, err := StartHTTP(ctx, metricsAddr, MetricsHandler(reg), log, "metrics")
	if err != nil {
		return nil, nil, err
	}
	u.Push(func() { _ = srv.Close() })
	return u.Unwind, srv.Addr(), nil
}
