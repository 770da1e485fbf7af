package router_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestRouterThroughNATSStreamLeaderKill runs the KV event plane on a 3-node
// JetStream cluster: a worker (the Go SDK) publishes KV events without pause
// through an eventbus with --stream-replicas=3 to a router, and the member
// leading the namespace's stream is killed (SIGKILL) mid-flow, then started
// again. Counted at both ends: every event the worker published is applied
// by the router exactly once, with no gap, and a router started afterwards
// from an empty index, replaying the stream, ends with the same index. The
// long form (make test-long) kills the leader three times.
//
// Beside other tests (make test, load 4-5) the stream once stored the
// worker's first 11 events after its 12th to 16th, before any kill, and the
// router took them for duplicates (11 lost): the first publishes to the new
// replicated stream were not stored and went again after later ones. The
// worker SDK now has a worker's first batch stored before it sends more
// (pkg/worker TestFirstKVEventsStoredFirst), and the router fills any later
// reordering from the worker's ring, so the test runs in parallel again.
func TestRouterThroughNATSStreamLeaderKill(t *testing.T) {
	t.Parallel()
	kills := 3
	if testing.Short() {
		kills = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*time.Minute+2*time.Minute)
	defer cancel()
	_, reg := registrytest.Start(t)
	cl := eventbustest.StartNATSCluster(t, 3)
	busCfg := eventbustest.Config(cl.URLs())
	busCfg.StreamReplicas = 3
	bus := eventbustest.StartEventbus(t, busCfg)
	busAddr := bus.Addr().String()

	const namespace = "natscluster"
	tc := transport.DefaultConfig()
	tc.TCP.Host = "127.0.0.1"
	w, err := worker.Start(ctx, worker.Config{
		Namespace: namespace, Component: "backend", Model: worker.Model{Name: "m", BlockSize: 4, ContextLength: 1024},
		RegistryAddr: reg.Addr, EventbusAddr: busAddr, Transport: tc, LeaseTTL: 5 * time.Second, DrainTimeout: time.Second,
	}, func(context.Context, *workerv1.GenerateRequest, func(*workerv1.GenerateResponse) error) error {
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	svc, rpc := startRouterService(t, ctx, routertest.Config(reg.Addr, busAddr))
	stats := func(rpc routerv1.RouterServiceClient) *routerv1.GetStatsResponse {
		t.Helper()
		st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err != nil {
			t.Fatalf("router stats: %v", err)
		}
		return st
	}

	// The worker publishes one event per block, each block the child of the
	// one before: N events leave N blocks in the index.
	var (
		published atomic.Uint64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			stored := &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: 1<<40 + id, LocalHash: id}}}
			if id > 1 {
				parent := 1<<40 + id - 1
				stored.ParentSequenceHash = &parent
			}
			w.PublishKVEvents(&workerv1.KvEventBatch{FirstEventId: id, Events: []*workerv1.KvCacheEvent{
				{Event: &workerv1.KvCacheEvent_Stored{Stored: stored}},
			}})
			published.Store(id)
			time.Sleep(time.Millisecond) // a steady flow, not a flood
		}
	}()
	stopPublishing := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopPublishing()
	// waitApplied waits until the router has applied more events than it had,
	// within a bound that covers a stream leader election (about 10s), the
	// resubscription of the router's consumers and the eventbus's resending
	// of publishes lost in it.
	waitApplied := func(more uint64) {
		t.Helper()
		want := stats(rpc).EventsApplied + more
		for deadline := time.Now().Add(45 * time.Second); stats(rpc).EventsApplied < want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("router applied %d events, waited for %d (published %d)", stats(rpc).EventsApplied, want, published.Load())
			}
		}
	}

	for k := range kills {
		waitApplied(200)
		leader := cl.StreamLeader(namespace, 30*time.Second)
		atKill := published.Load()
		killed := time.Now()
		cl.Kill(leader)
		waitApplied(200) // the flow resumed end to end
		t.Logf("kill %d: stream leader %s killed with %d events published; 200 more applied after %s",
			k+1, cl.Name(leader), atKill, time.Since(killed).Round(time.Millisecond))
		cl.Start(leader)
		cl.WaitHealthy(time.Minute)
	}
	stopPublishing()

	n := published.Load()
	var st *routerv1.GetStatsResponse
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if st = stats(rpc); st.EventsApplied >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("the stream: %s", describeKVStream(ctx, t, busAddr, namespace, n))
			t.Fatalf("after the faults the router applied %d of %d published events (%d lost): %v", st.EventsApplied, n, n-st.EventsApplied, st)
		}
	}
	fs := svc.FollowStats()
	queued, acked, failed := w.KVEventCounts()
	t.Logf("the worker: %d events queued, %d acknowledged, %d failed, %d waited in its ring; the stream: %s",
		queued, acked, failed, w.KVEventsDropped(), describeKVStream(ctx, t, busAddr, namespace, n))
	t.Logf("%d stream leader kill(s): %d KV events published, %d applied, %d duplicates dropped, %d gaps; %d filled from the worker's ring, %d rebuilds; %d index entries",
		kills, n, st.EventsApplied, st.EventsDuplicate, st.EventsGap, fs.Filled, fs.Rebuilds, st.IndexedEntries)
	if st.EventsApplied != n || st.EventsGap != 0 || st.IndexedEntries != n {
		t.Logf("the stream: %s", describeKVStream(ctx, t, busAddr, namespace, n))
		t.Fatalf("published %d events; router applied %d with %d gaps and %d index entries, want %d, 0 and %d",
			n, st.EventsApplied, st.EventsGap, st.IndexedEntries, n, n)
	}

	// A router that starts now replays the stream from the start.
	fresh, freshRPC := startRouterService(t, ctx, routertest.Config(reg.Addr, busAddr))
	var replayed *routerv1.GetStatsResponse
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if replayed = stats(freshRPC); replayed.EventsApplied >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a fresh router replayed %d of %d events", replayed.EventsApplied, n)
		}
	}
	t.Logf("a fresh router replayed the stream: %d applied, %d duplicates, %d filled from the worker's ring", replayed.EventsApplied, replayed.EventsDuplicate, fresh.FollowStats().Filled)
	if replayed.IndexedEntries != st.IndexedEntries || replayed.IndexedBlocks != st.IndexedBlocks || replayed.EventsGap != 0 {
		t.Fatalf("replayed index %d entries / %d blocks (%d gaps), live one %d / %d",
			replayed.IndexedEntries, replayed.IndexedBlocks, replayed.EventsGap, st.IndexedEntries, st.IndexedBlocks)
	}
}

