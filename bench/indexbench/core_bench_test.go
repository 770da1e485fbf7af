package indexbench_test

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/indexbench"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/core"
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
// entries; SWITCHYARD_BENCH_ENTRIES sets another size (2000000: the
// issue's 100 workers x 2M blocks).
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
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { return now }
			wl.DPSize = bc.dpSize
			c, target := indexbench.RoutePairCoreClock(wl, clock, bc.prefill)
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = strconv.Itoa(i)
			}
			took := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now = now.Add(time.Millisecond)
				id := ids[i]
				start := time.Now()
				resp, err := c.RouteOwned(&routerv1.RouteRequest{RequestId: id, Target: target, BlockHashes: wl.Requests[i%len(wl.Requests)]})
				took[i] = time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if (bc.prefill > 0) != (resp.Prefill != nil) {
					b.Fatalf("prefill leg %v in a decision of %d prefill workers", resp.Prefill, bc.prefill)
				}
				core.Recycle(resp)
				if i%2 == 0 {
					c.PrefillDone(id)
				}
				if i >= 256 {
					c.Free(ids[i-256])
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
