package index

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkGrouped looks q up with Lookup, both with the large groups only and
// with every depth's leavers grouped, and checks the answer against want
// (every worker's overlap, as AppendOverlaps or a model gives them): the
// levels and their counts, the listed overlaps (in Blocks order, the
// longest all listed), and what Append and Blocks say of every worker
// listed, grouped or holding nothing (others: workers to ask about that
// hold nothing), for one rank and for any rank of an instance.
func checkGrouped(t interface {
	Helper()
	Fatalf(string, ...any)
}, x *Index, q []uint64, want []Overlap, others []WorkerID) {
	t.Helper()
	for _, every := range []bool{false, true} {
		g := Grouped{GroupAll: every}
		x.Lookup(&g, q)
		of := map[WorkerID]Overlap{}
		byInstance := map[uint64]int{}
		counts := map[int]int{}
		longest := 0
		for _, o := range want {
			of[o.Worker] = o
			byInstance[o.Worker.Instance] = max(byInstance[o.Worker.Instance], o.Blocks)
			counts[o.Blocks]++
			longest = max(longest, o.Blocks)
		}
		var levels []Level
		for b, n := range counts {
			levels = append(levels, Level{Blocks: b, Workers: n})
		}
		slices.SortFunc(levels, func(a, b Level) int { return a.Blocks - b.Blocks })
		if d := cmp.Diff(levels, g.Levels); d != "" {
			t.Fatalf("every=%v: Levels of %v (-want +got):\n%s", every, q, d)
		}
		listed := map[WorkerID]bool{}
		for i, o := range g.Overlaps {
			if i > 0 && o.Blocks < g.Overlaps[i-1].Blocks {
				t.Fatalf("every=%v: Overlaps not by Blocks ascending: %v", every, g.Overlaps)
			}
			if w, ok := of[o.Worker]; !ok || w != o || listed[o.Worker] {
				t.Fatalf("every=%v: listed %+v; want %+v (listed before: %v)", every, o, w, listed[o.Worker])
			}
			listed[o.Worker] = true
		}
		asked := append(slices.Clone(others), make([]WorkerID, 0, len(want))...)
		for _, o := range want {
			asked = append(asked, o.Worker)
			if o.Blocks == longest && !listed[o.Worker] {
				t.Fatalf("every=%v: %+v has the longest overlap and is not listed", every, o)
			}
		}
		for _, w := range asked {
			o, held := of[w]
			got := g.Append(nil, []WorkerID{w}, false)
			switch {
			case held && !listed[w]:
				if d := cmp.Diff([]Overlap{o}, got); d != "" {
					t.Fatalf("every=%v: Append(%v) (-want +got):\n%s", every, w, d)
				}
				if b := g.Blocks(w, false); b != o.Blocks {
					t.Fatalf("every=%v: Blocks(%v) = %d, want %d", every, w, b, o.Blocks)
				}
			default:
				if len(got) != 0 || g.Blocks(w, false) != 0 {
					t.Fatalf("every=%v: %v (held %v, listed %v): Append = %v, Blocks = %d; want nothing", every, w, held, listed[w], got, g.Blocks(w, false))
				}
			}
			// Any rank: the most of the instance's ranks, listed or not.
			most := 0
			for _, l := range g.Overlaps {
				if l.Worker.Instance == w.Instance {
					most = max(most, l.Blocks)
				}
			}
			grouped := 0
			for _, a := range g.Append(nil, []WorkerID{w}, true) {
				if a.Worker.Instance != w.Instance || listed[a.Worker] || of[a.Worker] != a {
					t.Fatalf("every=%v: Append(%v, any rank) gave %+v", every, w, a)
				}
				grouped = max(grouped, a.Blocks)
			}
			if b := g.Blocks(w, true); b != grouped {
				t.Fatalf("every=%v: Blocks(%v, any rank) = %d, Append's most %d", every, w, b, grouped)
			}
			if want := byInstance[w.Instance]; max(most, grouped) != want {
				t.Fatalf("every=%v: any rank of %d: %d blocks, want %d", every, w.Instance, max(most, grouped), want)
			}
		}
		g.Release()
	}
}

// TestGroupedAfterChanges checks what a Grouped answer says of workers
// that changed after the lookup: one that cleared its cache, or left, is
// in no group, nor is a new worker given a slot a departed one held; one
// that only stored more is answered as the lookup found it.
func TestGroupedAfterChanges(t *testing.T) {
	a, b, c, v := WorkerID{Instance: 1}, WorkerID{Instance: 2}, WorkerID{Instance: 3}, WorkerID{Instance: 4}
	for _, tc := range []struct {
		name   string
		change func(x *Index)
		want   map[WorkerID]int
	}{
		{"unchanged", func(*Index) {}, map[WorkerID]int{a: 1, b: 1, v: 0}},
		{"stored more", func(x *Index) { x.Store(a, []uint64{1, 2, 3}) }, map[WorkerID]int{a: 1, b: 1}},
		{"cleared", func(x *Index) { x.Apply(a, 0, func(tx Tx) { tx.Clear() }) }, map[WorkerID]int{a: 0, b: 1}},
		{"cleared and stored again", func(x *Index) {
			x.Apply(a, 0, func(tx Tx) { tx.Clear() })
			x.Store(a, []uint64{1})
		}, map[WorkerID]int{a: 0, b: 1}},
		{"left, slot taken by a new worker", func(x *Index) {
			x.RemoveWorker(a)
			x.Store(v, []uint64{1})
			if x.slots[v] != 0 {
				t.Fatalf("the new worker took slot %d, not the departed one's", x.slots[v])
			}
		}, map[WorkerID]int{a: 0, v: 0, b: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := New()
			x.Store(a, []uint64{1})
			x.Store(b, []uint64{1})
			x.Store(c, []uint64{1, 2})
			g := Grouped{GroupAll: true}
			x.Lookup(&g, []uint64{1, 2})
			if want := []Overlap{{Worker: c, Blocks: 2}}; !slices.Equal(g.Overlaps, want) || !g.Grouped() {
				t.Fatalf("Overlaps = %v (grouped %v), want %v and a group", g.Overlaps, g.Grouped(), want)
			}
			tc.change(x)
			for w, want := range tc.want {
				if got := g.Blocks(w, false); got != want {
					t.Errorf("Blocks(%v) = %d, want %d", w, got, want)
				}
			}
			g.Release()
		})
	}
}