// describeKVStream reads a namespace's whole stream and says where its KV
// event ids 1..n are: missing, stored twice, or stored after a later id
// (out of order), so that a failure tells a publish-side loss or reordering
// from one in the router's consumer.
func describeKVStream(ctx context.Context, t *testing.T, busAddr, namespace string, n uint64) string {
	t.Helper()
	bus := eventbustest.Client(t, busAddr)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sub, err := bus.Subscribe(sctx, &eventbusv1.SubscribeRequest{Namespace: namespace, FilterSubject: wire.KVEventsFilter(namespace),
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		return "not read: " + err.Error()
	}
	defer sub.Close()
	seqOf := map[uint64][]uint64{} // event id -> stream sequences
	var order []uint64             // event ids in stream order
	for seen := 0; seen < int(n); {
		ev, err := sub.Next(sctx)
		if err != nil {
			break
		}
		b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
		if err != nil {
			continue
		}
		for i := range b.GetEvents() {
			id := b.GetFirstEventId() + uint64(i)
			if len(seqOf[id]) == 0 {
				seen++
			}
			seqOf[id] = append(seqOf[id], ev.GetStreamSequence())
			order = append(order, id)
		}
	}
	var missing, twice, late []string
	for id := uint64(1); id <= n; id++ {
		switch len(seqOf[id]) {
		case 0:
			missing = append(missing, fmt.Sprint(id))
		case 1:
		default:
			twice = append(twice, fmt.Sprint(id, seqOf[id]))
		}
	}
	var high uint64
	for _, id := range order {
		if id < high {
			late = append(late, fmt.Sprintf("%d at seq %v after %d", id, seqOf[id], high))
		}
		high = max(high, id)
	}
	clip := func(s []string) []string { return s[:min(len(s), 20)] }
	return fmt.Sprintf("%d entries; missing %d %v; stored twice %d %v; out of order %d %v",
		len(order), len(missing), clip(missing), len(twice), clip(twice), len(late), clip(late))
}
