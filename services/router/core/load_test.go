package core

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// TestStaleLoadReport checks that a worker's load report still listing a
// request the router has freed changes nothing in the next decision, while
// a request the router does not know (another router's) does count.
func TestStaleLoadReport(t *testing.T) {
	prefix := tokens(4000, 3) // a group's shared system prompt
	ask := func(salt uint32) []uint32 { return append(append([]uint32(nil), prefix...), tokens(40, salt)...) }
	tests := []struct {
		name    string
		report  *workerv1.LoadMetrics
		changes bool
	}{
		{"freed request still decoding in the report", &workerv1.LoadMetrics{InstanceId: 1, RunningRequests: 1, KvBlocksTotal: 16384,
			ActiveDecodeBlocks: 5000, Requests: []*workerv1.RequestLoad{{RequestId: "first", DecodeBlocks: 5000}}}, false},
		{"freed request still in prefill in the report", &workerv1.LoadMetrics{InstanceId: 1, RunningRequests: 1, KvBlocksTotal: 16384,
			ActivePrefillTokens: 4040, Requests: []*workerv1.RequestLoad{{RequestId: "first", PrefillTokens: 4040}}}, false},
		{"idle report", &workerv1.LoadMetrics{InstanceId: 1, KvBlocksTotal: 16384}, false},
		{"another router's request", &workerv1.LoadMetrics{InstanceId: 1, RunningRequests: 1, KvBlocksTotal: 16384,
			Requests: []*workerv1.RequestLoad{{RequestId: "elsewhere", PrefillTokens: 50000}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decide := func(report bool) *routerv1.QueryOverlapsResponse {
				c := cluster(t, Config{Mode: ModeKV}, 2)
				first := ask(1)
				stored(c, 1, 1, first)
				if _, err := c.Route(&routerv1.RouteRequest{RequestId: "first", Target: modelTarget(), TokenIds: first}); err != nil {
					t.Fatal(err)
				}
				c.PrefillDone("first")
				c.Free("first")
				if report {
					c.ReportLoad(tt.report)
				}
				resp, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: ask(2)})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			without, with := decide(false), decide(true)
			diff := cmp.Diff(without, with, protocmp.Transform())
			if changed := diff != ""; changed != tt.changes {
				t.Fatalf("decision changed: %v, want %v\n%s", changed, tt.changes, diff)
			}
			if !tt.changes {
				best := with.Candidates[0]
				for _, cd := range with.Candidates {
					if cd.Cost < best.Cost {
						best = cd
					}
				}
				if best.InstanceId != 1 {
					t.Fatalf("the group's next request would go to %d, not to its cached worker 1: %v", best.InstanceId, with.Candidates)
				}
			}
		})
	}
}

// TestRoutedPrefixCountsUntilConfirmed checks that the blocks of a request
// routed to a worker count as cached there before its KV events arrive,
// until they do, or the request is freed without them.
func TestRoutedPrefixCountsUntilConfirmed(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 4)
	prefix := tokens(2000, 5)
	ask := func(salt uint32) []uint32 { return append(append([]uint32(nil), prefix...), tokens(20, salt)...) }
	first, err := c.Route(&routerv1.RouteRequest{RequestId: "r0", Target: modelTarget(), TokenIds: ask(0)})
	if err != nil {
		t.Fatal(err)
	}
	c.PrefillDone("r0")
	// No events yet: the prefix is predicted on the first worker.
	q, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: ask(1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, cd := range q.Candidates {
		want := uint32(0)
		if cd.InstanceId == first.InstanceId {
			want = 500
		}
		if cd.OverlapBlocks != want {
			t.Fatalf("worker %d overlap %d, want %d", cd.InstanceId, cd.OverlapBlocks, want)
		}
	}
	next, err := c.Route(&routerv1.RouteRequest{RequestId: "r1", Target: modelTarget(), TokenIds: ask(1)})
	if err != nil || next.InstanceId != first.InstanceId {
		t.Fatalf("second request went to %d (err %v), want the first's worker %d", next.GetInstanceId(), err, first.InstanceId)
	}
	// Freed without its blocks ever confirmed: the prediction goes.
	c.Free("r0")
	c.Free("r1")
	q, _ = c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: ask(2)})
	for _, cd := range q.Candidates {
		if cd.OverlapBlocks != 0 {
			t.Fatalf("after the frees worker %d still shows %d predicted blocks", cd.InstanceId, cd.OverlapBlocks)
		}
	}
}
