package core_test

import (
	"strconv"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index/indexbench"
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
