package router

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
)

// A router's first start. It listens at once, whatever is up: until it has
// what it needs to route it says NOT_SERVING on health and answers Route with
// Unavailable, so that a frontend routes with its in-process fallback (its
// own view of the registry) rather than with a router that knows no workers,
// or one that has not restored its index (the design's restarted router loads
// the snapshot and replays from it instead of starting cold).
//
// What it needs: the registry's first answer (the workers and models), and in
// jetstream mode the index snapshot from the eventbus, loaded or known to be
// absent. The snapshot is loaded in the background with jittered retries and
// a deadline per attempt; the KV event subscriptions start only after it, from
// the sequences it covers. With --router-replica-sync it also waits (up to
// replayWait) until it has replayed its peers' decisions from the sync
// stream: the load in flight and the session bindings, without which a
// restarted replica would send a conversation's next turn away from its
// worker. Once SERVING, later outages of the registry or the eventbus do
// not take it back: the router keeps its last known fleet and index
// (health then follows the process, not its dependencies).

// replayWait bounds the wait for the replica sync stream's replay (see
// becomeReady): past it the router serves with what it has applied.
const replayWait = 10 * time.Second

// snapshotAttempt bounds one attempt to load the index snapshot.
const snapshotAttempt = 10 * time.Second

// snapshotBackoff paces the attempts.
var snapshotBackoff = backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}

// errSnapshotCorrupt is a stored snapshot that does not decode: retrying
// does not help, the router starts cold.
var errSnapshotCorrupt = errors.New("router: snapshot does not decode")

// startup tracks what the router still waits for before it serves.
type startup struct {
	// ready opens Route and health; registry and index say what is missing
	// until then.
	ready, registry, index atomic.Bool
	// replayed says the replica sync stream was replayed (or there is
	// none, or the wait for it ended).
	replayed atomic.Bool
	// readyCh is closed when ready is set.
	readyCh chan struct{}

	mu       sync.Mutex
	released bool     // the KV subscriptions may start
	pending  []string // namespaces seen before that
}

// why is what the router waits for; nil once ready.
func (s *startup) why() error {
	switch {
	case s.ready.Load():
		return nil
	case !s.registry.Load():
		return errors.New("the registry has not answered yet")
	case !s.index.Load():
		return errors.New("the index snapshot is not loaded yet")
	case !s.replayed.Load():
		return errors.New("the replica sync stream is not replayed yet")
	default:
		return errors.New("starting")
	}
}

// probe is the health probe: NOT_SERVING until ready.
func (s *startup) probe(context.Context) error { return s.why() }

// gated holds Route (unary and on RouteStream) back until the router is
// ready, with Unavailable: a frontend falls back to its own routing on it.
// The other calls (reports, frees, stats, explain) are answered as they are.
type gated struct {
	routerv1.RouterServiceServer
	start *startup
}

// Route implements RouterServiceServer.
func (g *gated) Route(ctx context.Context, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	if err := g.start.why(); err != nil {
		return nil, apierr.Errorf(codes.Unavailable, apierr.ReasonBackendUnavailable, "router not ready: %v", err)
	}
	return g.RouterServiceServer.Route(ctx, req)
}

// RouteStream implements RouterServiceServer: every decision through Route.
func (g *gated) RouteStream(stream routerv1.RouterService_RouteStreamServer) error {
	return serveRouteStream(stream, g.Route)
}

// follow calls f(ns) now, or once release is called.
func (s *startup) follow(ns string, f func(string)) {
	s.mu.Lock()
	if !s.released {
		s.pending = append(s.pending, ns)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f(ns)
}

// release lets follow call through, first for the namespaces held.
func (s *startup) release(f func(string)) {
	s.mu.Lock()
	s.released = true
	held := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, ns := range held {
		f(ns)
	}
}

// loadSnapshotRetry loads the index snapshot, retrying what may pass (the
// eventbus or NATS away, a timeout) until ctx ends. It returns nil, nil when
// there is no snapshot or the stored one does not decode (cold start).
func loadSnapshotRetry(ctx context.Context, bus *eventbusclient.Client, log *slog.Logger) (*routerv1.IndexSnapshot, error) {
	bo := backoff.New(snapshotBackoff)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, snapshotAttempt)
		snap, err := loadSnapshot(actx, bus)
		cancel()
		switch {
		case err == nil:
			return snap, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, errSnapshotCorrupt):
			log.Warn("index snapshot does not decode; starting cold", "err", err.Error())
			return nil, nil
		}
		d := bo.Next()
		log.Warn("index snapshot not loaded yet; NOT_SERVING, retrying", "attempt", attempt, "retry_in", d.String(), "err", err.Error())
		if err := backoff.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// becomeReady waits for what the router needs (see startup), then opens it.
// It returns early when ctx ends.
func (s *Service) becomeReady(ctx context.Context, cons *consumer, metrics *routerMetrics, instances, models interface {
	WaitReady(context.Context) error
}, log *slog.Logger) {
	regDone := make(chan struct{})
	go func() {
		defer close(regDone)
		if instances.WaitReady(ctx) == nil && models.WaitReady(ctx) == nil {
			s.start.registry.Store(true)
		}
	}()
	defer func() { <-regDone }()
	if cons != nil && cons.events {
		snap, err := loadSnapshotRetry(ctx, s.bus, log)
		if err != nil {
			return
		}
		if snap != nil {
			s.core.Restore(snap)
			metrics.snapshotted(snap.TakenAt.AsTime())
			cons.mu.Lock()
			for ns, seq := range snap.StreamSequences {
				cons.start[ns], cons.seq[ns] = seq, seq
			}
			cons.mu.Unlock()
			log.Info("index restored from snapshot", "taken_at", snap.TakenAt.AsTime(), "workers", len(snap.Workers), "sequences", snap.StreamSequences)
		} else {
			log.Info("no index snapshot stored; the index starts from the stream")
		}
	}
	s.start.index.Store(true)
	if cons != nil {
		s.start.release(cons.follow)
	}
	<-regDone
	if !s.start.registry.Load() {
		return // ctx ended
	}
	if cons != nil && cons.sync != nil {
		// Every namespace the registry named is followed by now, each
		// with its marker sent (syncer.mark).
		wctx, cancel := context.WithTimeout(ctx, replayWait)
		if !cons.sync.caughtUp(wctx) && ctx.Err() == nil {
			log.Warn("replica sync stream not replayed within the wait; serving with the decisions applied so far", "wait", replayWait.String())
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
	s.start.replayed.Store(true)
	// A restored snapshot may name workers that left while the router was
	// down.
	s.core.DropDeparted()
	s.start.ready.Store(true)
	// SERVING now rather than at the next probe tick, so that whoever saw
	// Ready finds health saying so (after shutdown began, the health
	// server ignores it).
	s.server.SetServing("", true)
	s.server.SetServing(routerv1.RouterService_ServiceDesc.ServiceName, true)
	close(s.start.readyCh)
	log.Info("router ready: registry answered and index loaded; SERVING")
}
