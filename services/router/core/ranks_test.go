package core

import (
	"fmt"
	"strings"
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// rankCluster is cluster with two workers: worker 1 serves one rank,
// worker 2 three data-parallel ranks (its card's data_parallel_size).
func rankCluster(t testing.TB, cfg Config) *Core {
	t.Helper()
	c := cluster(t, cfg, 2)
	c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend",
		Endpoint: "generate", InstanceId: 2, ModelName: model, BlockSize: 4, DataParallelSize: 3}}})
	return c
}

// storedOn reports that a rank of an instance holds the blocks of toks
// (block size 4).
func storedOnRank(c *Core, w index.WorkerID, firstID uint64, toks []uint32) {
	ev := &workerv1.KvBlocksStored{}
	for _, b := range kvhash.Hashes(toks, 4, nil) {
		ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: w.Instance, DpRank: w.DPRank, FirstEventId: firstID,
		Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
}

// TestRanksAreCandidates: each rank of a worker serving several is a
// candidate with its own cached prefix; the decision names the rank (the
// response, its candidates, ExplainRoute and its reason). A rank-blind
// router has one candidate per worker, credited with its best rank's
// prefix, and names rank 0; a rank no card declares is no candidate.
func TestRanksAreCandidates(t *testing.T) {
	prompt := tokens(64, 1)
	for _, tc := range []struct {
		name     string
		blind    bool
		cached   []index.WorkerID
		want     index.WorkerID
		overlap  uint32
		cands    []index.WorkerID
		inReason string
	}{
		{name: "prefix on rank 2", cached: []index.WorkerID{{Instance: 2, DPRank: 2}}, want: index.WorkerID{Instance: 2, DPRank: 2}, overlap: 16,
			cands: []index.WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 2, DPRank: 1}, {Instance: 2, DPRank: 2}}, inReason: "next best"},
		{name: "prefix on rank 0 of the ranked worker", cached: []index.WorkerID{{Instance: 2}}, want: index.WorkerID{Instance: 2}, overlap: 16,
			cands: []index.WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 2, DPRank: 1}, {Instance: 2, DPRank: 2}}},
		{name: "prefix on the one-rank worker", cached: []index.WorkerID{{Instance: 1}}, want: index.WorkerID{Instance: 1}, overlap: 16,
			cands: []index.WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 2, DPRank: 1}, {Instance: 2, DPRank: 2}}},
		{name: "a rank no card declares", cached: []index.WorkerID{{Instance: 1, DPRank: 1}, {Instance: 2, DPRank: 1}}, want: index.WorkerID{Instance: 2, DPRank: 1}, overlap: 16,
			cands: []index.WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 2, DPRank: 1}, {Instance: 2, DPRank: 2}}},
		{name: "rank-blind", blind: true, cached: []index.WorkerID{{Instance: 2, DPRank: 2}}, want: index.WorkerID{Instance: 2}, overlap: 16,
			cands: []index.WorkerID{{Instance: 1}, {Instance: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rankCluster(t, Config{Mode: ModeKV, RankBlind: tc.blind})
			for i, w := range tc.cached {
				storedOnRank(c, w, uint64(i+1), prompt)
			}
			ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: prompt})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt})
			if err != nil {
				t.Fatal(err)
			}
			if got := (index.WorkerID{Instance: resp.InstanceId, DPRank: resp.DpRank}); got != tc.want || resp.OverlapBlocks != tc.overlap {
				t.Fatalf("routed to %v with %d blocks cached, want %v with %d", got, resp.OverlapBlocks, tc.want, tc.overlap)
			}
			if got := (index.WorkerID{Instance: ex.InstanceId, DPRank: ex.DpRank}); got != tc.want {
				t.Fatalf("ExplainRoute picks %v, want %v", got, tc.want)
			}
			var cands, explained []index.WorkerID
			for _, cd := range resp.Candidates {
				cands = append(cands, index.WorkerID{Instance: cd.InstanceId, DPRank: cd.DpRank})
			}
			for _, cd := range ex.Candidates {
				explained = append(explained, index.WorkerID{Instance: cd.Candidate.InstanceId, DPRank: cd.Candidate.DpRank})
			}
			if fmt.Sprint(cands) != fmt.Sprint(tc.cands) || fmt.Sprint(explained) != fmt.Sprint(tc.cands) {
				t.Fatalf("candidates %v, explained %v, want %v", cands, explained, tc.cands)
			}
			if !strings.Contains(ex.Reason, tc.inReason) {
				t.Fatalf("reason %q lacks %q", ex.Reason, tc.inReason)
			}
		})
	}
}

