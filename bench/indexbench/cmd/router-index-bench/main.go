// Command router-index-bench measures the router's KV index: event ingest
// rate on one core, lookup latency percentiles with 100 and 1,000 workers
// (--workers) over 2 million indexed blocks (--entries) and 128-block
// requests, the whole route decision (index, predicted blocks, load merge,
// cost in time) at 100 workers (--route-workers), and heap bytes per
// indexed (block, worker) pair.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/bench/indexbench"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

func main() {
	entries := flag.Int("entries", 2_000_000, "indexed (block, worker) pairs")
	lookups := flag.Int("lookups", 20_000, "lookups timed per worker count")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	cpuShare := flag.Float64("cpu-share", 0, "share of each worker's blocks the route decision's router holds on the host tier (KV events with medium cpu), by hash: 0 is a fleet without tiers")
	dpSize := flag.Int("dp-size", 1, "the route decision's router sees its 100 workers as data-parallel ranks, this many per instance (100/N instances of N ranks, cards declaring N): the same candidates, blocks and load, routed to (instance, rank)")
	tokens := flag.Bool("tokens", false, "the route decision's requests carry token ids, as the frontend sends them, which the router hashes (implied by --cache-salt and --loras); without, block hashes")
	salt := flag.String("cache-salt", "", "the route decision's requests carry this cache_salt, and the workers' blocks are hashed with it")
	loras := flag.Int("loras", 0, "the route decision's workers list this many LoRA adapters on their cards (4 slots, 4 loaded each, a different run per worker) and the requests name one of them, their blocks hashed with it: filtered to the workers listing it and priced with its load where not loaded")
	sessions := flag.Int("sessions", 0, "the route decision's requests carry session ids, this many distinct ones taken in turn (bound at the first turn, later turns through the binding)")
	fleets := sizesFlag("workers", "worker counts whose lookups are timed, comma-separated", []int{100, 1000})
	routeFleets := sizesFlag("route-workers", "worker counts (of --workers) whose whole route decision is timed, comma-separated", []int{100})
	warmup := flag.Int("route-warmup", 70_000, "route decisions made, untimed, before the timed ones, at 1 ms of virtual time each: past the predictions' grace and the freed-request memory, so that the router's tables have stopped growing (0: time a fresh router)")
	flag.Parse()
	if *dpSize < 1 || *dpSize > 100 {
		fmt.Fprintln(os.Stderr, "router-index-bench: --dp-size must be between 1 and 100")
		os.Exit(2)
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	runtime.GOMAXPROCS(1)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tvalue\t")

	// Ingest: engines' stored events of 16 new blocks each (conversations
	// that grow), spread over 100 workers, into an index that grows to
	// *entries pairs.
	events := indexbench.Events(*entries/16, 16, 1)
	x := index.New()
	start := time.Now()
	blocks := 0
	for i, ev := range events {
		x.Apply(index.WorkerID{Instance: uint64(i%100 + 1)}, 0, func(tx index.Tx) { tx.Store(ev) })
		blocks += len(ev)
	}
	fmt.Fprintf(tw, "ingest, one core, %.1fM new blocks\t%.2fM block events/s\t\n", float64(blocks)/1e6, float64(blocks)/time.Since(start).Seconds()/1e6)

	for _, workers := range *fleets {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		wl := indexbench.Build(workers, *entries, 128, 1024, 7)
		runtime.GC()
		runtime.ReadMemStats(&after)
		var dst []index.Overlap
		lat, cpu, cpuOK := timeLookups(*lookups, func(i int) {
			dst = wl.Index.AppendOverlaps(dst[:0], wl.Requests[i%len(wl.Requests)])
		})
		fmt.Fprintf(tw, "lookup, %d workers, %.1fM entries, 128 blocks: p50\t%.1f µs\t\n", workers, float64(wl.Entries)/1e6, us(lat[0]))
		fmt.Fprintf(tw, "lookup, %d workers: p99\t%.1f µs\t\n", workers, us(lat[1]))
		if cpuOK {
			fmt.Fprintf(tw, "lookup, %d workers, CPU time of its thread: p50, p99\t%.1f, %.1f µs\t\n", workers, us(cpu[0]), us(cpu[1]))
		}
		var g index.Grouped
		lat, cpu, cpuOK = timeLookups(*lookups, func(i int) { wl.Index.Lookup(&g, wl.Requests[i%len(wl.Requests)]) })
		fmt.Fprintf(tw, "grouped lookup (Index.Lookup, what a sparse decision reads), %d workers: p50, p99\t%.1f, %.1f µs\t\n", workers, us(lat[0]), us(lat[1]))
		if cpuOK {
			fmt.Fprintf(tw, "grouped lookup, %d workers, CPU time of its thread: p50, p99\t%.1f, %.1f µs\t\n", workers, us(cpu[0]), us(cpu[1]))
		}
		g.Release()
		fmt.Fprintf(tw, "heap per (block, worker), %d workers\t%.1f bytes\t\n", workers, float64(after.HeapAlloc-before.HeapAlloc)/float64(wl.Entries))
		if slices.Contains(*routeFleets, workers) {
			rl := wl
			if *tokens || *salt != "" || *loras > 0 {
				extra := kvhash.Extra{Salt: *salt}
				if *loras > 0 {
					extra.LoRA = "adapter-0"
				}
				rl = indexbench.BuildTokens(workers, *entries, 128, 1024, 7, extra)
			}
			rl.CPUShare, rl.DPSize, rl.LoRAs, rl.Sessions = *cpuShare, *dpSize, *loras, *sessions
			wall, cpu, cpuOK, heap := routeLatency(rl, *lookups, *warmup)
			fmt.Fprintf(tw, "route decision (Core.Route: index, predicted blocks, load, time cost), %d candidates (%d rank(s) per worker), %.0f%% of blocks on host, %s: p50\t%.1f µs\t\n",
				workers, max(*dpSize, 1), 100**cpuShare, features(rl), us(wall[0]))
			fmt.Fprintf(tw, "route decision, %d workers: p99\t%.1f µs\t\n", workers, us(wall[1]))
			if cpuOK {
				fmt.Fprintf(tw, "route decision, %d workers, CPU time of its thread: p50\t%.1f µs\t\n", workers, us(cpu[0]))
				fmt.Fprintf(tw, "route decision, %d workers, CPU time of its thread: p99\t%.1f µs\t\n", workers, us(cpu[1]))
			}
			fmt.Fprintf(tw, "route decision, %d workers: heap allocated per decision (the collector's work), %d collector cycles while timed\t%.0f bytes, %.2f allocations\t\n",
				workers, heap.cycles, heap.bytes, heap.allocs)
			fmt.Fprintf(tw, "route decision, %d workers: share priced sparsely, candidates each priced\t%.1f %%, %.1f\t\n", workers, 100*heap.sparse, heap.priced)
			rate, pause := pauses(time.Second)
			fmt.Fprintf(tw, "machine: pauses of a spinning thread over %v, not the router's work\t%.0f/s, median %.1f µs\t\n", pauseMin, rate, us(pause))
			fmt.Fprintf(tw, "machine: share of p50-long decisions a pause falls in\t%.1f %%\t\n", 100*rate*wall[0].Seconds())
		}
		t0 := time.Now()
		wl.Index.RemoveWorker(index.WorkerID{Instance: 1})
		fmt.Fprintf(tw, "remove one worker (retires its slot), %d workers\t%.1f µs\t\n", workers, us(time.Since(t0)))
		// Its entries are reclaimed a shard of the table per write: the
		// writes that follow (one stored block each) carry that work.
		writes := make([]time.Duration, 2048)
		for i := range writes {
			t0 := time.Now()
			wl.Index.Store(index.WorkerID{Instance: 2}, []uint64{uint64(i) + 1<<40})
			writes[i] = time.Since(t0)
		}
		slices.Sort(writes)
		fmt.Fprintf(tw, "the next 2048 writes, which reclaim its entries (a table shard each): p50, p99\t%.1f, %.1f µs\t\n", us(writes[len(writes)/2]), us(writes[len(writes)*99/100]))
		runtime.KeepAlive(wl)
	}
	_ = tw.Flush()
}

// routeLatency times the router's whole decision, Core.Route with block
// hashes, on a core holding the workload's index (fed through KV events),
// a load report per worker with 64 requests of other routers (sent again
// every second), and 256 of its own requests in flight (each freed 256
// routes later, every other one after its prefill). The core runs on a
// virtual clock, 1 ms a decision (a router at 1,000 decisions a second),
// and makes warmup decisions untimed first: the state timed is the one a
// router serving that rate lives in, not one whose tables (predictions
// kept Grace after a request ends, freed ids kept FreedMemory) are still
// growing. It returns wall-clock percentiles and, where the OS measures
// it, those of the thread's CPU time per decision.
func routeLatency(wl *indexbench.Workload, n, warmup int) (wall, cpu [2]time.Duration, cpuOK bool, heap heapUse) {
	now := time.Unix(1_700_000_000, 0)
	c, target := indexbench.RouteCoreClock(wl, func() time.Time { return now })
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, n)
	cpus := make([]time.Duration, n)
	cpuOK = true
	// The loop allocates nothing of its own (ids made before, one request
	// message filled again, responses recycled as a RouteStream does), so
	// the collector's cycles it times are the router's. The hashes are
	// given to the core (RouteOwned) as the service's handlers give it a
	// decoded request's: the workload's requests never change.
	ids := make([]string, warmup+n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	req := &routerv1.RouteRequest{Target: target, CacheSalt: wl.Salt, LoraName: wl.LoRA, OmitCandidates: true}
	sessions := make([]string, wl.Sessions)
	for i := range sessions {
		sessions[i] = "session-" + strconv.Itoa(i)
	}
	var m0, m1 runtime.MemStats
	var sd0, sp0 uint64
	for i := range warmup + n {
		if i == warmup {
			runtime.ReadMemStats(&m0)
			sd0, sp0, _ = c.SparseStats()
		}
		now = now.Add(time.Millisecond)
		if i%1000 == 0 {
			indexbench.ReportLoads(c, wl)
		}
		id := ids[i]
		req.RequestId = id
		wl.FillRequest(req, i, sessions)
		c0, ok0 := indexbench.ThreadCPU()
		t0 := time.Now()
		resp, err := c.RouteOwned(req)
		took := time.Since(t0)
		c1, ok1 := indexbench.ThreadCPU()
		if err != nil {
			panic(err)
		}
		core.Recycle(resp)
		if j := i - warmup; j >= 0 {
			lat[j], cpus[j], cpuOK = took, c1-c0, cpuOK && ok0 && ok1
		}
		if i%2 == 0 {
			c.PrefillDone(id)
		}
		if i >= 256 {
			c.Free(ids[i-256])
		}
	}
	runtime.ReadMemStats(&m1)
	sd1, sp1, _ := c.SparseStats()
	heap = heapUse{bytes: float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n), allocs: float64(m1.Mallocs-m0.Mallocs) / float64(n), cycles: m1.NumGC - m0.NumGC,
		sparse: float64(sd1-sd0) / float64(n), priced: float64(sp1-sp0) / float64(max(sd1-sd0, 1))}
	slices.Sort(lat)
	slices.Sort(cpus)
	return [2]time.Duration{lat[len(lat)/2], lat[len(lat)*99/100]}, [2]time.Duration{cpus[len(cpus)/2], cpus[len(cpus)*99/100]}, cpuOK, heap
}

