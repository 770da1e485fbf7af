// Package router is Switchyard's KV-aware router service: it watches the
// registry for workers and model cards, keeps an index of which worker
// caches which blocks (from KV events, or predicted from its own decisions
// with --no-kv-events), tracks the load of the requests it routes, and picks
// for each request the worker with the lowest cost (see package scheduler).
package router

import (
	"context"
	"log/slog"
	"net"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/undo"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Service is a running router.
type Service struct {
	core   *core.Core
	follow *follower
	gaps   *gapFiller // jetstream mode
	server *grpcserver.Server
	reg    *registryclient.Client
	bus    *eventbusclient.Client
	// busWatch reports whether the eventbus is reachable; nil without one.
	busWatch *busWatch
	start    startup // what the router waits for before it serves (startup.go)
	done     chan struct{}
	err      error
}

// Start connects to the registry, starts its watches and serves gRPC until
// ctx ends. It returns once the gRPC address is bound. It calls
// cfg.Complete and cfg.Validate first; an error after that releases
// everything it had acquired (the port among them).
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Service, err error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var u undo.Stack
	defer u.OnError(&err)
	creds, auth, err := cfg.Credentials()
	if err != nil {
		return nil, err
	}
	reg, err := registryclient.Dial([]string{cfg.RegistryAddr}, registryclient.Options{Credentials: creds, Token: auth})
	if err != nil {
		return nil, err
	}
	u.Push(func() { _ = reg.Close() })
	dc := core.New(cfg.coreConfig())
	cfg.Server.Policy = Policy
	s := &Service{core: dc, reg: reg, done: make(chan struct{})}
	s.start.readyCh = make(chan struct{})
	srv, err := grpcserver.New(cfg.Server, log)
	if err != nil {
		return nil, err
	}
	u.Push(func() { _ = srv.Close() })
	s.server = srv
	srv.SetHealthProbe(time.Second, s.start.probe)
	metrics := newRouterMetrics(srv.Registry(), dc)
	routerv1.RegisterRouterServiceServer(srv.GRPC(), &gated{RouterServiceServer: meter(&server{core: dc}, metrics, modeLabel(dc)), start: &s.start})
	evMode, _ := cfg.EventsMode() // checked by Validate
	if dc.Mode() != core.ModeKV {
		evMode = kvevents.None
	}
	onInstances := dc.OnInstances
	if evMode == kvevents.Core || evMode == kvevents.Direct {
		s.follow = newFollower(evMode, dc, log, grpcclient.Options{Credentials: creds, Token: auth, Log: log}, cfg.ResyncInterval)
		u.Push(s.follow.close)
		onInstances = s.follow.onInstances
	}
	if evMode == kvevents.JetStream && cfg.EventbusAddr != "" {
		s.gaps = newGapFiller(dc, log, grpcclient.Options{Credentials: creds, Token: auth, Log: log})
		u.Push(s.gaps.close)
		base := onInstances
		onInstances = func(changes []registryclient.Change[*registryv1.Instance]) {
			s.gaps.onInstances(changes)
			base(changes)
		}
	}
	var cons *consumer
	if cfg.EventbusAddr != "" {
		bus, err := eventbusclient.Dial([]string{cfg.EventbusAddr}, eventbusclient.Options{Credentials: creds, Log: log, Token: auth})
		if err != nil {
			return nil, err
		}
		u.Push(func() { _ = bus.Close() })
		s.bus = bus
		s.busWatch = newBusWatch(srv.Registry(), bus.Health, func(ok bool) { srv.SetServing(EventbusHealthService, ok) }, log)
		cons = s.consume(ctx, cfg, evMode, metrics, log)
		u.Push(cons.closeAll)
		base := onInstances
		onInstances = func(changes []registryclient.Change[*registryv1.Instance]) {
			base(changes)
			for _, ch := range changes {
				if !ch.Deleted {
					s.start.follow(ch.Item.Namespace, cons.follow)
				}
			}
		}
	} else if evMode == kvevents.Direct {
		log.Warn("no --eventbus-addr: KV events come straight from the workers (direct), but no load reports")
	} else {
		log.Warn("no --eventbus-addr: no KV events and no load reports; only the router's own decisions inform it")
	}
	// Bind last: nothing after it can fail, so no error path holds the port.
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	instances := registryclient.WatchInstances(reg, &registryv1.InstanceFilter{}, registryclient.WatchOptions[*registryv1.Instance]{OnChange: onInstances, Logger: log})
	models := registryclient.WatchModels(reg, &registryv1.ModelFilter{}, registryclient.WatchOptions[*registryv1.ModelCard]{OnChange: dc.OnModels, Logger: log})
	log.Info("router starting", "mode", dc.ModeName(), "kv_events_mode", string(evMode), "grpc_addr", srv.Addr().String(), "registry", cfg.RegistryAddr,
		"overlap_weight", cfg.Core.OverlapWeight, "temperature", cfg.Core.Temperature)
	go s.serve(ctx, cfg, cons, metrics, instances, models, log)
	return s, nil
}

