package router_test

import (
	"context"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestJetStreamDropsDepartedWorkers: in jetstream mode the stream keeps the
// KV events of workers that have left. A router that starts after one left
// replays them, and must not keep that worker's blocks; a batch that arrives
// after a worker's deregistration (its last one, late) must not bring its
// blocks back either. Only the workers the registry lists stay indexed.
func TestJetStreamDropsDepartedWorkers(t *testing.T) {
	const ns, blocks = "departed", 40
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busAddr := bus.Addr().String()
	busClient := eventbustest.Client(t, busAddr)
	start := func() *worker.Worker {
		t.Helper()
		tc := transport.DefaultConfig()
		tc.TCP.Host = "127.0.0.1"
		w, err := worker.Start(ctx, worker.Config{Namespace: ns, Component: "backend", Model: worker.Model{Name: "m", BlockSize: 4, ContextLength: 1024},
			RegistryAddr: reg.Addr, EventbusAddr: busAddr, Transport: tc, LeaseTTL: 5 * time.Second, DrainTimeout: time.Second,
		}, func(context.Context, *workerv1.GenerateRequest, func(*workerv1.GenerateResponse) error) error {
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
		return w
	}
	// stored is the batch of event id of a chain of blocks under base.
	stored := func(base, id uint64) *workerv1.KvEventBatch {
		s := &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: base + id, LocalHash: id}}}
		if id > 1 {
			parent := base + id - 1
			s.ParentSequenceHash = &parent
		}
		return &workerv1.KvEventBatch{FirstEventId: id, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: s}}}}
	}
	publish := func(w *worker.Worker, base uint64, from, to uint64) {
		t.Helper()
		for id := from; id <= to; id++ {
			w.PublishKVEvents(stored(base, id))
		}
		for {
			queued, published, lost := w.KVEventCounts()
			if lost > 0 {
				t.Fatalf("%d KV events lost", lost)
			}
			if published == queued {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("KV events not acknowledged: %d of %d", published, queued)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// straggler publishes a batch of instance id straight to the stream, as
	// the worker's last batch arriving after its deregistration would.
	straggler := func(id, base, eventID uint64) {
		t.Helper()
		b := stored(base, eventID)
		b.InstanceId = id
		if _, err := busClient.Publish(ctx, wire.KVEventsSubject(ns, "backend"), b); err != nil {
			t.Fatal(err)
		}
	}
	var last *routerv1.GetStatsResponse
	// waitIndex waits until the router indexes exactly want (instance ->
	// cached blocks). The per-worker stats name only listed workers; the
	// index's entries (every worker's blocks: no two workers share a hash
	// here) count the others too.
	waitIndex := func(rpc routerv1.RouterServiceClient, want map[uint64]uint64) {
		t.Helper()
		var entries uint64
		for _, n := range want {
			entries += n
		}
		for {
			st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
			if err == nil {
				last = st
				got := map[uint64]uint64{}
				for _, w := range st.Workers {
					if w.CachedBlocks > 0 {
						got[w.InstanceId] = w.CachedBlocks
					}
				}
				if len(got) == len(want) && st.IndexedEntries == entries {
					same := true
					for id, n := range want {
						same = same && got[id] == n
					}
					if same {
						return
					}
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("router indexes %d entries, listed workers %v (%v); want %v", last.GetIndexedEntries(), last.GetWorkers(), err, want)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	// gone registers, publishes and leaves before any router runs.
	gone := start()
	goneID := gone.InstanceID()
	publish(gone, 1<<40, 1, blocks)
	if err := gone.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	stays := start()
	publish(stays, 2<<40, 1, blocks)

	rpc, _ := routertest.Start(t, ctx, routertest.Config(reg.Addr, busAddr))
	// The replay passes gone's events on its way to stays': only stays'
	// blocks are left.
	waitIndex(rpc, map[uint64]uint64{stays.InstanceID(): blocks})

	// A late batch of gone after the router has dropped it is skipped: with
	// a batch of stays published after it, both are in once stays' is.
	straggler(goneID, 1<<40, blocks+1)
	publish(stays, 2<<40, blocks+1, blocks+1)
	waitIndex(rpc, map[uint64]uint64{stays.InstanceID(): blocks + 1})

	// A worker that leaves while the router runs: the DELETE drops its
	// blocks, and its late batch does not bring them back.
	late := start()
	lateID := late.InstanceID()
	publish(late, 3<<40, 1, blocks)
	waitIndex(rpc, map[uint64]uint64{stays.InstanceID(): blocks + 1, lateID: blocks})
	if err := late.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitIndex(rpc, map[uint64]uint64{stays.InstanceID(): blocks + 1})
	straggler(lateID, 3<<40, blocks+1)
	publish(stays, 2<<40, blocks+2, blocks+2)
	waitIndex(rpc, map[uint64]uint64{stays.InstanceID(): blocks + 2})
}
