// Package obs is what every Switchyard process shares to be observed: the
// --debug-addr pprof server, a small HTTP server for /metrics of processes
// that are not gRPC servers (mocker, adapter), the engine metrics the mocker
// and the adapter both export, and OpenTelemetry tracing (tracing.go).
package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DebugFlagUsage is the --debug-addr flag's usage text, the same everywhere.
const DebugFlagUsage = "serve /debug/pprof on this address, loopback unless a host is given (empty: off)"

// LoopbackAddr completes a listen address without a host to the loopback
// one: pprof shows a process's insides, so ":6060" means 127.0.0.1:6060.
func LoopbackAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("invalid address %q: %v", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// DebugHandler serves the runtime profiles under /debug/pprof/.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// MetricsHandler serves a registry's metrics.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// HTTPServer is an HTTP server on its own listener, stopped with its
// context.
type HTTPServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	err  error
}

// StartHTTP listens on addr at once (so a taken port fails the start) and
// serves h until ctx ends. what names the server in the log.
func StartHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger, what string) (*HTTPServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s address %s: %w", what, addr, err)
	}
	s := &HTTPServer{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	log.Info(what+" listening", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(ln) }()
	go func() {
		defer close(s.done)
		select {
		case <-ctx.Done():
		case err := <-served:
			served <- err
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.srv.Shutdown(sctx)
		cancel()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// Addr is the bound address.
func (s *HTTPServer) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server at once and releases its port, for a startup
// that fails after StartHTTP; nil (StartDebug without an address) is a
// no-op.
func (s *HTTPServer) Close() error {
	if s == nil {
		return nil
	}
	_ = s.srv.Close()
	return s.Wait()
}

// Wait blocks until the server has stopped and returns why, unless its
// context stopped it.
func (s *HTTPServer) Wait() error {
	<-s.done
	return s.err
}

// StartDebug starts the pprof server on addr (completed to loopback) when
// addr is not empty; it returns nil when it is.
func StartDebug(ctx context.Context, addr string, log *slog.Logger) (*HTTPServer, error) {
	if addr == "" {
		return nil, nil
	}
	a, err := LoopbackAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr: %w", err)
	}
	return StartHTTP(ctx, a, DebugHandler(), log, "debug (pprof)")
}