// timeLookups runs lookup(i) n times on a locked thread and returns the
// wall-clock p50 and p99 and, where the OS measures it, those of the
// thread's CPU time: on a shared machine the wall clock's tail is mostly
// the time the thread waited for a core, which its CPU time leaves out.
func timeLookups(n int, lookup func(i int)) (wall, cpu [2]time.Duration, cpuOK bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, n)
	cpus := make([]time.Duration, n)
	cpuOK = true
	for i := range lat {
		c0, ok0 := indexbench.ThreadCPU()
		t0 := time.Now()
		lookup(i)
		lat[i] = time.Since(t0)
		c1, ok1 := indexbench.ThreadCPU()
		cpus[i], cpuOK = c1-c0, cpuOK && ok0 && ok1
	}
	slices.Sort(lat)
	slices.Sort(cpus)
	return [2]time.Duration{lat[n/2], lat[n*99/100]}, [2]time.Duration{cpus[n/2], cpus[n*99/100]}, cpuOK
}

// heapUse is what the timed decisions allocated, per decision (load
// reports included), and the collector cycles that ran while they were
// timed: each is work that pauses or slows the decisions it overlaps.
type heapUse struct {
	bytes, allocs float64
	cycles        uint32
	// sparse is the share of decisions that priced only the candidates
	// that could win, priced how many they priced on average.
	sparse, priced float64
}

