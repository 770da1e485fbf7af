package indexbench_test

import (
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/indexbench"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// BenchmarkRoute times Core.Route at 100 workers with its allocations, in
// the state router-index-bench times it in (on a smaller index: the
// allocations do not depend on its size), 256 requests in flight.
func BenchmarkRoute(b *testing.B) {
	wl := indexbench.Build(100, 200_000, 128, 1024, 7)
	// A virtual clock, 1 ms a decision as router-index-bench's: on the
	// wall clock, predictions expired by how slowly the bench ran (under
	// callgrind, differently every run).
	now := time.Unix(1_700_000_000, 0)
	c, target := indexbench.RouteCoreClock(wl, func() time.Time { return now })
	// Ids made before, hashes given (RouteOwned, as the service's handlers
	// do) and responses recycled (as a RouteStream does): the allocations
	// reported are the decision's own.
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(time.Millisecond)
		id := ids[i]
		resp, err := c.RouteOwned(&routerv1.RouteRequest{RequestId: id, Target: target, BlockHashes: wl.Requests[i%len(wl.Requests)]})
		if err != nil {
			b.Fatal(err)
		}
		core.Recycle(resp)
		if i%2 == 0 {
			c.PrefillDone(id)
		}
		if i >= 256 {
			c.Free(ids[i-256])
		}
	}
}

// BenchmarkDecision times one route decision at 100 workers, a
// single-target one (an aggregated model) beside a pair (50 prefill and
// 50 decode workers, the same index, loads and requests) and beside the
// same 100 candidates as the data-parallel ranks of 50 workers of 2 ranks
// (the same index, loads and requests), and reports each
// decision's p50 and p99 (ns) beside the mean. The index has 200,000
// entries; SWITCHYARD_BENCH_ENTRIES sets another size (2000000: 100
// workers x 2M blocks).
//
// Two more cases time the production features: tokens sends token ids,
// as the frontend does, which the router hashes (no feature on); five
// turns on all five at once over a workload of the same shape (a
// quarter of the blocks on the host tier, 50 workers of 2 data-parallel
// ranks, a cache salt and one adapter of 20 hashed into every block, 4
// adapter slots per worker, and a session per request of the workload,
// whose turns are that request again: a conversation's turns share its
// prefix). Compare five with tokens of the same run.
//
// tokens_events and five_events are tokens and five with the workers'
// KV events as a fleet sends them (see timeDecisionsEvents): a request's
// predictions are confirmed once its prefill would end, not left until
// their grace period expires, so the router's pending table holds what a
// fleet's would.
func BenchmarkDecision(b *testing.B) {
	entries := 200_000
	if v, err := strconv.Atoi(os.Getenv("SWITCHYARD_BENCH_ENTRIES")); err == nil && v > 0 {
		entries = v
	}
	wl := indexbench.Build(100, entries, 128, 1024, 7)
	for _, bc := range []struct {
		name            string
		prefill, dpSize int
	}{{"single", 0, 1}, {"pair", 50, 1}, {"ranks", 0, 2}} {
		b.Run(bc.name, func(b *testing.B) {
			wl.DPSize = bc.dpSize
			timeDecisions(b, wl, bc.prefill)
		})
	}
	plain := indexbench.BuildTokens(100, entries, 128, 1024, 7, kvhash.Extra{})
	b.Run("tokens", func(b *testing.B) { timeDecisions(b, plain, 0) })
	five := indexbench.BuildTokens(100, entries, 128, 1024, 7, kvhash.Extra{Salt: "tenant-a", LoRA: "adapter-0"})
	five.CPUShare, five.DPSize, five.LoRAs, five.Sessions = 0.25, 2, 20, len(five.TokenRequests)
	b.Run("five", func(b *testing.B) { timeDecisions(b, five, 0) })
	b.Run("tokens_events", func(b *testing.B) { timeDecisionsEvents(b, plain, 0, true) })
	b.Run("five_events", func(b *testing.B) { timeDecisionsEvents(b, five, 0, true) })
}

// timeDecisions times b.N route decisions over wl (a pair's when prefill
// workers of it are prefill workers) on a virtual clock, 1 ms a decision,
// with 256 of the router's requests in flight and the load reports sent
// again every 1,000 decisions, and reports the decisions' p50 and p99 on
// the wall clock and, where the OS measures it, in the thread's CPU time
// (cpu-p50-ns, cpu-p99-ns): on a shared machine the wall clock's tail is
// mostly the time the thread waited for a core.
func timeDecisions(b *testing.B, wl *indexbench.Workload, prefill int) {
	timeDecisionsEvents(b, wl, prefill, false)
}

