package core

import (
	"testing"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// storedOn reports that instance holds the blocks of toks on medium m.
func storedOn(c *Core, instance, id uint64, toks []uint32, m workerv1.KvMedium) {
	ev := &workerv1.KvBlocksStored{Medium: m}
	for _, b := range kvhash.Hashes(toks, 4, nil) {
		ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: instance, FirstEventId: id, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
}

// TestTierCredit routes a prompt cached on GPU by one worker, on host
// memory by another and nowhere on the third: the GPU worker costs least,
// the host one less than the miss; with the GPU worker gone the host one
// wins. Blind to tiers (KVTiers false) the host worker's blocks are gone.
func TestTierCredit(t *testing.T) {
	prompt := tokens(256, 1)
	costs := func(c *Core) map[uint64]float64 {
		t.Helper()
		resp, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: prompt})
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]float64{}
		for _, cd := range resp.Candidates {
			out[cd.InstanceId] = cd.Cost
		}
		return out
	}
	c := cluster(t, Config{Mode: ModeKV, KVTiers: true}, 3)
	storedOn(c, 1, 1, prompt, workerv1.KvMedium_KV_MEDIUM_GPU)
	storedOn(c, 2, 1, prompt, workerv1.KvMedium_KV_MEDIUM_GPU)
	storedOn(c, 2, 2, prompt, workerv1.KvMedium_KV_MEDIUM_CPU) // the whole prompt moves to host
	got := costs(c)
	if !(got[1] < got[2] && got[2] < got[3]) {
		t.Fatalf("costs %v: want gpu (1) < host (2) < miss (3)", got)
	}
	if n := c.TierEntries(); n != [3]int{64, 0, 0} {
		t.Fatalf("tier entries %v, want 64 on cpu", n)
	}
	resp, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: []uint64{1}})
	if err != nil || resp.InstanceId != 2 || resp.OverlapBlocks != 64 {
		t.Fatalf("without the GPU worker: routed to %d (overlap %d), %v; want 2 with 64 blocks", resp.GetInstanceId(), resp.GetOverlapBlocks(), err)
	}

	blind := cluster(t, Config{Mode: ModeKV, KVTiers: false}, 3)
	storedOn(blind, 2, 1, prompt, workerv1.KvMedium_KV_MEDIUM_GPU)
	storedOn(blind, 2, 2, prompt, workerv1.KvMedium_KV_MEDIUM_CPU)
	if g := costs(blind); g[2] != g[3] {
		t.Fatalf("blind to tiers, costs %v: want the host worker priced as a miss", g)
	}
}

// TestUnknownMedium: a medium the router does not know (KV_MEDIUM_UNKNOWN,
// or a number a newer publisher sends) is counted and its blocks are kept
// on the unknown tier, not dropped; a known medium counts nothing, nor
// does a duplicate.
func TestUnknownMedium(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV, KVTiers: true}, 1)
	storedOn(c, 1, 1, tokens(16, 1), workerv1.KvMedium_KV_MEDIUM_CPU)
	storedOn(c, 1, 2, tokens(16, 2), workerv1.KvMedium_KV_MEDIUM_UNKNOWN)
	storedOn(c, 1, 3, tokens(16, 3), workerv1.KvMedium(42))
	storedOn(c, 1, 3, tokens(16, 3), workerv1.KvMedium(42)) // duplicate id
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: 1, FirstEventId: 4, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Removed{
		Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{kvhash.Hashes(tokens(16, 2), 4, nil)[0].Sequence}, Medium: workerv1.KvMedium(42)}}}}})
	if ev, _ := c.UnknownMedium(); ev != 3 {
		t.Fatalf("unknown-medium events %d, want 3", ev)
	}
	if n := c.TierEntries(); n != [3]int{4, 0, 7} {
		t.Fatalf("tier entries %v, want 4 cpu, 7 unknown (one of 8 removed)", n)
	}
	c.ResetWorker(index.WorkerID{Instance: 1}, 9, []uint64{1, 2, 3}, []workerv1.KvMedium{workerv1.KvMedium_KV_MEDIUM_DISK, 7})
	if _, blocks := c.UnknownMedium(); blocks != 1 {
		t.Fatalf("unknown-medium state blocks %d, want 1", blocks)
	}
	if n := c.TierEntries(); n != [3]int{0, 1, 1} {
		t.Fatalf("after the reset: tier entries %v, want 1 disk, 1 unknown (and one gpu)", n)
	}
}
