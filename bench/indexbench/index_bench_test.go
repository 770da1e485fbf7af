package indexbench_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/indexbench"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

func BenchmarkIngest(b *testing.B) {
	events := indexbench.Events(4096, 16, 1)
	x := index.New()
	b.ReportAllocs()
	b.ResetTimer()
	blocks := 0
	for i := range b.N {
		w := index.WorkerID{Instance: uint64(i%100 + 1)}
		ev := events[i%len(events)]
		x.Apply(w, 0, func(tx index.Tx) {
			if i%4 == 3 {
				tx.Remove(ev)
			} else {
				tx.Store(ev)
			}
		})
		blocks += len(ev)
	}
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
}

// workloads caches built indexes: the benchmark function runs several
// times while b.N ramps up, and building 2M entries takes seconds.
var workloads sync.Map

func BenchmarkOverlaps(b *testing.B) {
	for _, workers := range []int{100, 1000} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			entries := 2_000_000
			if testing.Short() {
				entries = 200_000
			}
			key := fmt.Sprint(workers, entries)
			v, ok := workloads.Load(key)
			if !ok {
				v, _ = workloads.LoadOrStore(key, indexbench.Build(workers, entries, 128, 1024, 7))
			}
			wl := v.(*indexbench.Workload)
			var dst []index.Overlap
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				dst = wl.Index.AppendOverlaps(dst[:0], wl.Requests[i%len(wl.Requests)])
			}
		})
	}
}

// BenchmarkBytesPerEntry measures heap per (block, worker) pair once; b.N
// only repeats lookups so the framework's ramp-up stays cheap.
func BenchmarkBytesPerEntry(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	wl := indexbench.Build(100, 500_000, 128, 16, 3)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(wl.Entries), "bytes/entry")
	b.ResetTimer()
	for i := range b.N {
		_ = wl.Index.Overlaps(wl.Requests[i%len(wl.Requests)])
	}
}

// BenchmarkPendingRoute times the predicted-block upkeep of one route
// decision the way Core.Route does it, at 100 workers: expire, extend
// every candidate's indexed overlap, predict the chosen worker's uncached
// blocks; and, as requests end 256 decisions later, every other one
// released (cancelled before its prefill) or done (its predictions kept
// for Grace). The clock moves 1 ms a decision, as in router-index-bench.
func BenchmarkPendingRoute(b *testing.B) {
	wl := indexbench.Build(100, 200_000, 128, 1024, 7)
	workers := make([]index.WorkerID, 100)
	for i := range workers {
		workers[i] = index.WorkerID{Instance: uint64(i + 1)}
	}
	// Each request's indexed overlap per worker, as the index gives it.
	overlaps := make([][]int, len(wl.Requests))
	for r, req := range wl.Requests {
		overlaps[r] = make([]int, len(workers))
		for _, o := range wl.Index.Overlaps(req) {
			overlaps[r][o.Worker.Instance-1] = o.Blocks
		}
	}
	p := index.NewPending(2 * time.Minute)
	now := time.Unix(1_700_000_000, 0)
	reach := make([]int, len(workers))
	ids := make([]string, 1<<16)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	step := func(i int) {
		now = now.Add(time.Millisecond)
		r := i % len(wl.Requests)
		req := wl.Requests[r]
		p.Expire(now)
		copy(reach, overlaps[r])
		p.ExtendAll(workers, req, reach)
		// The chosen worker: the longest reach, as a cheap stand-in for
		// the cost.
		best := 0
		for k := range reach {
			if reach[k] > reach[best] {
				best = k
			}
		}
		p.Add(ids[i%len(ids)], workers[best], req[overlaps[r][best]:], now)
		if i >= 256 {
			if old := ids[(i-256)%len(ids)]; i%2 == 0 {
				p.Done(old, now)
			} else {
				p.Release(old)
			}
		}
	}
	// The steady state: past the TTL of the first predictions.
	for i := range 130_000 {
		step(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		step(130_000 + i)
	}
}
