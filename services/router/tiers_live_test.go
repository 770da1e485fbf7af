package router_test

import (
	"context"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// TestLiveHostTier runs three mockers with a small GPU cache (64 blocks)
// and a host tier, through a router with their real KV events. A prompt
// is cached on two workers' GPUs; two other prompts push it to one's host
// tier. The router, told so by the medium of that worker's events, prices
// it (in one decision, so at one load) above the worker that still has
// the prompt on GPU and below the one that never saw it; with the GPU
// worker out of the way it routes the prompt back to the host worker,
// which loads the prefix from host instead of computing it.
func TestLiveHostTier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := stacktest.StartLive(t, ctx, 3, "--num-gpu-blocks", "64", "--host-kv-blocks", "256", "--no-delay")
	seq := func(from, n int) []uint32 {
		p := make([]uint32, n)
		for i := range p {
			p[i] = uint32(from + i)
		}
		return p
	}
	a := seq(2000, 32*16+8) // 32 full blocks
	costs := func() map[uint64]*routerv1.Candidate {
		t.Helper()
		resp, err := s.RPC.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}, TokenIds: a})
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]*routerv1.Candidate{}
		for _, c := range resp.Candidates {
			out[c.InstanceId] = c
		}
		return out
	}
	var ids []uint64
	for id := range costs() {
		ids = append(ids, id)
	}
	if len(ids) != 3 {
		t.Fatalf("%d workers, want 3", len(ids))
	}
	// The prompt on two workers' GPUs: home (which will offload it) and gpu.
	home, gpu, cold := ids[0], ids[1], ids[2]
	for i, w := range []uint64{home, gpu} {
		if got, _, err := s.PlayExcept(ctx, "a"+string(rune('0'+i)), a, 2, without(ids, w)...); err != nil || got != w {
			t.Fatalf("prompt went to %x, %v; want %x", got, err, w)
		}
	}
	// Two prompts of 50 blocks on home evict the first one's blocks from
	// its GPU (least recently used first) to its host tier.
	for i, p := range [][]uint32{seq(100000, 50*16), seq(200000, 50*16)} {
		if w, _, err := s.PlayExcept(ctx, "fill"+string(rune('0'+i)), p, 2, gpu, cold); err != nil || w != home {
			t.Fatalf("filler went to %x, %v; want %x", w, err, home)
		}
	}
	var c map[uint64]*routerv1.Candidate
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c = costs()
		if c[home].GetOverlapBlocks() == 32 && c[gpu].GetOverlapBlocks() == 32 && c[home].Cost > c[gpu].Cost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never saw the prompt move to host on %x: %v", home, c)
		}
	}
	if !(c[gpu].Cost < c[home].Cost && c[home].Cost < c[cold].Cost) {
		t.Fatalf("costs: GPU hit %v, host hit %v, miss %v; want GPU < host < miss", c[gpu].Cost, c[home].Cost, c[cold].Cost)
	}
	t.Logf("costs: GPU hit %.2f ms, host hit %.2f ms, miss %.2f ms", c[gpu].Cost, c[home].Cost, c[cold].Cost)
	w, usage, err := s.PlayExcept(ctx, "again", a, 2, gpu)
	if err != nil {
		t.Fatal(err)
	}
	if w != home || usage.GetCachedPromptTokens() != 32*16 {
		t.Fatalf("the prompt again went to %x with %d cached tokens; want %x (its host tier) with %d", w, usage.GetCachedPromptTokens(), home, 32*16)
	}
}

// without is ids less id.
func without(ids []uint64, id uint64) []uint64 {
	var out []uint64
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}
