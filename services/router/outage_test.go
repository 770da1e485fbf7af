package router_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestKVEventsSurviveANATSOutageLongerThanTheBuffer stops NATS under a
// worker that goes on producing KV events, with more events than the SDK's
// publish buffer holds, for longer than the eventbus's acknowledgement
// timeout (the long form: longer than the minute after which the SDK once
// gave a batch up, losing it). The engine is never blocked. The buffered
// events are published once NATS is back, none given up; those beyond the
// buffer waited in the worker's ring and are published from it, in order.
// When the ring is too small to hold them, the router (jetstream mode) sees
// the gap at the next event and rebuilds the worker's blocks from its state.
// Either way the router's index ends with every block, no gap applied past.
func TestKVEventsSurviveANATSOutageLongerThanTheBuffer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ring    int
		outage  time.Duration // -short; the long form holds NATS down 75 s
		after   int           // events after NATS is back
		rebuild bool
	}{
		{name: "published from the ring", outage: 11 * time.Second, after: 10},
		{name: "ring overrun, rebuilt from state", ring: 1000, outage: 2 * time.Second, after: 10, rebuild: true},
		// No event after the outage: the gap is seen at the oldest event
		// the ring still holds, published once NATS is back.
		{name: "ring overrun, engine idle after", ring: 1000, outage: 2 * time.Second, rebuild: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outage := tc.outage
			if !testing.Short() {
				outage = 75 * time.Second
			}
			testNATSOutage(t, tc.ring, outage, tc.after, tc.rebuild)
		})
	}
}

func testNATSOutage(t *testing.T, ring int, outage time.Duration, after int, rebuild bool) {
	const (
		buffer = 8
		before = 20
		// during exceeds what can wait for NATS: 16 eventbus batches in
		// flight of up to 256 KV batches each, and the buffer.
		during = 16*256 + buffer + 1000
	)
	total := uint64(before + during + after)
	ctx, cancel := context.WithTimeout(context.Background(), outage+2*time.Minute)
	defer cancel()
	_, reg := registrytest.Start(t)
	natsDir := t.TempDir()
	ns := eventbustest.StartNATSAt(t, -1, natsDir)
	natsURL := ns.ClientURL()
	cfg := eventbustest.Config(natsURL)
	cfg.NATSMaxReconnects, cfg.NATSReconnectWait = -1, 50*time.Millisecond
	bus := eventbustest.StartEventbus(t, cfg)
	busAddr := bus.Addr().String()
	tc := transport.DefaultConfig()
	tc.TCP.Host = "127.0.0.1"
	w, err := worker.Start(ctx, worker.Config{
		Namespace: "outage", Component: "backend", Model: worker.Model{Name: "m", BlockSize: 4, ContextLength: 1024},
		RegistryAddr: reg.Addr, EventbusAddr: busAddr, Transport: tc, DrainTimeout: time.Second, KVPublishBuffer: buffer, KVEventsRing: ring,
	}, func(context.Context, *workerv1.GenerateRequest, func(*workerv1.GenerateResponse) error) error {
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	svc, rpc := startRouterService(t, ctx, routertest.Config(reg.Addr, busAddr))
	stats := func() *routerv1.GetStatsResponse {
		st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	id := uint64(0)
	publish := func(n int) {
		for range n {
			id++
			stored := &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: 1<<40 + id, LocalHash: id}}}
			w.PublishKVEvents(&workerv1.KvEventBatch{FirstEventId: id, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: stored}}}})
		}
	}
	publish(before)
	testwait.Until(t, 30*time.Second, "the first events applied", func() bool { return stats().IndexedEntries == before })

	eventbustest.StopNATS(ns)
	start := time.Now()
	publish(during) // never blocks the engine: what does not fit is dropped
	t.Logf("%d events published to the SDK in %s with NATS down; %d waited in the ring (buffer full)", during, time.Since(start).Round(time.Millisecond), w.KVEventsDropped())
	if w.KVEventsDropped() == 0 {
		t.Fatalf("%d events during the outage, none beyond the buffer", during)
	}
	time.Sleep(outage - time.Since(start)) // the outage itself: nothing to wait for
	port, err := strconv.Atoi(portOfURL(natsURL))
	if err != nil {
		t.Fatal(err)
	}
	eventbustest.StartNATSAt(t, port, natsDir) // stopped by its cleanup
	back := time.Now()
	publish(after)

	var st *routerv1.GetStatsResponse
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st = stats(); st.IndexedEntries == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage the router indexes %d of %d blocks: %v", st.IndexedEntries, total, st)
		}
	}
	indexed := time.Since(back)
	// After a rebuild the index can be complete before the SDK has
	// published what its ring still holds: queued grows until then, so the
	// counts are compared once nothing waits (CI once compared acknowledged
	// with a queued count read too early and waited for it in vain).
	testwait.Until(t, 30*time.Second, "the SDK's KV events all published", func() bool { return w.KVEventsWaiting() == 0 })
	queued, published, lost := w.KVEventCounts()
	fs := svc.FollowStats()
	t.Logf("NATS down %s: %d events, %d queued, %d acknowledged, %d failed, %d waited in the ring; router: every block indexed %s after NATS returned, %d applied, %d filled from the ring, %d rebuilds, %d gaps applied past",
		outage, total, queued, published, lost, w.KVEventsDropped(), indexed.Round(time.Millisecond), st.EventsApplied, fs.Filled, fs.Rebuilds, st.EventsGap)
	if published != queued {
		t.Errorf("%d of %d queued events acknowledged once nothing waits", published, queued)
	}
	if lost != 0 || st.EventsGap != 0 || fs.Unfilled != 0 || (fs.Rebuilds > 0) != rebuild {
		t.Fatalf("%d events failed, %d gaps applied past, %d unfilled, %d rebuilds; want 0, 0, 0, rebuilt %v",
			lost, st.EventsGap, fs.Unfilled, fs.Rebuilds, rebuild)
	}
	if !rebuild && queued != total {
		t.Fatalf("%d of %d events published; the rest should have been published from the ring", queued, total)
	}
}
