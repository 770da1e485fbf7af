package router_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/routerclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestJetStreamGapsFilledFromTheWorker writes a worker's KV events to the
// stream with some of them missing or out of order, as a stream leader kill
// can leave them (the eventbus pipelines a worker's batches; those in flight
// to the dying leader are lost, a later one delayed past the election is
// stored, and the lost ones are stored when resent with their msg ids, after
// it: seen on CI as events 226..240 stored after 241). The router (jetstream
// mode) must fill each gap from the worker's ring before it applies what
// follows, or rebuild from the worker's state when the ring no longer holds
// the missing events; and so must a router that replays the stream later.
func TestJetStreamGapsFilledFromTheWorker(t *testing.T) {
	const n = 12
	for _, tc := range []struct {
		name string
		ring int
		// drop tells the batches the worker does not publish; late says
		// whether they are published after the others, with their msg ids.
		drop         func(id uint64) bool
		late         bool
		filled       uint64
		wantRebuilds bool
	}{
		{name: "stored after later events", ring: 64, drop: func(id uint64) bool { return id >= 6 && id <= 8 }, late: true, filled: 3},
		{name: "never stored", ring: 64, drop: func(id uint64) bool { return id == 4 || id == 10 }, filled: 2},
		{name: "ring overrun: rebuilt from state", ring: 4, drop: func(id uint64) bool { return id >= 3 && id <= 9 }, wantRebuilds: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, reg := registrytest.Start(t)
			_, bus := eventbustest.Start(t)
			busAddr := bus.Addr().String()
			namespace := "gapfill"
			var (
				mu      sync.Mutex
				dropped []*workerv1.KvEventBatch
			)
			tcfg := transport.DefaultConfig()
			tcfg.TCP.Host = "127.0.0.1"
			w, err := worker.Start(ctx, worker.Config{
				Namespace: namespace, Component: "backend", Model: worker.Model{Name: "m", BlockSize: 4, ContextLength: 1024},
				RegistryAddr: reg.Addr, EventbusAddr: busAddr, Transport: tcfg, DrainTimeout: time.Second, KVEventsRing: tc.ring,
				DropKVEvent: func(b *workerv1.KvEventBatch) bool {
					if !tc.drop(b.GetFirstEventId()) {
						return false
					}
					mu.Lock()
					dropped = append(dropped, proto.CloneOf(b))
					mu.Unlock()
					return true
				},
			}, func(context.Context, *workerv1.GenerateRequest, func(*workerv1.GenerateResponse) error) error {
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Shutdown(context.Background())
			svc, rpc := startRouterService(t, ctx, routertest.Config(reg.Addr, busAddr))

			for id := uint64(1); id <= n; id++ {
				stored := &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: 1<<40 + id, LocalHash: id}}}
				w.PublishKVEvents(&workerv1.KvEventBatch{FirstEventId: id, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: stored}}}})
			}
			testwait.Until(t, 30*time.Second, "the worker's events acknowledged", func() bool { _, pub, _ := w.KVEventCounts(); return pub == n })
			if tc.late {
				// The resend of the lost batches, after the later ones.
				c := eventbustest.Client(t, busAddr)
				mu.Lock()
				late := dropped
				mu.Unlock()
				for _, b := range late {
					ev, err := eventbusclient.NewEvent(wire.KVEventsSubject(namespace, "backend"), b, eventbusclient.WithMsgID(wire.KVEventsMsgID(b.InstanceId, b.DpRank, b.FirstEventId)))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := c.PublishEvent(ctx, ev); err != nil {
						t.Fatal(err)
					}
				}
			}
			check := func(who string, svc *router.Service, rpc routerv1.RouterServiceClient) {
				t.Helper()
				var st *routerv1.GetStatsResponse
				testwait.Until(t, 30*time.Second, who+" indexes every block", func() bool {
					var err error
					st, err = rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
					if err != nil {
						t.Fatal(err)
					}
					// Every stored entry seen: applied, filled or rebuilt,
					// and the late copies dropped.
					seen := st.IndexedEntries == n
					if tc.late {
						seen = seen && st.EventsDuplicate >= uint64(len(dropped))
					}
					return seen
				})
				fs := svc.FollowStats()
				t.Logf("%s: %d entries, %d applied, %d duplicates, %d gaps; %d filled from the ring, %d rebuilds, %d unfilled",
					who, st.IndexedEntries, st.EventsApplied, st.EventsDuplicate, st.EventsGap, fs.Filled, fs.Rebuilds, fs.Unfilled)
				if st.EventsGap != 0 || fs.Unfilled != 0 || fs.Filled != tc.filled || (fs.Rebuilds > 0) != tc.wantRebuilds {
					t.Fatalf("%s: %d gaps applied past, %d unfilled, %d filled, %d rebuilds; want 0, 0, %d, rebuilt %v",
						who, st.EventsGap, fs.Unfilled, fs.Filled, fs.Rebuilds, tc.filled, tc.wantRebuilds)
				}
			}
			check("the live router", svc, rpc)
			fresh, frpc := startRouterService(t, ctx, routertest.Config(reg.Addr, busAddr))
			check("a router replaying the stream", fresh, frpc)
		})
	}
}

// startRouterService starts a router and dials it; both stop in t's cleanup.
func startRouterService(t *testing.T, ctx context.Context, cfg router.Config) (*router.Service, routerv1.RouterServiceClient) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	svc, err := router.Start(rctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("router: %v", err)
		}
	})
	if err := routertest.WaitReady(rctx, svc); err != nil {
		t.Fatal(err)
	}
	cc, err := routerclient.Dial([]string{svc.Addr().String()}, routerclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return svc, cc
}
