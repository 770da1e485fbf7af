package partition_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-llm/switchyard/services/router"
)

// TestRouterCutFromEventbus cuts the router from the eventbus (and so from
// NATS, which the eventbus embeds) but not from the registry, the workers
// or the frontend, while a client chats through the frontend. The router
// must keep routing on its index (the frontend never falls back to routing
// in process), say so (its eventbus health service NOT_SERVING, its
// reachable gauge 0, its own health SERVING), and after the heal its index
// must equal that of a router started afterwards, which replays the
// stream: nothing the workers published during the cut is missing.
func TestRouterCutFromEventbus(t *testing.T) {
	t.Parallel()
	binaries(t) // before the clock starts: a cold build takes minutes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLab(t)
	c := startCluster(t, ctx, l, 1, 1)
	n, _, w := c.startWatchedWorkers(t, ctx, 4, 2)
	rt := c.startRouter(t, ctx, "router")
	routerAddr, routerMetrics := rt.addr+":7003", "http://"+rt.addr+":9103/metrics"
	fe := c.startFrontend(t, ctx, routerAddr)
	feMetrics := "http://" + fe.addr + ":8000/metrics"
	// waitBus waits until the router's eventbus health says want.
	waitBus := func(want healthpb.HealthCheckResponse_ServingStatus) error {
		var st healthpb.HealthCheckResponse_ServingStatus
		var err error
		for i := 0; i < 1200; i++ {
			if st, err = healthOf(ctx, routerAddr, router.EventbusHealthService); err == nil && st == want {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("router's eventbus health %s (%v), want %s: %w", st, err, want, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		return fmt.Errorf("router's eventbus health %s (%v), want %s", st, err, want)
	}
	if err := waitBus(healthpb.HealthCheckResponse_SERVING); err != nil {
		t.Fatal(err)
	}
	next := 0
	for range 20 { // warm the workers' caches and the index
		if _, err := chat(ctx, fe, prompt(next), false); err != nil {
			t.Fatalf("chat before the cut: %v", err)
		}
		next++
	}
	fallbacks, err := metric(ctx, feMetrics, "switchyard_frontend_router_fallback_total")
	if err != nil {
		t.Fatal(err)
	}
	decisions, err := metric(ctx, routerMetrics, "switchyard_router_decisions_total")
	if err != nil {
		t.Fatal(err)
	}

	d := cutDuration()
	r := row{fault: fmt.Sprintf("router cut from the eventbus, %d workers", n), duration: d}
	l.cut(rt, c.bus)
	cutAt := time.Now()
	if err := waitBus(healthpb.HealthCheckResponse_NOT_SERVING); err != nil {
		t.Error(err)
	}
	noticed := time.Since(cutAt)
	reachable, err := metric(ctx, routerMetrics, "switchyard_router_eventbus_reachable")
	if err != nil || reachable != 0 {
		t.Errorf("switchyard_router_eventbus_reachable = %v (%v) during the cut, want 0", reachable, err)
	}
	for end := cutAt.Add(d); time.Now().Before(end) && r.tried < 10000; {
		r.tried++
		if _, err := chat(ctx, fe, prompt(next), false); err == nil {
			r.succeeded++
		} else {
			t.Logf("chat during the cut: %v", err)
		}
		next++
	}
	if st, err := health(ctx, routerAddr); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("router health %s (%v) during the cut, want SERVING: it routes on its index", st, err)
	}
	decisionsCut, err := metric(ctx, routerMetrics, "switchyard_router_decisions_total")
	if err != nil {
		t.Fatal(err)
	}
	fallbacksCut, err := metric(ctx, feMetrics, "switchyard_frontend_router_fallback_total")
	if err != nil {
		t.Fatal(err)
	}
	l.heal(rt, c.bus)
	healed := time.Now()
	if err := waitBus(healthpb.HealthCheckResponse_SERVING); err != nil {
		t.Error(err)
	}
	// A router started now replays the stream from its start (no
	// snapshot is stored): the cut router's index must come to equal its.
	replay := c.startRouter(t, ctx, "replay")
	var diff string
	var live, replayed int
	for i := 0; i < 600; i++ {
		a, errA := routerStats(ctx, routerAddr)
		b, errB := routerStats(ctx, replay.addr+":7003")
		if errA == nil && errB == nil {
			live, replayed = int(a.EventsApplied), int(b.EventsApplied)
			if diff, r.eventsLost = indexDiff(a, b); diff == "" && a.IndexedEntries > 0 {
				break
			}
		} else {
			diff = fmt.Sprintf("stats: %v, %v", errA, errB)
		}
		select {
		case <-ctx.Done():
			i = 600
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.converge = time.Since(healed)
	_, r.workersLost = w.counts()
	printRow(t, r)
	t.Logf("the router reported its eventbus NOT_SERVING %s after the cut; %.0f decisions during it, %.0f frontend fallbacks; after the heal %d events applied live, %d by the replaying router",
		noticed.Round(100*time.Millisecond), decisionsCut-decisions, fallbacksCut-fallbacks, live, replayed)
	if diff != "" {
		t.Errorf("the cut router's index differs from a replay of the stream: %s", diff)
	}
	if r.succeeded != r.tried {
		t.Errorf("%d of %d chats failed during the cut", r.tried-r.succeeded, r.tried)
	}
	if decisionsCut-decisions < float64(r.succeeded) || fallbacksCut != fallbacks {
		t.Errorf("during the cut the router decided %.0f of %d chats and the frontend routed %.0f in process: the router must keep routing",
			decisionsCut-decisions, r.succeeded, fallbacksCut-fallbacks)
	}
	if r.workersLost != 0 {
		t.Errorf("%d live workers deleted", r.workersLost)
	}
}
