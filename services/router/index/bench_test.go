package index_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/index/indexbench"
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