// TestRankLoad: each rank has its own load: a rank's report weighs on that
// rank alone, a report of a rank the card does not declare is dropped,
// requests with no cached prefix spread over the idle ranks, and a worker
// that leaves takes every rank's load and blocks with it.
func TestRankLoad(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := rankCluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return now }})
	busy := &workerv1.LoadMetrics{InstanceId: 2, DpRank: 1, KvBlocksTotal: 4096, RunningRequests: 1,
		Requests: []*workerv1.RequestLoad{{RequestId: "other", PrefillTokens: 4000}}}
	c.ReportLoad(busy)
	c.ReportLoad(&workerv1.LoadMetrics{InstanceId: 2, DpRank: 3, KvBlocksTotal: 4096, RunningRequests: 1,
		Requests: []*workerv1.RequestLoad{{RequestId: "beyond", PrefillTokens: 4000}}})
	ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(64, 9)})
	if err != nil {
		t.Fatal(err)
	}
	cost := map[index.WorkerID]float64{}
	for _, cd := range ex.Candidates {
		cost[index.WorkerID{Instance: cd.Candidate.InstanceId, DPRank: cd.Candidate.DpRank}] = cd.Candidate.Cost
	}
	idle := cost[index.WorkerID{Instance: 2}]
	if busyCost := cost[index.WorkerID{Instance: 2, DPRank: 1}]; !(busyCost > idle) {
		t.Fatalf("rank 1 reported 4000 tokens queued but costs %v, rank 0 %v", busyCost, idle)
	}
	for _, w := range []index.WorkerID{{Instance: 1}, {Instance: 2, DPRank: 2}} {
		if cost[w] != idle {
			t.Fatalf("%v costs %v, not as idle as rank 0 (%v): %v", w, cost[w], idle, cost)
		}
	}
	routed := map[index.WorkerID]int{}
	for i := range 40 {
		now = now.Add(50 * time.Millisecond)
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: fmt.Sprint("r", i), Target: modelTarget(), TokenIds: tokens(64, uint32(100+i))})
		if err != nil {
			t.Fatal(err)
		}
		routed[index.WorkerID{Instance: resp.InstanceId, DPRank: resp.DpRank}]++
	}
	for _, w := range []index.WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 2, DPRank: 2}} {
		if routed[w] == 0 || routed[w] <= routed[index.WorkerID{Instance: 2, DPRank: 1}] {
			t.Fatalf("requests went %v: each idle rank should have some, and more than the busy rank 1", routed)
		}
	}
	st := c.Stats()
	var lines []string
	for _, w := range st.Workers {
		lines = append(lines, fmt.Sprintf("%s:%d", WorkerName(w.InstanceId, w.DpRank), w.Requests))
	}
	if len(st.Workers) != 4 || st.Workers[3].DpRank != 2 {
		t.Fatalf("stats lines %v, want one per rank", lines)
	}
	storedOnRank(c, index.WorkerID{Instance: 2, DPRank: 2}, 1, tokens(64, 1))
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Deleted: true, Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: 2}}})
	for r := range uint32(3) {
		w := index.WorkerID{Instance: 2, DPRank: r}
		if p, d, n := c.load.Of(w); p+d+n != 0 || c.idx.Blocks(w) != 0 {
			t.Fatalf("rank %d of a gone worker keeps %d prefill, %d decode blocks, %d requests, %d cached blocks", r, p, d, n, c.idx.Blocks(w))
		}
	}
}

// TestRankDirect: direct mode names an instance; of its ranks, the
// cheapest serves, and the reason says which.
func TestRankDirect(t *testing.T) {
	c := rankCluster(t, Config{Mode: ModeDirect})
	prompt := tokens(64, 3)
	storedOnRank(c, index.WorkerID{Instance: 2, DPRank: 1}, 1, prompt)
	ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: prompt, InstanceId: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ex.InstanceId != 2 || ex.DpRank != 1 || !strings.Contains(ex.Reason, "rank 1, the cheapest of its 3") {
		t.Fatalf("direct picks %x rank %d: %s", ex.InstanceId, ex.DpRank, ex.Reason)
	}
}

// TestRankCleared: a rank whose cache is cleared loses its predicted
// blocks; the other ranks keep theirs.
func TestRankCleared(t *testing.T) {
	c := rankCluster(t, Config{Mode: ModeKV})
	for r := range uint32(3) {
		w := index.WorkerID{Instance: 2, DPRank: r}
		c.pending.Add(fmt.Sprint("p", r), w, []uint64{uint64(10 + r)}, c.now())
	}
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: 2, DpRank: 1, FirstEventId: 1,
		Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}}})
	for r := range uint32(3) {
		w := index.WorkerID{Instance: 2, DPRank: r}
		if got, want := c.pending.Extend(w, []uint64{uint64(10 + r)}, 0), map[bool]int{true: 0, false: 1}[r == 1]; got != want {
			t.Fatalf("rank %d predicts %d blocks, want %d", r, got, want)
		}
	}
}
