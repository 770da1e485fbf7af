// Package routertest starts routers, as their own gRPC services, for the
// tests of the router and of the services around it.
package routertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/routerclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Config is a KV-routing router on 127.0.0.1:0 that reads the registry and
// the eventbus at the given addresses.
func Config(registryAddr, eventbusAddr string) router.Config {
	return router.Config{
		Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", Core: core.DefaultConfig(),
		RegistryAddr: registryAddr, EventbusAddr: eventbusAddr,
	}
}

// Logger is the logger Start gives the router: discarded unless
// SWITCHYARD_TEST_LOG is set, then text on stderr (as eventbustest.Logger).
func Logger() *slog.Logger {
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("service", "router")
	}
	return slog.New(slog.DiscardHandler)
}

// WaitReady waits until svc routes (its registry has answered and, in
// jetstream mode, its index snapshot is loaded), ctx ends, or it stops.
func WaitReady(ctx context.Context, svc *router.Service) error {
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Wait() }()
	select {
	case <-svc.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case err := <-stopped:
		return fmt.Errorf("router stopped before it was ready: %v", err)
	}
}

// StartService starts a router with cfg until ctx ends or stop is called,
// and waits until it is ready. stop stops the router and fails t if it
// stopped with an error; t's cleanup calls it too, and a second call does
// nothing. A gRPC address of 127.0.0.1:0 becomes a port that is the test's
// for its whole life (testport.Shareable), so that a client still dialling
// a stopped router is refused rather than answered by another test's.
func StartService(t testing.TB, ctx context.Context, cfg router.Config) (svc *router.Service, stop func()) {
	t.Helper()
	if cfg.Server.GRPCAddr == "127.0.0.1:0" && cfg.Server.Listener == nil {
		cfg.Server.GRPCAddr = testport.Shareable(t)
	}
	rctx, cancel := context.WithCancel(ctx)
	svc, err := router.Start(rctx, cfg, Logger())
	if err != nil {
		cancel()
		t.Fatalf("start router: %v", err)
	}
	if err := WaitReady(ctx, svc); err != nil {
		cancel()
		_ = svc.Wait()
		t.Fatalf("router not ready: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := svc.Wait(); err != nil {
				t.Errorf("router: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return svc, stop
}

// Start is StartService, and dials the router once it is ready; stop also
// closes the connection.
func Start(t testing.TB, ctx context.Context, cfg router.Config) (client routerv1.RouterServiceClient, stop func()) {
	t.Helper()
	svc, stopService := StartService(t, ctx, cfg)
	cc, err := routerclient.Dial([]string{svc.Addr().String()}, routerclient.Options{})
	if err != nil {
		stopService()
		t.Fatalf("dial router: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cc.Close()
			stopService()
		})
	}
	t.Cleanup(stop)
	return cc, stop
}
