package core

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

const model = "Qwen/Qwen3-0.6B"

// cluster registers n workers serving model on dynamo/backend/generate.
func cluster(t testing.TB, cfg Config, n int) *Core {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.OverlapWeight == 0 {
		cfg.OverlapWeight = 1
	}
	c := New(cfg)
	var ins []registryclient.Change[*registryv1.Instance]
	var cards []registryclient.Change[*registryv1.ModelCard]
	for i := 1; i <= n; i++ {
		ins = append(ins, registryclient.Change[*registryv1.Instance]{Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
			InstanceId: uint64(i), Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}})
		cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
			InstanceId: uint64(i), ModelName: model, BlockSize: 4}})
	}
	c.OnInstances(ins)
	c.OnModels(cards)
	return c
}

func tokens(n int, salt uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)*7 + salt
	}
	return out
}

func modelTarget() *routerv1.Target {
	return &routerv1.Target{Kind: &routerv1.Target_Model{Model: model}}
}

// stored reports that instance holds the blocks of toks (block size 4).
func stored(c *Core, instance uint64, firstID uint64, toks []uint32) {
	blocks := kvhash.Hashes(toks, 4, nil)
	ev := &workerv1.KvBlocksStored{}
	for _, b := range blocks {
		ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: instance, FirstEventId: firstID, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
}

func TestKVRoutesToTheCachedWorker(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 3)
	prompt := tokens(64, 1)
	stored(c, 2, 1, prompt[:48])
	resp, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if resp.InstanceId != 2 || resp.OverlapBlocks != 12 || resp.RequestBlocks != 16 {
		t.Fatalf("routed to %d with overlap %d of %d; want instance 2, 12 of 16", resp.InstanceId, resp.OverlapBlocks, resp.RequestBlocks)
	}
	if len(resp.Candidates) != 3 || resp.Transport.GetTcp() != "10.0.0.1:1" || resp.Endpoint.GetEndpoint() != "generate" {
		t.Fatalf("response = %v", resp)
	}
	// Worker 2 now carries that request's prefill; an unrelated request goes elsewhere.
	other, err := c.Route(&routerv1.RouteRequest{RequestId: "b", Target: modelTarget(), TokenIds: tokens(64, 9)})
	if err != nil {
		t.Fatal(err)
	}
	if other.InstanceId == 2 {
		t.Fatalf("an unrelated request went to the loaded worker 2")
	}
	c.Free("a")
	c.Free("b")
	st := c.Stats()
	for _, w := range st.Workers {
		if w.Requests != 0 || w.PrefillBlocks != 0 || w.DecodeBlocks != 0 {
			t.Fatalf("load left after free: %v", w)
		}
	}
	if st.EventsApplied != 1 || st.IndexedEntries != 12 {
		t.Fatalf("stats = %v", st)
	}
}

// TestOmitCandidatesKeepsTheDecision routes the same requests on two cores
// in the same state, one asking for the candidates and one not: the
// decisions are the same, and only the first lists every worker.
func TestOmitCandidatesKeepsTheDecision(t *testing.T) {
	for _, mode := range []Mode{ModeKV, ModeRoundRobin, ModeRandom, ModeLeastLoaded} {
		t.Run(string(mode), func(t *testing.T) {
			// One virtual clock, still: the decisions depend on time.
			at := time.Unix(1000, 0)
			clock := func() time.Time { return at }
			full, bare := cluster(t, Config{Mode: mode, Clock: clock}, 5), cluster(t, Config{Mode: mode, Clock: clock}, 5)
			for _, c := range []*Core{full, bare} {
				stored(c, 3, 1, tokens(64, 1)[:32])
				stored(c, 4, 1, tokens(64, 2)[:48])
			}
			for i := range 20 {
				req := &routerv1.RouteRequest{RequestId: strconv.Itoa(i), Target: modelTarget(), TokenIds: tokens(64, uint32(i%4))}
				want, err := full.Route(req)
				if err != nil {
					t.Fatal(err)
				}
				req.OmitCandidates = true
				got, err := bare.Route(req)
				if err != nil {
					t.Fatal(err)
				}
				if got.InstanceId != want.InstanceId || got.OverlapBlocks != want.OverlapBlocks || got.RequestBlocks != want.RequestBlocks {
					t.Fatalf("request %d: without candidates routed to %d (overlap %d of %d), with them to %d (%d of %d)",
						i, got.InstanceId, got.OverlapBlocks, got.RequestBlocks, want.InstanceId, want.OverlapBlocks, want.RequestBlocks)
				}
				if len(got.Candidates) != 0 || len(want.Candidates) != 5 {
					t.Fatalf("request %d: %d candidates omitted, %d listed; want 0 and 5", i, len(got.Candidates), len(want.Candidates))
				}
			}
		})
	}
}

