// Package stacktest starts a whole Switchyard in process for tests of the
// tools that look at one: embedded etcd and registry, embedded NATS and
// eventbus, the router service following KV events, mocker workers and the
// frontend, each on 127.0.0.1:0 and stopped by the test's cleanup.
package stacktest

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net/http"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Model is the model the mockers serve.
const Model = "Qwen/Qwen3-0.6B"

// Options choose what runs.
type Options struct {
	// Mockers is the number of mocker workers (default 2).
	Mockers int
	// Namespace of the workers (default "dynamo").
	Namespace string
	// FrontendArgs and MockerArgs are extra command-line flags.
	FrontendArgs, MockerArgs []string
	// NoFrontend skips the frontend.
	NoFrontend bool
	// RouterMetrics serves the router's /metrics on 127.0.0.1:0.
	RouterMetrics bool
	// Log receives every component's log; nil discards it.
	Log *slog.Logger
}

// Stack is a running Switchyard.
type Stack struct {
	RegistryAddr, EventbusAddr, RouterAddr string
	// FrontendURL is http://host:port of the frontend ("" without one).
	FrontendURL string
	NATS        *natsserver.Server
	Eventbus    *eventbus.Service
	Router      *router.Service
	Frontend    *frontend.Service
	Mockers     []*worker.Worker
}

// Start starts a stack and waits until the router and frontend see every
// mocker.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.Mockers == 0 {
		o.Mockers = 2
	}
	if o.Namespace == "" {
		o.Namespace = "dynamo"
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, reg := registrytest.Start(t)
	ns, bus := eventbustest.Start(t)
	s := &Stack{RegistryAddr: reg.Addr, EventbusAddr: bus.Addr().String(), NATS: ns, Eventbus: bus}

	rcfg := router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", Core: core.DefaultConfig(),
		RegistryAddr: reg.Addr, EventbusAddr: s.EventbusAddr}
	if o.RouterMetrics {
		rcfg.Server.MetricsAddr = "127.0.0.1:0"
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rsvc, err := router.Start(rctx, rcfg, log.With("service", "router"))
	if err != nil {
		rcancel()
		t.Fatal(err)
	}
	s.Router, s.RouterAddr = rsvc, rsvc.Addr().String()
	t.Cleanup(func() {
		rcancel()
		if err := rsvc.Wait(); err != nil {
			t.Errorf("router: %v", err)
		}
	})

	for range o.Mockers {
		s.Mockers = append(s.Mockers, s.startMocker(t, o, log))
	}
	if !o.NoFrontend {
		var cfg frontend.Config
		fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		args := append([]string{"--http-addr", "127.0.0.1:0", "--registry-addr", reg.Addr, "--eventbus-addr", s.EventbusAddr,
			"--router-addr", s.RouterAddr, "--shutdown-timeout", "5s"}, o.FrontendArgs...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg.Transport = plane()
		fctx, fcancel := context.WithCancel(context.Background())
		fe, err := frontend.Start(fctx, cfg, log.With("service", "frontend"))
		if err != nil {
			fcancel()
			t.Fatal(err)
		}
		s.Frontend, s.FrontendURL = fe, "http://"+fe.Addr().String()
		t.Cleanup(func() {
			fcancel()
			if err := fe.Wait(); err != nil {
				t.Errorf("frontend: %v", err)
			}
		})
	}
	s.waitWorkers(t, o.Mockers)
	return s
}

func plane() transport.Config {
	c := transport.DefaultConfig()
	c.Plane = transport.PlaneTCP
	c.TCP.Host = "127.0.0.1"
	return c
}

func (s *Stack) startMocker(t testing.TB, o Options, log *slog.Logger) *worker.Worker {
	t.Helper()
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	args := append([]string{"--namespace", o.Namespace, "--registry-addr", s.RegistryAddr, "--eventbus-addr", s.EventbusAddr,
		"--speedup-ratio", "0"}, o.MockerArgs...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Transport = plane()
	cfg.DrainTimeout = time.Nanosecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan *worker.Worker, 1)
	go func() {
		done <- mocker.Run(ctx, cfg, log.With("service", "mocker"), func(w *worker.Worker) { ready <- w })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mocker: %v", err)
		}
	})
	select {
	case w := <-ready:
		return w
	case err := <-done:
		done <- err
		t.Fatalf("mocker stopped: %v", err)
	}
	return nil
}

// waitWorkers waits (bounded) until the router and frontend see n workers.
func (s *Stack) waitWorkers(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		routerSees := len(s.Router.Core().Stats().GetWorkers())
		feOK := s.Frontend == nil || s.frontendSees(n)
		if routerSees == n && feOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("router sees %d workers (frontend ready: %v); want %d", routerSees, feOK, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Stack) frontendSees(n int) bool {
	resp, err := http.Get(s.FrontendURL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Instances int `json:"instances"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Instances == n
}
