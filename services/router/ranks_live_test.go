package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// TestLiveDataParallelRanks runs two mockers of two data-parallel ranks
// each (--data-parallel-size 2: four engines, four caches) through a
// router fed by their real KV events and load reports. A prompt served on
// one rank is indexed on that rank alone (its sibling rank of the same
// worker shows no overlap); the prompt again goes to that rank, which
// serves it from its cache. Long prompts with nothing cached, held in
// flight, spread over all four ranks; the router's stats list a line per rank.
func TestLiveDataParallelRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := stacktest.StartLive(t, ctx, 2, "--data-parallel-size", "2", "--num-gpu-blocks", "256", "--no-delay")
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}
	seq := func(from, n int) []uint32 {
		p := make([]uint32, n)
		for i := range p {
			p[i] = uint32(from + i)
		}
		return p
	}
	a := seq(3000, 20*16+5) // 20 full blocks
	overlaps := func() map[string]uint32 {
		t.Helper()
		resp, err := s.RPC.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: a})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for _, c := range resp.Candidates {
			out[core.WorkerName(c.InstanceId, c.DpRank)] = c.OverlapBlocks
		}
		return out
	}
	if o := overlaps(); len(o) != 4 {
		t.Fatalf("candidates %v, want 4 (two workers of two ranks)", o)
	}
	inst, rank, _, err := s.PlayRanked(ctx, "a0", a, 2)
	if err != nil {
		t.Fatal(err)
	}
	home := core.WorkerName(inst, rank)
	sibling := core.WorkerName(inst, 1-rank)
	var o map[string]uint32
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if o = overlaps(); o[home] == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never indexed the prompt on %s: %v", home, o)
		}
	}
	for name, n := range o {
		if name != home && n != 0 {
			t.Fatalf("overlaps %v: only %s served the prompt (its sibling rank %s has a cache of its own)", o, home, sibling)
		}
	}
	i2, r2, usage, err := s.PlayRanked(ctx, "a1", a, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := core.WorkerName(i2, r2); got != home || usage.GetCachedPromptTokens() != 20*16 {
		t.Fatalf("the prompt again went to %s with %d cached tokens; want %s with %d", got, usage.GetCachedPromptTokens(), home, 20*16)
	}

	// Eight long prompts with nothing cached, held in flight (routed, not
	// freed): the router's record of each rank's load spreads them. (Short
	// prompts sent in a burst may share one worker's prefill batch: at a
	// burst's arrival rate the cost prefers that to a batch of its own.)
	held := map[string]int{}
	for i := range 8 {
		id := fmt.Sprint("held", i)
		resp, err := s.RPC.Route(ctx, &routerv1.RouteRequest{RequestId: id, Target: target, TokenIds: seq(100000*(i+1), 4096), OmitCandidates: true})
		if err != nil {
			t.Fatal(err)
		}
		held[core.WorkerName(resp.InstanceId, resp.DpRank)]++
		defer func() { _, _ = s.RPC.Free(context.WithoutCancel(ctx), &routerv1.FreeRequest{RequestId: id}) }()
	}
	if len(held) != 4 {
		t.Fatalf("held requests went %v; want all four ranks used", held)
	}
	st, err := s.RPC.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range st.Workers {
		if name := core.WorkerName(w.InstanceId, w.DpRank); int(w.Requests) != held[name] {
			t.Fatalf("stats: %s has %d requests in flight, routed %d", name, w.Requests, held[name])
		}
	}
	if len(st.Workers) != 4 {
		t.Fatalf("stats list %d lines, want one per rank (4)", len(st.Workers))
	}
	t.Logf("prompt on %s (sibling %s: 0 blocks); held requests per rank %v", home, sibling, held)
}