func TestWorkerThatLeavesLosesBlocksAndLoad(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 2)
	prompt := tokens(32, 3)
	stored(c, 1, 1, prompt)
	if _, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt}); err != nil {
		t.Fatal(err)
	}
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Deleted: true, Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: 1}}})
	if n := c.Index().Blocks(index.WorkerID{Instance: 1}); n != 0 {
		t.Fatalf("departed worker keeps %d blocks", n)
	}
	resp, err := c.Route(&routerv1.RouteRequest{RequestId: "b", Target: modelTarget(), TokenIds: prompt})
	if err != nil || resp.InstanceId != 2 || len(resp.Candidates) != 1 {
		t.Fatalf("after the departure: %v, %v", resp, err)
	}
}

func TestModes(t *testing.T) {
	t.Run("round-robin cycles", func(t *testing.T) {
		c := cluster(t, Config{Mode: ModeRoundRobin}, 3)
		var got []uint64
		for i := range 6 {
			r, err := c.Route(&routerv1.RouteRequest{RequestId: string(rune('a' + i)), Target: modelTarget(), TokenIds: tokens(8, 1)})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.InstanceId)
		}
		want := []uint64{1, 2, 3, 1, 2, 3}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("round-robin order %v, want %v", got, want)
			}
		}
	})
	t.Run("least-loaded spreads", func(t *testing.T) {
		c := cluster(t, Config{Mode: ModeLeastLoaded}, 2)
		a, _ := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: tokens(64, 1)})
		b, _ := c.Route(&routerv1.RouteRequest{RequestId: "b", Target: modelTarget(), TokenIds: tokens(64, 1)})
		if a.InstanceId == b.InstanceId {
			t.Fatalf("both requests on %d", a.InstanceId)
		}
	})
	t.Run("direct obeys", func(t *testing.T) {
		c := cluster(t, Config{Mode: ModeDirect}, 3)
		r, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: tokens(8, 1), InstanceId: 3})
		if err != nil || r.InstanceId != 3 {
			t.Fatalf("direct = %v, %v", r, err)
		}
		if _, err := c.Route(&routerv1.RouteRequest{RequestId: "b", Target: modelTarget(), TokenIds: tokens(8, 1), InstanceId: 9}); !errors.Is(err, ErrNoWorker) {
			t.Fatalf("direct to an unknown instance = %v", err)
		}
	})
	t.Run("approximate predicts from decisions", func(t *testing.T) {
		c := cluster(t, Config{Mode: ModeKV, Approximate: true, TTL: time.Minute, MaxTreeSize: 1 << 20, PruneTargetRatio: 0.8}, 4)
		prompt := tokens(64, 5)
		first, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt})
		if err != nil {
			t.Fatal(err)
		}
		c.Free("a")
		second, err := c.Route(&routerv1.RouteRequest{RequestId: "b", Target: modelTarget(), TokenIds: prompt})
		if err != nil {
			t.Fatal(err)
		}
		if second.InstanceId != first.InstanceId || second.OverlapBlocks != 16 {
			t.Fatalf("second turn went to %d with overlap %d; want %d with 16", second.InstanceId, second.OverlapBlocks, first.InstanceId)
		}
		stored(c, 4, 1, prompt) // events are ignored in approximate mode
		if st := c.Stats(); st.EventsApplied != 0 {
			t.Fatalf("approximate mode applied events: %v", st)
		}
	})
	t.Run("exclusion for migration", func(t *testing.T) {
		c := cluster(t, Config{Mode: ModeKV}, 2)
		prompt := tokens(32, 7)
		stored(c, 1, 1, prompt)
		r, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: []uint64{1}})
		if err != nil || r.InstanceId != 2 {
			t.Fatalf("with worker 1 excluded: %v, %v", r, err)
		}
		if _, err := c.Route(&routerv1.RouteRequest{RequestId: "b", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: []uint64{1, 2}}); !errors.Is(err, ErrNoWorker) {
			t.Fatalf("all excluded = %v, want ErrNoWorker", err)
		}
	})
}