// timeDecisionsEvents is timeDecisions, with the KV events of the chosen
// workers when events is set: a request's blocks past its overlap (those
// its prefill computes) are stored, one event on its worker or rank, once
// the default timing model's prefill of them on an idle engine has passed
// on the clock (about 25 ms, 25 decisions, for 32 new blocks), which
// confirms its predictions as an engine's events do; they are removed
// again when the request is freed, standing in for the engine's
// evictions, so that the index keeps the workload's size and contents and
// every case sees the same cache hits. The events are applied between
// decisions, outside the timed part.
func timeDecisionsEvents(b *testing.B, wl *indexbench.Workload, prefill int, events bool) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	c, target := indexbench.RoutePairCoreClock(wl, clock, prefill)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	sessions := make([]string, wl.Sessions)
	for i := range sessions {
		sessions[i] = "session-" + strconv.Itoa(i)
	}
	// Requests of token ids are the frontend's, which omits the
	// candidates from the response.
	req := &routerv1.RouteRequest{Target: target, CacheSalt: wl.Salt, LoraName: wl.LoRA, OmitCandidates: wl.TokenRequests != nil}
	took, cpu := make([]time.Duration, b.N), make([]time.Duration, b.N)
	cpuOK := true
	var kv *kvEvents
	if events {
		kv = newKVEvents(c, wl, b.N)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(time.Millisecond)
		if i%1000 == 999 {
			indexbench.ReportLoads(c, wl)
		}
		kv.storeDue(i)
		id := ids[i]
		req.RequestId = id
		wl.FillRequest(req, i, sessions)
		c0, ok0 := indexbench.ThreadCPU()
		start := time.Now()
		resp, err := c.RouteOwned(req)
		took[i] = time.Since(start)
		c1, ok1 := indexbench.ThreadCPU()
		cpu[i], cpuOK = c1-c0, cpuOK && ok0 && ok1
		if err != nil {
			b.Fatal(err)
		}
		if (prefill > 0) != (resp.Prefill != nil) {
			b.Fatalf("prefill leg %v in a decision of %d prefill workers", resp.Prefill, prefill)
		}
		kv.routed(i, resp)
		core.Recycle(resp)
		if i%2 == 0 {
			c.PrefillDone(id)
		}
		if i >= 256 {
			c.Free(ids[i-256])
			kv.remove(i - 256)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	if cpuOK {
		slices.Sort(cpu)
		b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "cpu-p50-ns")
		b.ReportMetric(float64(cpu[len(cpu)*99/100].Nanoseconds()), "cpu-p99-ns")
	}
}

// kvEvents sends the chosen workers' KV events of timeDecisionsEvents. A
// nil *kvEvents sends none.
type kvEvents struct {
	c  *core.Core
	wl *indexbench.Workload
	// Per decision: the worker it chose and the first block its prefill
	// computes (its overlap there).
	worker []index.WorkerID
	from   []int
	// due[t % len(due)] lists the decisions whose blocks are stored
	// before decision t.
	due    [][]int
	timing timingmodel.Model
}

func newKVEvents(c *core.Core, wl *indexbench.Workload, n int) *kvEvents {
	return &kvEvents{c: c, wl: wl, worker: make([]index.WorkerID, n), from: make([]int, n), due: make([][]int, 256), timing: timingmodel.Default()}
}

// routed records decision i and schedules its stored event.
func (k *kvEvents) routed(i int, resp *routerv1.RouteResponse) {
	if k == nil {
		return
	}
	hashes := k.wl.Requests[i%len(k.wl.Requests)]
	k.worker[i] = index.WorkerID{Instance: resp.InstanceId, DPRank: resp.DpRank}
	k.from[i] = min(int(resp.OverlapBlocks), len(hashes))
	// The clock moves 1 ms a decision; RouteCore's cards declare 16
	// tokens a block.
	tokens := float64((len(hashes) - k.from[i]) * 16)
	at := i + 1 + int(math.Ceil(k.timing.PrefillMs(tokens)))
	if at-i >= len(k.due) {
		at = i + len(k.due) - 1 // stored before the request is freed
	}
	k.due[at%len(k.due)] = append(k.due[at%len(k.due)], i)
}

// storeDue sends the stored events due before decision t.
func (k *kvEvents) storeDue(t int) {
	if k == nil {
		return
	}
	slot := t % len(k.due)
	for _, i := range k.due[slot] {
		hashes := k.wl.Requests[i%len(k.wl.Requests)][k.from[i]:]
		if len(hashes) == 0 {
			continue
		}
		ev := &workerv1.KvBlocksStored{Blocks: make([]*workerv1.KvBlock, len(hashes))}
		for j, h := range hashes {
			ev.Blocks[j] = &workerv1.KvBlock{SequenceHash: h}
		}
		k.c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: k.worker[i].Instance, DpRank: k.worker[i].DPRank,
			Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
	}
	k.due[slot] = k.due[slot][:0]
}

// remove sends the removed event of decision i's stored blocks.
func (k *kvEvents) remove(i int) {
	if k == nil {
		return
	}
	hashes := k.wl.Requests[i%len(k.wl.Requests)][k.from[i]:]
	if len(hashes) == 0 {
		return
	}
	k.c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: k.worker[i].Instance, DpRank: k.worker[i].DPRank,
		Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: hashes}}}}})
}
