package core

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

var updateDecisions = flag.Bool("update-decisions", false, "rewrite testdata/decisions.golden from the current code")

// TestDecisionsUnchanged replays a fixed scenario through a core on a
// virtual clock (KV events that confirm and remove blocks, load reports
// with foreign and freed requests, a peer replica's decisions, prefill
// completions and frees) and compares every decision, its overlap and
// every candidate's cost, with the ones the code made when the golden
// file was written. Work on the decision path (data structures,
// allocations, locking) must leave them as they were; a change of the cost
// model is the only reason to rewrite the file (-update-decisions), and its
// commit says so.
func TestDecisionsUnchanged(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := cluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return now }, RequestTTL: 30 * time.Minute}, 12)
	const groups = 24
	system := func(g int) []uint32 { return tokens(64+(g%5)*16, uint32(g)*1_000_003) }
	prompt := func(i int) []uint32 {
		g := (i * i / 3) % groups
		return append(system(g), tokens(8+(i*37)%120, uint32(i)*7_919+5)...)
	}
	eventID := map[uint64]uint64{}
	store := func(instance uint64, toks []uint32) {
		eventID[instance]++
		stored(c, instance, eventID[instance], toks)
	}
	for g := range groups {
		store(uint64(g%12+1), system(g))
	}
	type routed struct {
		id       string
		instance uint64
		toks     []uint32
	}
	var log []routed
	var out strings.Builder
	for i := range 600 {
		now = now.Add(time.Duration(2+i%5) * time.Millisecond)
		toks := prompt(i)
		id := fmt.Sprintf("r%d", i)
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: toks})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "%d %d %d", i, resp.InstanceId, resp.OverlapBlocks)
		for _, cd := range resp.Candidates {
			fmt.Fprintf(&out, " %.6g", cd.Cost)
		}
		out.WriteByte('\n')
		log = append(log, routed{id, resp.InstanceId, toks})
		if i >= 3 {
			c.PrefillDone(log[i-3].id)
		}
		if i >= 5 && i%4 != 0 {
			// Its worker's events confirm an earlier request's blocks.
			store(log[i-5].instance, log[i-5].toks)
		}
		if i >= 25 {
			c.Free(log[i-25].id)
		}
		if i%9 == 0 {
			// A worker evicts a request's blocks.
			r := log[i/2]
			blocks := kvhash.Hashes(r.toks, 4, nil)
			ev := &workerv1.KvBlocksRemoved{}
			for _, b := range blocks[len(blocks)/2:] {
				ev.SequenceHashes = append(ev.SequenceHashes, b.Sequence)
			}
			eventID[r.instance]++
			c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: r.instance, FirstEventId: eventID[r.instance],
				Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Removed{Removed: ev}}}})
		}
		if i%7 == 0 {
			// A peer replica routed a request of another group.
			pt := prompt(i + 1000)
			var hashes []uint64
			for _, b := range kvhash.Hashes(pt, 4, nil) {
				hashes = append(hashes, b.Sequence)
			}
			w := index.WorkerID{Instance: uint64(i%12 + 1)}
			c.ApplyReplica(RoutedEvent(fmt.Sprintf("peer%d", i), w, len(hashes)/2, hashes), now)
			if i >= 14 {
				c.ApplyReplica(PrefillDoneEvent(fmt.Sprintf("peer%d", i-7)), now)
			}
			if i >= 70 {
				c.ApplyReplica(FreedEvent(fmt.Sprintf("peer%d", i-70)), now)
			}
		}
		if i%50 == 0 {
			for w := uint64(1); w <= 12; w++ {
				m := &workerv1.LoadMetrics{InstanceId: w, KvBlocksTotal: 4096, RunningRequests: 3}
				for j := range 3 {
					// Foreign requests, and one the router freed already.
					m.Requests = append(m.Requests, &workerv1.RequestLoad{RequestId: fmt.Sprintf("other-%d-%d-%d", i, w, j), DecodeBlocks: uint32(20 * j), PrefillTokens: uint32(j % 2 * 64)})
				}
				if i >= 50 {
					m.Requests = append(m.Requests, &workerv1.RequestLoad{RequestId: log[i-40].id, DecodeBlocks: 99})
				}
				c.ReportLoad(m)
			}
		}
	}
	path := filepath.Join("testdata", "decisions.golden")
	if *updateDecisions {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(out.String(), "\n")
	for i, w := range strings.Split(string(want), "\n") {
		if i >= len(got) || got[i] != w {
			g := ""
			if i < len(got) {
				g = got[i]
			}
			t.Fatalf("decision %d changed (if the cost model changed on purpose, rewrite the file: go test ./services/router/core -run TestDecisionsUnchanged -update-decisions, and say so in the commit):\n got %.200s\nwant %.200s", i, g, w)
		}
	}
	if len(got) != len(strings.Split(string(want), "\n")) {
		t.Fatalf("%d decisions, want %d", len(got), len(strings.Split(string(want), "\n")))
	}
}