func TestDuplicateAndLateEventsDoNotCorrupt(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 1)
	prompt := tokens(16, 2)
	stored(c, 1, 1, prompt)
	stored(c, 1, 1, prompt) // redelivered
	blocks := kvhash.Hashes(prompt, 4, nil)
	removed := &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{blocks[3].Sequence}}}}
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: 1, FirstEventId: 3, Events: []*workerv1.KvCacheEvent{removed}}) // after a gap
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: 1, FirstEventId: 2, Events: []*workerv1.KvCacheEvent{removed}}) // late
	st := c.Stats()
	if st.EventsApplied != 2 || st.EventsDuplicate != 2 || st.EventsGap != 1 || st.IndexedEntries != 3 {
		t.Fatalf("stats = %v", st)
	}
}

func TestBadRequests(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 1)
	neg, nan := -1.0, math.NaN()
	tests := []struct {
		name string
		req  *routerv1.RouteRequest
		want error
	}{
		{"no request id", &routerv1.RouteRequest{Target: modelTarget(), TokenIds: tokens(4, 1)}, ErrInvalid},
		{"no tokens", &routerv1.RouteRequest{RequestId: "a", Target: modelTarget()}, ErrInvalid},
		{"tokens and hashes", &routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: []uint32{1}, BlockHashes: []uint64{1}}, ErrInvalid},
		{"no target", &routerv1.RouteRequest{RequestId: "a", TokenIds: tokens(4, 1)}, ErrInvalid},
		{"negative weight", &routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: tokens(4, 1), OverlapWeight: &neg}, ErrInvalid},
		{"NaN temperature", &routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: tokens(4, 1), Temperature: &nan}, ErrInvalid},
		{"unknown model", &routerv1.RouteRequest{RequestId: "a", Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "nope"}}, TokenIds: tokens(4, 1)}, ErrUnknownModel},
		{"unknown endpoint", &routerv1.RouteRequest{RequestId: "a", Target: &routerv1.Target{Kind: &routerv1.Target_Endpoint{Endpoint: &routerv1.Endpoint{Namespace: "x", Component: "y", Endpoint: "z"}}}, TokenIds: tokens(4, 1)}, ErrUnknownEndpoint},
		{"partial endpoint", &routerv1.RouteRequest{RequestId: "a", Target: &routerv1.Target{Kind: &routerv1.Target_Endpoint{Endpoint: &routerv1.Endpoint{Namespace: "x"}}}, TokenIds: tokens(4, 1)}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Route(tt.req); !errors.Is(err, tt.want) {
				t.Fatalf("Route = %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzRoute(f *testing.F) {
	f.Add("req", "Qwen/Qwen3-0.6B", []byte{1, 2, 3, 4, 5, 6, 7, 8}, 1.0, 0.0)
	f.Add("", "", []byte{}, -1.0, math.Inf(1))
	c := New(Config{Mode: ModeKV, OverlapWeight: 1, Seed: 1})
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Item: &registryv1.Instance{Namespace: "n", Component: "c", Endpoint: "e", InstanceId: 1}}})
	c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "n", Component: "c", Endpoint: "e", InstanceId: 1, ModelName: "Qwen/Qwen3-0.6B", BlockSize: 2}}})
	f.Fuzz(func(t *testing.T, id, model string, raw []byte, weight, temp float64) {
		toks := make([]uint32, len(raw))
		for i, b := range raw {
			toks[i] = uint32(b)
		}
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: model}},
			TokenIds: toks, OverlapWeight: &weight, Temperature: &temp})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnknownTarget) && !errors.Is(err, ErrNoWorker) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if resp.InstanceId != 1 {
			t.Fatalf("routed to %d", resp.InstanceId)
		}
		c.Free(id)
	})
}

