// Package router is Switchyard's KV-aware router service: it watches the
// registry for workers and model cards, keeps an index of which worker
// caches which blocks (from KV events, or predicted from its own decisions
// with --no-kv-events), tracks the load of the requests it routes, and picks
// for each request the worker with the lowest cost (see package scheduler).
package router

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/discovery"
	"github.com/switchyard-llm/switchyard/pkg/eventbus"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Service is a running router.
type Service struct {
	core   *core.Core
	follow *follower
	server *grpcserver.Server
	reg    *discovery.Client
	bus    *eventbus.Client
	done   chan struct{}
	err    error
}

// Start connects to the registry, starts its watches and serves gRPC until
// ctx ends. It returns once the gRPC address is bound.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, err := cfg.ClientTLS.ClientCredentials()
	if err != nil {
		return nil, err
	}
	auth, err := cfg.ClientAuth.Credentials()
	if err != nil {
		return nil, err
	}
	reg, err := discovery.Dial([]string{cfg.RegistryAddr}, discovery.Options{Credentials: creds, Token: auth})
	if err != nil {
		return nil, err
	}
	dc := core.New(cfg.coreConfig())
	cfg.Server.Policy = Policy
	srv, err := grpcserver.New(cfg.Server, log)
	if err != nil {
		reg.Close()
		return nil, err
	}
	metrics := newRouterMetrics(srv.Registry(), dc)
	routerv1.RegisterRouterServiceServer(srv.GRPC(), meter(&server{core: dc}, metrics, modeLabel(dc)))
	if err := srv.Listen(); err != nil {
		reg.Close()
		return nil, err
	}
	s := &Service{core: dc, server: srv, reg: reg, done: make(chan struct{})}
	evMode, _ := cfg.EventsMode() // checked by Validate
	if dc.Mode() != core.ModeKV {
		evMode = kvevents.None
	}
	onInstances := dc.OnInstances
	var follow *follower
	if evMode == kvevents.Core || evMode == kvevents.Direct {
		follow = newFollower(evMode, dc, log, grpcclient.Options{Credentials: creds, Token: auth, Log: log}, cfg.ResyncInterval)
		onInstances = follow.onInstances
		s.follow = follow
	}
	var cons *consumer
	if cfg.ReplicaSync && cfg.EventbusAddr == "" {
		reg.Close()
		return nil, errors.New("--router-replica-sync needs --eventbus-addr")
	}
	if cfg.EventbusAddr != "" {
		bus, err := eventbus.Dial([]string{cfg.EventbusAddr}, eventbus.Options{Credentials: creds, Log: log, Token: auth})
		if err != nil {
			reg.Close()
			return nil, err
		}
		s.bus = bus
		cons = newConsumer(bus, dc, log, evMode == kvevents.JetStream)
		cons.metrics = metrics
		if evMode == kvevents.Core {
			cons.coreKV = follow
		}
		if cfg.ReplicaSync {
			cons.sync = newSyncer(cfg.ReplicaID, bus, dc, log)
			dc.SetObserver(cons.sync)
		}
		if cons.events {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			snap, err := loadSnapshot(lctx, bus)
			cancel()
			switch {
			case err != nil:
				log.Warn("index snapshot not loaded; starting cold", "err", err.Error())
			case snap != nil:
				dc.Restore(snap)
				metrics.snapshotted(snap.TakenAt.AsTime())
				maps.Copy(cons.start, snap.StreamSequences)
				maps.Copy(cons.seq, snap.StreamSequences)
				log.Info("index restored from snapshot", "taken_at", snap.TakenAt.AsTime(), "workers", len(snap.Workers), "sequences", snap.StreamSequences)
			}
		}
		base := onInstances
		onInstances = func(changes []discovery.Change[*registryv1.Instance]) {
			base(changes)
			for _, ch := range changes {
				if !ch.Deleted {
					cons.follow(ch.Item.Namespace)
				}
			}
		}
	} else if evMode == kvevents.Direct {
		log.Warn("no --eventbus-addr: KV events come straight from the workers (direct), but no load reports")
	} else {
		log.Warn("no --eventbus-addr: no KV events and no load reports; only the router's own decisions inform it")
	}
	instances := discovery.WatchInstances(reg, &registryv1.InstanceFilter{}, discovery.WatchOptions[*registryv1.Instance]{OnChange: onInstances, Logger: log})
	models := discovery.WatchModels(reg, &registryv1.ModelFilter{}, discovery.WatchOptions[*registryv1.ModelCard]{OnChange: dc.OnModels, Logger: log})
	log.Info("router starting", "mode", dc.ModeName(), "kv_events_mode", string(evMode), "grpc_addr", srv.Addr().String(), "registry", cfg.RegistryAddr,
		"overlap_weight", cfg.Core.OverlapWeight, "temperature", cfg.Core.Temperature)
	go func() {
		defer close(s.done)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if instances.WaitReady(wctx) != nil || models.WaitReady(wctx) != nil {
			log.Warn("registry has not answered yet; routing will find no workers until it does")
		} else {
			dc.DropDeparted()
		}
		cancel()
		var snapDone chan struct{}
		if cons != nil && cons.events && cfg.SnapshotInterval > 0 {
			snapDone = make(chan struct{})
			go func() {
				defer close(snapDone)
				snapshotLoop(ctx, s.bus, dc, cons, cfg.SnapshotInterval, log)
			}()
		}
		s.err = srv.Serve(ctx, nil)
		if snapDone != nil {
			<-snapDone
		}
		instances.Close()
		models.Close()
		if follow != nil {
			follow.close()
		}
		if cons != nil {
			cons.close()
			if cons.sync != nil {
				cons.sync.close()
			}
		}
		if s.bus != nil {
			s.bus.Close()
		}
		reg.Close()
	}()
	return s, nil
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

// FollowStats counts gap fills and rebuilds in the core and direct KV
// event modes; zero in the others.
func (s *Service) FollowStats() FollowStats { return s.follow.stats() }

// Core is the router's state, for tests and in-process embedding.
func (s *Service) Core() *core.Core { return s.core }

// Wait blocks until the service has stopped.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}
