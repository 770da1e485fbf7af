package core

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/router/index"
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
// routed to a worker count as cached there before its KV events arrive:
// until they do, until the request is freed without having computed them,
// or, freed after its prefill, a grace period later.
func TestRoutedPrefixCountsUntilConfirmed(t *testing.T) {
	now := time.Unix(1000, 0)
	c := cluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return now }}, 4)
	prefix := tokens(2000, 5)
	ask := func(salt uint32) []uint32 { return append(append([]uint32(nil), prefix...), tokens(20, salt)...) }
	overlaps := func() map[uint64]uint32 {
		t.Helper()
		q, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: ask(9)})
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]uint32{}
		for _, cd := range q.Candidates {
			if cd.OverlapBlocks > 0 {
				out[cd.InstanceId] = cd.OverlapBlocks
			}
		}
		return out
	}
	first, err := c.Route(&routerv1.RouteRequest{RequestId: "r0", Target: modelTarget(), TokenIds: ask(0)})
	if err != nil {
		t.Fatal(err)
	}
	w := first.InstanceId
	c.PrefillDone("r0")
	// No events yet: the prefix is predicted on the first worker.
	if got := overlaps(); !maps.Equal(got, map[uint64]uint32{w: 500}) {
		t.Fatalf("overlaps %v, want 500 predicted blocks on %d", got, w)
	}
	next, err := c.Route(&routerv1.RouteRequest{RequestId: "r1", Target: modelTarget(), TokenIds: ask(1)})
	if err != nil || next.InstanceId != w {
		t.Fatalf("second request went to %d (err %v), want the first's worker %d", next.GetInstanceId(), err, w)
	}
	// r1 is freed before its prefill (its prediction goes), r0 after (its
	// stays, for its events to come).
	c.Free("r1")
	c.Free("r0")
	if got := overlaps(); !maps.Equal(got, map[uint64]uint32{w: 500}) {
		t.Fatalf("right after r0's free: overlaps %v, want 500 predicted blocks on %d", got, w)
	}
	// Its events never came: the grace ends.
	now = now.Add(index.Grace + time.Second)
	if got := overlaps(); len(got) != 0 {
		t.Fatalf("past the grace: overlaps %v, want none", got)
	}
	// Confirmed by events, a prediction gives way to the index.
	if _, err := c.Route(&routerv1.RouteRequest{RequestId: "r2", Target: modelTarget(), TokenIds: ask(2)}); err != nil {
		t.Fatal(err)
	}
	c2 := c.pending.Len()
	stored(c, 1, 1, ask(2))
	stored(c, 2, 1, ask(2))
	stored(c, 3, 1, ask(2))
	stored(c, 4, 1, ask(2))
	if c2 != 1 || !c.pending.Empty() {
		t.Fatalf("predicted requests %d before the events (want 1), empty after: %v", c2, c.pending.Empty())
	}
}

// TestRouteKeepsItsOwnHashes checks that what Route records (the load
// record and the predictions share one copy of the request's hashes) does
// not change when the caller reuses its request's slice afterwards, for
// requests by block hashes and by token ids.
func TestRouteKeepsItsOwnHashes(t *testing.T) {
	for _, byTokens := range []bool{false, true} {
		t.Run(fmt.Sprint("by tokens ", byTokens), func(t *testing.T) {
			c := cluster(t, Config{Mode: ModeKV}, 4)
			toks := tokens(640, 3)
			blocks := kvhash.Hashes(toks, 4, nil) // the block size of cluster's model card
			hashes := make([]uint64, len(blocks))
			for i, b := range blocks {
				hashes[i] = b.Sequence
			}
			req := &routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), BlockHashes: slices.Clone(hashes)}
			if byTokens {
				req.BlockHashes, req.TokenIds = nil, slices.Clone(toks)
			}
			resp, err := c.Route(req)
			if err != nil {
				t.Fatal(err)
			}
			// The caller reuses its buffers.
			for i := range req.BlockHashes {
				req.BlockHashes[i] = 0
			}
			for i := range req.TokenIds {
				req.TokenIds[i] = 0
			}
			c.PrefillDone("r")
			q, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), BlockHashes: hashes})
			if err != nil {
				t.Fatal(err)
			}
			for _, cd := range q.Candidates {
				want := uint32(0)
				if cd.InstanceId == resp.InstanceId {
					want = uint32(len(hashes))
				}
				if cd.OverlapBlocks != want {
					t.Fatalf("worker %d: %d blocks predicted, want %d", cd.InstanceId, cd.OverlapBlocks, want)
				}
			}
			for _, ws := range c.Stats().Workers {
				if ws.InstanceId == resp.InstanceId && ws.DecodeBlocks != uint32(len(hashes)) {
					t.Fatalf("worker %d decodes %d blocks, want %d", ws.InstanceId, ws.DecodeBlocks, len(hashes))
				}
			}
		})
	}
}