// consume builds the eventbus consumer (KV events in jetstream mode, load
// reports and, with --router-replica-sync, the replicas' decisions). The
// index snapshot is loaded in the background (startup.go).
func (s *Service) consume(ctx context.Context, cfg Config, evMode kvevents.Mode, metrics *routerMetrics, log *slog.Logger) *consumer {
	dc := s.core
	cons := newConsumer(s.bus, dc, log, evMode == kvevents.JetStream)
	cons.metrics = metrics
	cons.gaps = s.gaps
	if evMode == kvevents.Core {
		cons.coreKV = s.follow
	}
	if cfg.ReplicaSync {
		cons.sync = newSyncer(cfg.ReplicaID, s.bus, dc, log)
		dc.SetObserver(cons.sync)
	}
	if !cons.events {
		return cons
	}
	cons.filterDeparted(func(ctx context.Context, ns string) (map[uint64]bool, error) {
		resp, err := s.reg.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: ns}})
		if err != nil {
			return nil, err
		}
		listed := make(map[uint64]bool, len(resp.GetInstances()))
		for _, in := range resp.GetInstances() {
			listed[in.GetInstanceId()] = true
		}
		return listed, nil
	})
	return cons
}

// serve runs the router until ctx ends: it serves gRPC at once, becomes
// ready in the background (startup.go), snapshots the index periodically,
// and then closes the watches, the followers, the consumer and the clients.
func (s *Service) serve(ctx context.Context, cfg Config, cons *consumer, metrics *routerMetrics, instances *registryclient.Watcher[*registryv1.Instance], models *registryclient.Watcher[*registryv1.ModelCard], log *slog.Logger) {
	defer close(s.done)
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		s.becomeReady(ctx, cons, metrics, instances, models, log)
	}()
	var snapDone chan struct{}
	if cons != nil && cons.events && cfg.SnapshotInterval > 0 {
		snapDone = make(chan struct{})
		go func() {
			defer close(snapDone)
			snapshotLoop(ctx, s.bus, s.core, cons, cfg.SnapshotInterval, log)
		}()
	}
	var watchDone chan struct{}
	if s.busWatch != nil {
		watchDone = make(chan struct{})
		go func() {
			defer close(watchDone)
			s.busWatch.run(ctx)
		}()
	}
	s.err = s.server.Serve(ctx, nil)
	<-readyDone
	if watchDone != nil {
		<-watchDone
	}
	if snapDone != nil {
		<-snapDone
	}
	instances.Close()
	models.Close()
	if s.follow != nil {
		s.follow.close()
	}
	if cons != nil {
		cons.closeAll()
	}
	if s.gaps != nil {
		s.gaps.close()
	}
	if s.bus != nil {
		_ = s.bus.Close()
	}
	_ = s.reg.Close()
}

// Run starts the router and blocks until ctx ends and it has stopped.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Addr is the bound gRPC address.
func (s *Service) Addr() net.Addr { return s.server.Addr() }

// MetricsAddr is the bound /metrics address; nil when --metrics-addr is off.
func (s *Service) MetricsAddr() net.Addr { return s.server.MetricsAddr() }

// FollowStats counts gap fills and rebuilds from the workers: in the core
// and direct KV event modes, and of gaps in the stream in jetstream mode.
func (s *Service) FollowStats() FollowStats {
	if s.gaps != nil {
		return s.gaps.stats()
	}
	return s.follow.stats()
}

// Ready is closed once the router has what it needs to route (the
// registry's first answer and, in jetstream mode, its index snapshot) and
// answers Route and health SERVING; it stays open if the router stops first.
func (s *Service) Ready() <-chan struct{} { return s.start.readyCh }

// Core is the router's state, for tests and in-process embedding.
func (s *Service) Core() *core.Core { return s.core }

// Wait blocks until the service has stopped.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}