// pauseMin is the shortest gap between two clock reads that pauses counts.
const pauseMin = 5 * time.Microsecond

// pauses spins for d on a locked thread reading the clock, and returns
// how often two reads were more than pauseMin apart, and the median of
// those gaps: time the thread did not run, or ran the kernel's or a
// hypervisor's work. Thread CPU time counts such pauses too (on a VM the
// guest kernel does not see the host taking its CPU), so a decision they
// fall in is slow by a pause whatever it does. When the share of
// decisions they fall in is over 1%, the route p99 is about p50 plus a
// pause, and only a shorter decision lowers it.
func pauses(d time.Duration) (perSec float64, median time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var gaps []time.Duration
	start := time.Now()
	for last := start; last.Sub(start) < d; {
		t := time.Now()
		if g := t.Sub(last); g > pauseMin {
			gaps = append(gaps, g)
		}
		last = t
	}
	if len(gaps) == 0 {
		return 0, 0
	}
	slices.Sort(gaps)
	return float64(len(gaps)) / d.Seconds(), gaps[len(gaps)/2]
}

// features says what the route decision's requests carry beyond blocks.
func features(wl *indexbench.Workload) string {
	f := "block hashes"
	if wl.TokenRequests != nil {
		f = "token ids"
	}
	if wl.Salt != "" {
		f += ", a cache salt"
	}
	if wl.LoRA != "" {
		f += fmt.Sprintf(", an adapter of %d", wl.LoRAs)
	}
	if wl.Sessions > 0 {
		f += fmt.Sprintf(", %d sessions", wl.Sessions)
	}
	return f
}

// sizesFlag defines a flag of comma-separated positive counts.
func sizesFlag(name, usage string, def []int) *[]int {
	v := slices.Clone(def)
	var parts []string
	for _, n := range def {
		parts = append(parts, strconv.Itoa(n))
	}
	flag.Func(name, usage+" (default "+strings.Join(parts, ",")+")", func(s string) error {
		v = v[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("bad count %q", f)
			}
			v = append(v, n)
		}
		return nil
	})
	return &v
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
