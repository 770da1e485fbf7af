// Package stacktest starts a whole Switchyard in process for tests of the
// tools that look at one: embedded etcd and registry, embedded NATS and
// eventbus, the router service following KV events, mocker workers and the
// frontend, each on 127.0.0.1:0 and stopped by the test's cleanup.
package stacktest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
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
	// MockerModes, when set, is the --disaggregation-mode of each mocker
	// in turn (agg, prefill, decode); mockers past its end are agg.
	MockerModes []string
	// NoFrontend skips the frontend.
	NoFrontend bool
	// Metrics serves every component's /metrics on 127.0.0.1:0; their URLs
	// are in Stack.MetricsURLs.
	Metrics bool
	// Log receives every component's log; nil discards it.
	Log *slog.Logger
	// Auth runs the registry, eventbus and router with a token file
	// holding one token per role (Stack.Tokens), and every component
	// sends its role's token.
	Auth bool
	// ExtraTokens are more token file lines ("role token [namespace=NS]"),
	// with Auth.
	ExtraTokens string
	// Limits, when set, replace the defaults of the registry's, eventbus's
	// and router's gRPC servers (grpcserver.DefaultLimits).
	Limits *grpcserver.Limits
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
	// MetricsURLs are the /metrics URLs by component (mockers as mocker-N),
	// with Options.Metrics.
	MetricsURLs map[string]string
	// Etcd is the registry's etcd.
	Etcd *registrytest.Etcd
	// Tokens are the bearer tokens by role, with Options.Auth.
	Tokens map[authtoken.Role]string
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
	var tokens map[authtoken.Role]string
	var tokenFile string
	if o.Auth {
		tokens, tokenFile = writeTokens(t, o.ExtraTokens)
	}
	etcd := registrytest.StartEtcd(t)
	limits := grpcserver.DefaultLimits
	if o.Limits != nil {
		limits = *o.Limits
	}
	regAddr := startRegistry(t, etcd.Endpoints, o.Metrics, tokenFile, limits)
	ns := eventbustest.StartNATS(t)
	bcfg := eventbustest.Config(ns.ClientURL())
	bcfg.Server.AuthTokenFile = tokenFile
	bcfg.Server.Limits = limits
	if o.Metrics {
		bcfg.Server.MetricsAddr = "127.0.0.1:0"
	}
	bus := eventbustest.StartEventbus(t, bcfg)
	s := &Stack{RegistryAddr: regAddr.grpc, EventbusAddr: bus.Addr().String(), NATS: ns, Eventbus: bus, MetricsURLs: map[string]string{},
		Etcd: etcd, Tokens: tokens}
	if o.Metrics {
		s.MetricsURLs["registry"] = "http://" + regAddr.metrics + "/metrics"
		s.MetricsURLs["eventbus"] = "http://" + bus.MetricsAddr().String() + "/metrics"
	}

	// The router's and registry's ports are the test's for its whole life
	// (testport.Shareable), as the eventbus's: a client of a stopped one is
	// refused rather than answered by another test's.
	rcfg := router.Config{Server: grpcserver.Config{GRPCAddr: testport.Shareable(t)}, Mode: "kv", Core: core.DefaultConfig(),
		RegistryAddr: s.RegistryAddr, EventbusAddr: s.EventbusAddr, Security: grpcclient.Security{ClientAuth: authtoken.Client{Token: tokens[authtoken.RoleRouter]}}}
	rcfg.Server.AuthTokenFile = tokenFile
	rcfg.Server.Limits = limits
	if o.Metrics {
		rcfg.Server.MetricsAddr = "127.0.0.1:0"
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rsvc, err := router.Start(rctx, rcfg, log.With("service", "router"))
	if err != nil {
		rcancel()
		t.Fatal(err)
	}
	if err := routertest.WaitReady(rctx, rsvc); err != nil {
		rcancel()
		t.Fatal(err)
	}
	s.Router, s.RouterAddr = rsvc, rsvc.Addr().String()
	if o.Metrics {
		s.MetricsURLs["router"] = "http://" + rsvc.MetricsAddr().String() + "/metrics"
	}
	t.Cleanup(func() {
		rcancel()
		if err := rsvc.Wait(); err != nil {
			t.Errorf("router: %v", err)
		}
	})

	for i := range o.Mockers {
		s.Mockers = append(s.Mockers, s.startMocker(t, o, log, i+1))
	}
	if !o.NoFrontend {
		var cfg frontend.Config
		fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		args := append([]string{"--http-addr", "127.0.0.1:0", "--registry-addr", s.RegistryAddr, "--eventbus-addr", s.EventbusAddr,
			"--router-addr", s.RouterAddr, "--shutdown-timeout", "5s", "--auth-token", tokens[authtoken.RoleFrontend]}, o.FrontendArgs...)
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
		if o.Metrics {
			s.MetricsURLs["frontend"] = s.FrontendURL + "/metrics"
		}
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

// writeTokens makes one random token per role and writes the token file
// (the router's entry hashed, to use both forms).
func writeTokens(t testing.TB, extra string) (map[authtoken.Role]string, string) {
	t.Helper()
	tokens := map[authtoken.Role]string{}
	var file strings.Builder
	for _, r := range authtoken.Roles {
		tok, err := authtoken.NewLeaseToken() // any 256-bit random string will do
		if err != nil {
			t.Fatal(err)
		}
		tokens[r] = string(r) + "-" + tok
		entry := tokens[r]
		if r == authtoken.RoleRouter {
			entry = authtoken.Hash(entry)
		}
		fmt.Fprintf(&file, "%s %s\n", r, entry)
	}
	file.WriteString(extra)
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokens, p
}

// shareablePort is a testport.Shareable port, as a number.
func shareablePort(t testing.TB) int {
	t.Helper()
	_, p, err := net.SplitHostPort(testport.Shareable(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func plane() transport.Config {
	c := transport.DefaultConfig()
	c.Plane = transport.PlaneTCP
	c.TCP.Host = "127.0.0.1"
	return c
}

func (s *Stack) startMocker(t testing.TB, o Options, log *slog.Logger, n int) *worker.Worker {
	t.Helper()
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	args := append([]string{"--namespace", o.Namespace, "--registry-addr", s.RegistryAddr, "--eventbus-addr", s.EventbusAddr,
		"--speedup-ratio", "0", "--auth-token", s.Tokens[authtoken.RoleWorker]}, o.MockerArgs...)
	if n <= len(o.MockerModes) { // n counts from 1
		args = append(args, "--disaggregation-mode", o.MockerModes[n-1])
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg.Transport = plane()
	// The request plane's port is the test's for its whole life
	// (testport.Shareable): once this worker stops, a frontend still
	// dialling it is refused rather than answered by another test's worker.
	cfg.Transport.TCP.Port = shareablePort(t)
	cfg.DrainTimeout = time.Nanosecond
	metricsAddr := make(chan net.Addr, 1)
	if o.Metrics {
		cfg.MetricsAddr = "127.0.0.1:0"
		cfg.OnMetricsAddr = func(a net.Addr) { metricsAddr <- a }
	}
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
		if o.Metrics {
			s.MetricsURLs["mocker-"+strconv.Itoa(n)] = "http://" + (<-metricsAddr).String() + "/metrics"
		}
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

type registryAddrs struct{ grpc, metrics string }

// startRegistry runs a registry on etcd endpoints, with /metrics when asked.
func startRegistry(t testing.TB, endpoints []string, metrics bool, tokenFile string, limits grpcserver.Limits) registryAddrs {
	t.Helper()
	cfg := registry.Config{
		Server:          grpcserver.Config{GRPCAddr: testport.Shareable(t), ShutdownTimeout: 2 * time.Second},
		Backend:         registry.BackendKVStore,
		EtcdDialTimeout: 5 * time.Second,
		EtcdEndpoints:   strings.Join(endpoints, ","),
	}
	cfg.Server.AuthTokenFile = tokenFile
	cfg.Server.Limits = limits
	if metrics {
		cfg.Server.MetricsAddr = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := registry.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	a := registryAddrs{grpc: svc.Addr().String()}
	if metrics {
		a.metrics = svc.MetricsAddr().String()
	}
	return a
}