// Candidates are cached per target; every registry change must show in
// the next decision.
func TestRegistryChangesReachTheNextDecision(t *testing.T) {
	c := cluster(t, DefaultConfig(), 2)
	route := func(id string, exclude ...uint64) (uint64, error) {
		r, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: tokens(16, 1), ExcludeInstanceIds: exclude})
		if err != nil {
			return 0, err
		}
		return r.InstanceId, nil
	}
	if _, err := route("a"); err != nil {
		t.Fatal(err)
	}
	in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: 3,
		Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Item: in}})
	if _, err := route("b", 1, 2); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("a worker without a model card served the model: %v", err)
	}
	c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
		InstanceId: 3, ModelName: model, BlockSize: 4}}})
	if got, err := route("c", 1, 2); err != nil || got != 3 {
		t.Fatalf("the new worker: got %x, %v", got, err)
	}
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Item: in, Deleted: true}})
	if _, err := route("d", 1, 2); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("a worker that left still serves: %v", err)
	}
	if got, err := route("e"); err != nil || got == 3 {
		t.Fatalf("got %x, %v", got, err)
	}
}

// TestTimingVersion checks that the version of the timing models, which
// spares the scheduler's fill memo comparing every worker's model at every
// decision, changes whenever a model does: one published that differs, or
// one made for a worker. A report of the same model leaves it.
func TestTimingVersion(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 2)
	if _, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: tokens(16, 1)}); err != nil {
		t.Fatal(err)
	}
	slow := timingmodel.Default().Scaled(0.1)
	for i, step := range []struct {
		m       *workerv1.TimingModel
		changes bool
	}{
		{timingmodel.Default().Proto(), false}, // what the worker had
		{slow.Proto(), true},
		{slow.Proto(), false},
		{nil, true},                      // back to Default
		{&workerv1.TimingModel{}, false}, // invalid: Default again
	} {
		c.mu.Lock()
		before := c.timingVer
		c.mu.Unlock()
		c.ReportLoad(&workerv1.LoadMetrics{InstanceId: 1, TimingModel: step.m})
		c.mu.Lock()
		after, got := c.timingVer, *c.timing[1]
		c.mu.Unlock()
		if (after != before) != step.changes {
			t.Fatalf("step %d: version %d -> %d, want a change: %v", i, before, after, step.changes)
		}
		if want := timingmodel.FromProto(step.m); !got.Same(&want) {
			t.Fatalf("step %d: model %+v, want %+v", i, got, want)
		}
	}
}

// TestFreeBeforeRoute checks that a request freed before it is routed (its
// Free overtook its Route on another stream, or reached this replica
// before the routing replica's sync message) is answered but counted
// nowhere: not as load, not as a predicted prefix, not to the replicas.
func TestFreeBeforeRoute(t *testing.T) {
	for _, mode := range []Mode{ModeKV, ModeRoundRobin} {
		t.Run(string(mode), func(t *testing.T) {
			c := cluster(t, Config{Mode: mode}, 2)
			var heard []string
			c.SetObserver(recordingObserver{&heard})
			prompt := tokens(32, 5)
			c.Free("early")
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "early", Target: modelTarget(), TokenIds: prompt})
			if err != nil || resp.InstanceId == 0 {
				t.Fatalf("route after free: %v, %v", resp, err)
			}
			// Another replica's routing of a request this one freed first.
			c.Free("synced")
			c.ApplyReplica(RoutedEvent("synced", index.WorkerID{Instance: 2}, 8, []uint64{1, 2}), time.Now())
			for _, w := range c.Stats().GetWorkers() {
				if w.GetRequests() != 0 {
					t.Fatalf("worker %x counts %d requests, want none", w.GetInstanceId(), w.GetRequests())
				}
			}
			if len(heard) != 0 {
				t.Fatalf("replicas were told %v", heard)
			}
			// A request routed the usual way still counts.
			if _, err := c.Route(&routerv1.RouteRequest{RequestId: "late", Target: modelTarget(), TokenIds: prompt}); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, w := range c.Stats().GetWorkers() {
				n += int(w.GetRequests())
			}
			if n != 1 || len(heard) != 1 || heard[0] != "routed late" {
				t.Fatalf("after a normal route: %d requests counted, replicas told %v", n, heard)
			}
		})
	}
}

type recordingObserver struct{ heard *[]string }

func (o recordingObserver) Routed(id, _ string, _ index.WorkerID, _ int, _ []uint64, _ Leg, _, _ string) {
	*o.heard = append(*o.heard, "routed "+id)
}
func (o recordingObserver) PrefillDone(id string) {}
func (o recordingObserver) Freed(id string)       {}
