// Command router-index-bench measures the router's KV index: event ingest
// rate on one core, lookup (route) latency percentiles with 100 and 1,000
// workers over 2 million indexed blocks and 128-block requests, and heap
// bytes per indexed (block, worker) pair.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/index/indexbench"
)

func main() {
	entries := flag.Int("entries", 2_000_000, "indexed (block, worker) pairs")
	lookups := flag.Int("lookups", 20_000, "lookups timed per worker count")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tvalue\t")

	events := indexbench.Events(4096, 16, 1)
	x := index.New()
	start := time.Now()
	blocks := 0
	for i := 0; time.Since(start) < 2*time.Second; i++ {
		ev := events[i%len(events)]
		x.Store(index.WorkerID{Instance: uint64(i%100 + 1)}, ev)
		blocks += len(ev)
	}
	fmt.Fprintf(tw, "ingest, one core\t%.2fM block events/s\t\n", float64(blocks)/time.Since(start).Seconds()/1e6)

	for _, workers := range []int{100, 1000} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		wl := indexbench.Build(workers, *entries, 128, 1024, 7)
		runtime.GC()
		runtime.ReadMemStats(&after)
		lat := make([]time.Duration, *lookups)
		var dst []index.Overlap
		for i := range lat {
			t0 := time.Now()
			dst = wl.Index.AppendOverlaps(dst[:0], wl.Requests[i%len(wl.Requests)])
			lat[i] = time.Since(t0)
		}
		slices.Sort(lat)
		fmt.Fprintf(tw, "lookup, %d workers, %.1fM entries, 128 blocks: p50\t%.1f µs\t\n", workers, float64(wl.Entries)/1e6, us(lat[len(lat)/2]))
		fmt.Fprintf(tw, "lookup, %d workers: p99\t%.1f µs\t\n", workers, us(lat[len(lat)*99/100]))
		fmt.Fprintf(tw, "heap per (block, worker), %d workers\t%.1f bytes\t\n", workers, float64(after.HeapAlloc-before.HeapAlloc)/float64(wl.Entries))
		runtime.KeepAlive(wl)
	}
	_ = tw.Flush()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
