package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// model is the brute-force truth: per worker, the set of hashes it holds.
type model map[WorkerID]map[uint64]bool

func (m model) overlaps(hashes []uint64) []Overlap {
	var out []Overlap
	for w, set := range m {
		n := 0
		for _, h := range hashes {
			if !set[h] {
				break
			}
			n++
		}
		if n > 0 {
			out = append(out, Overlap{Worker: w, Blocks: n})
		}
	}
	return out
}

func sorted(o []Overlap) []Overlap {
	sort.Slice(o, func(i, j int) bool {
		if o[i].Worker.Instance != o[j].Worker.Instance {
			return o[i].Worker.Instance < o[j].Worker.Instance
		}
		return o[i].Worker.DPRank < o[j].Worker.DPRank
	})
	return o
}

// TestIndexMatchesBruteForce drives the index and the model with the same
// random event stream and compares every lookup and count: with few workers
// (holders stay in lists) and with many (holders turn into bitsets and back).
//
// The lazy cases reclaim retired slots a shard per write, as a large index
// does (see worker), so that clears and departures interleave with passes
// in progress: lookups and counts must not see what a retired slot held,
// and once writes have finished the passes, nothing of it may remain.
func TestIndexMatchesBruteForce(t *testing.T) {
	t.Run("few workers", func(t *testing.T) { rapid.Check(t, checkAgainstModel(5, 200, false)) })
	t.Run("many workers", func(t *testing.T) { rapid.Check(t, checkAgainstModel(150, 600, false)) })
	t.Run("few workers, lazy reclaim", func(t *testing.T) { rapid.Check(t, checkAgainstModel(5, 300, true)) })
	t.Run("many workers, lazy reclaim", func(t *testing.T) { rapid.Check(t, checkAgainstModel(150, 600, true)) })
}

func checkAgainstModel(instances uint64, maxSteps int, lazy bool) func(*rapid.T) {
	return func(t *rapid.T) {
		if lazy {
			// A pass takes about 10 writes: many end, and free their
			// slots for new workers, between the steps.
			defer func(n, k int) { reclaimAtOnce, reclaimShards = n, k }(reclaimAtOnce, reclaimShards)
			reclaimAtOnce, reclaimShards = -1, 97
		}
		x := New()
		m := model{}
		workerGen := rapid.Custom(func(t *rapid.T) WorkerID {
			return WorkerID{Instance: rapid.Uint64Range(1, instances).Draw(t, "instance"), DPRank: rapid.Uint32Range(0, 1).Draw(t, "rank")}
		})
		// A small hash space makes sharing, prefixes and collisions common.
		hashes := rapid.SliceOfN(rapid.Uint64Range(1, 40), 0, 40)
		for range rapid.IntRange(1, maxSteps).Draw(t, "steps") {
			w := workerGen.Draw(t, "worker")
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3:
				hs := hashes.Draw(t, "stored")
				x.Store(w, hs)
				if m[w] == nil {
					m[w] = map[uint64]bool{}
				}
				for _, h := range hs {
					m[w][h] = true
				}
			case 4, 5:
				hs := hashes.Draw(t, "removed")
				x.Remove(w, hs)
				for _, h := range hs {
					delete(m[w], h)
				}
			case 6:
				x.Apply(w, 0, func(tx Tx) { tx.Clear() })
				if m[w] != nil {
					m[w] = map[uint64]bool{}
				}
			case 7:
				x.RemoveWorker(w)
				delete(m, w)
			default:
				q := hashes.Draw(t, "query")
				got := sorted(x.Overlaps(q))
				want := sorted(m.overlaps(q))
				if d := cmp.Diff(want, got); d != "" {
					t.Fatalf("Overlaps(%v) (-want +got):\n%s", q, d)
				}
				checkGrouped(t, x, q, want, []WorkerID{w, {Instance: instances + 1}})
			}
			entries, blocks := 0, map[uint64]bool{}
			for _, set := range m {
				entries += len(set)
				for h := range set {
					blocks[h] = true
				}
			}
			st := x.Stats()
			if st.Entries != entries || st.Blocks != len(blocks) && !lazy || st.Blocks < len(blocks) {
				t.Fatalf("Stats = %+v, want %d entries over %d blocks", st, entries, len(blocks))
			}
		}
		if lazy {
			// Writes carry the passes to their end.
			for range 2 * (tableShards/reclaimShards + 2) {
				x.Remove(WorkerID{Instance: 1 << 40}, nil)
			}
			if anyBit(x.dead) || x.reclaim.active {
				t.Fatalf("retired slots left after two passes' worth of writes: dead %x", x.dead)
			}
			blocks := map[uint64]bool{}
			for _, set := range m {
				for h := range set {
					blocks[h] = true
				}
			}
			if st := x.Stats(); st.Blocks != len(blocks) {
				t.Fatalf("reclaimed: Stats = %+v, want %d blocks", st, len(blocks))
			}
			// Every slot is a live worker's or free: none leaked.
			if live := len(x.slots); live+len(x.free) != len(x.workers) {
				t.Fatalf("%d live slots + %d free, of %d", live, len(x.free), len(x.workers))
			}
		}
		// A dump holds exactly the model's blocks, and restores to an equal index.
		dumps := x.Dump()
		for _, d := range dumps {
			if len(d.Hashes) != len(m[d.ID]) || x.Blocks(d.ID) != len(m[d.ID]) {
				t.Fatalf("dump of %v has %d blocks, model %d", d.ID, len(d.Hashes), len(m[d.ID]))
			}
			for _, h := range d.Hashes {
				if !m[d.ID][h] || !x.Holds(d.ID, h) {
					t.Fatalf("dump of %v has %d, which the model lacks", d.ID, h)
				}
			}
		}
		y := New()
		y.Restore(dumps)
		if y.Stats().Entries != x.Stats().Entries || y.Stats().Blocks != x.Stats().Blocks {
			t.Fatalf("restored %+v, dumped %+v", y.Stats(), x.Stats())
		}
	}
}

// TestOverlapsLongRequests checks lookups deeper than the first batches
// of blocks (see AppendOverlaps): workers hold prefixes of a long request
// ending on each side of every batch boundary, some with a hole, with
// enough workers that holders are bitsets.
func TestOverlapsLongRequests(t *testing.T) {
	const n = 400
	req := make([]uint64, n)
	for i := range req {
		req[i] = uint64(i)*7919 + 1
	}
	for _, tc := range []struct {
		name    string
		depths  []int // each worker holds req[:depth]
		hole    int   // and, when > 0, not req[hole] (worker 0 only)
		workers int   // extra workers holding only req[:1]
	}{
		{"batch edges", []int{15, 16, 17, 47, 48, 49, 111, 112, 113, 175, 176, 177, 239, 240, 241}, 0, 0},
		{"the whole request", []int{n, n - 1, 1}, 0, 0},
		{"a hole deep down", []int{n, 300}, 200, 0},
		{"bitset holders", []int{n, 100, 64, 63}, 0, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := New()
			m := model{}
			hold := func(w WorkerID, hs []uint64) {
				x.Store(w, hs)
				if m[w] == nil {
					m[w] = map[uint64]bool{}
				}
				for _, h := range hs {
					m[w][h] = true
				}
			}
			for i, d := range tc.depths {
				hold(WorkerID{Instance: uint64(i + 1)}, req[:d])
			}
			for i := range tc.workers {
				hold(WorkerID{Instance: uint64(1000 + i)}, req[:1])
			}
			if tc.hole > 0 {
				w := WorkerID{Instance: 1}
				x.Remove(w, req[tc.hole:tc.hole+1])
				delete(m[w], req[tc.hole])
			}
			for _, q := range [][]uint64{req, req[:17], req[:49], req[:113]} {
				if d := cmp.Diff(sorted(m.overlaps(q)), sorted(x.Overlaps(q))); d != "" {
					t.Fatalf("Overlaps of %d blocks (-want +got):\n%s", len(q), d)
				}
			}
		})
	}
}

func TestEventOrdering(t *testing.T) {
	w := WorkerID{Instance: 7}
	tests := []struct {
		name   string
		ids    []uint64
		want   []EventResult
		blocks int
	}{
		{"in order", []uint64{1, 2, 3}, []EventResult{Applied, Applied, Applied}, 3},
		{"duplicate dropped", []uint64{1, 2, 2, 3}, []EventResult{Applied, Applied, Duplicate, Applied}, 3},
		{"late event dropped", []uint64{1, 3, 2}, []EventResult{Applied, Gap, Duplicate}, 2},
		{"gap applied", []uint64{5, 9}, []EventResult{Applied, Gap}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New()
			for i, id := range tt.ids {
				got := x.Apply(w, id, func(tx Tx) { tx.Store([]uint64{id * 100}) })
				if got != tt.want[i] {
					t.Fatalf("event %d (id %d) = %v, want %v", i, id, got, tt.want[i])
				}
			}
			if n := x.Blocks(w); n != tt.blocks {
				t.Fatalf("worker holds %d blocks, want %d", n, tt.blocks)
			}
		})
	}
}

func TestRemovalOrderDoesNotCorrupt(t *testing.T) {
	x := New()
	a, b := WorkerID{Instance: 1}, WorkerID{Instance: 2}
	x.Store(a, []uint64{1, 2, 3})
	x.Store(b, []uint64{1, 2})
	x.Remove(a, []uint64{9, 2}) // 9 was never stored
	x.Remove(a, []uint64{2})    // twice
	got := sorted(x.Overlaps([]uint64{1, 2, 3}))
	want := []Overlap{{Worker: a, Blocks: 1}, {Worker: b, Blocks: 2}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Overlaps (-want +got):\n%s", d)
	}
	x.RemoveWorker(b)
	x.RemoveWorker(b)
	if got := x.Overlaps([]uint64{1, 2}); len(got) != 1 || got[0].Worker != a {
		t.Fatalf("after removing b: %v", got)
	}
	if st := x.Stats(); st.Workers != 1 || st.Entries != 2 {
		t.Fatalf("Stats = %+v", st)
	}
	x.Remove(WorkerID{Instance: 99}, []uint64{1})
	if st := x.Stats(); st.Workers != 1 {
		t.Fatalf("removing from an unknown worker created it: %+v", st)
	}
}

// TestDumpDuringEvents applies numbered events between Dump's steps (it
// walks the table a few shards at a time) and checks that the dump,
// restored and replayed from each worker's dumped last event id, as a
// restarted router replays its stream, equals the index: whatever the walk
// caught of an event, its replay leaves the block as the event did. It
// also checks that a worker that joins during the walk is left to the
// replay and one that leaves keeps only blocks it held.
func TestDumpDuringEvents(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 9))
			x := New()
			type event struct {
				w      WorkerID
				id     uint64
				op     int // 0 store, 1 remove, 2 clear
				hashes []uint64
			}
			var log []event
			next := map[WorkerID]uint64{}
			apply := func(w WorkerID) {
				next[w]++
				ev := event{w: w, id: next[w], op: r.IntN(7) / 3}
				for range 1 + r.IntN(30) {
					h := uint64(r.IntN(5000))
					if w.Instance == 8 {
						h += 5000 // blocks nobody else has
					}
					ev.hashes = append(ev.hashes, h)
				}
				log = append(log, ev)
				x.Apply(w, ev.id, func(tx Tx) {
					switch ev.op {
					case 0:
						tx.Store(ev.hashes)
					case 1:
						tx.Remove(ev.hashes)
					default:
						tx.Clear()
					}
				})
			}
			workers := []WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 3, DPRank: 1}}
			live := workers
			for range 2000 {
				apply(live[r.IntN(len(live))])
			}
			steps := 0
			dumpHook = func() {
				steps++
				for range r.IntN(4) {
					apply(live[r.IntN(len(live))])
				}
				switch steps {
				case 10:
					live = append(workers[:3:3], WorkerID{Instance: 7}) // joins during the walk
					apply(live[3])
				case 50:
					x.RemoveWorker(workers[2]) // leaves during the walk
					live = []WorkerID{workers[0], workers[1], live[3]}
				case 60:
					// Joins in the slot the one that left had.
					live = append(live, WorkerID{Instance: 8})
					for range 20 {
						apply(live[3])
					}
				}
			}
			dumps := x.Dump()
			dumpHook = nil
			y := New()
			y.Restore(dumps)
			var gone []uint64
			for _, d := range dumps {
				if d.ID.Instance == 7 || d.ID.Instance == 8 {
					t.Fatalf("%v, which joined during the walk, was dumped", d.ID)
				}
				if d.ID == workers[2] {
					gone = d.Hashes
				}
			}
			y.RemoveWorker(workers[2])
			for _, ev := range log {
				if ev.w == workers[2] {
					continue
				}
				y.Apply(ev.w, ev.id, func(tx Tx) {
					switch ev.op {
					case 0:
						tx.Store(ev.hashes)
					case 1:
						tx.Remove(ev.hashes)
					default:
						tx.Clear()
					}
				})
			}
			if got, want := y.Stats(), x.Stats(); got != want {
				t.Fatalf("replayed dump: %+v, index: %+v", got, want)
			}
			for h := range uint64(10000) {
				for _, w := range append(workers[:2:2], WorkerID{Instance: 7}, WorkerID{Instance: 8}) {
					if y.Holds(w, h) != x.Holds(w, h) {
						t.Fatalf("block %d on %v: replayed dump holds %v, index %v", h, w, y.Holds(w, h), x.Holds(w, h))
					}
				}
			}
			for _, h := range gone {
				if !slices.ContainsFunc(log, func(ev event) bool { return ev.w == workers[2] && ev.op == 0 && slices.Contains(ev.hashes, h) }) {
					t.Fatalf("the worker that left was dumped with block %d it never stored", h)
				}
			}
		})
	}
}

func TestRemoveInstanceDropsEveryRank(t *testing.T) {
	x := New()
	x.Store(WorkerID{Instance: 1, DPRank: 0}, []uint64{1})
	x.Store(WorkerID{Instance: 1, DPRank: 1}, []uint64{1})
	x.Store(WorkerID{Instance: 2}, []uint64{1})
	x.RemoveInstance(1)
	if got := x.Overlaps([]uint64{1}); len(got) != 1 || got[0].Worker.Instance != 2 {
		t.Fatalf("Overlaps = %v, want only instance 2", got)
	}
}

func TestApproxExpiresAfterTTL(t *testing.T) {
	a := NewApprox(ApproxConfig{TTL: 10 * time.Second})
	w := WorkerID{Instance: 1}
	t0 := time.Unix(1000, 0)
	a.Predict(w, []uint64{1, 2, 3}, t0)
	if got := a.Overlaps([]uint64{1, 2, 3}, t0.Add(9*time.Second)); len(got) != 1 || got[0].Blocks != 3 {
		t.Fatalf("before the TTL: %v", got)
	}
	// Renewing the prefix keeps it; the rest expires.
	a.Predict(w, []uint64{1}, t0.Add(5*time.Second))
	if got := a.Overlaps([]uint64{1, 2, 3}, t0.Add(11*time.Second)); len(got) != 1 || got[0].Blocks != 1 {
		t.Fatalf("after the TTL with a renewed prefix: %v, want 1 block", got)
	}
	if got := a.Overlaps([]uint64{1}, t0.Add(16*time.Second)); len(got) != 0 {
		t.Fatalf("after every TTL: %v", got)
	}
	if st := a.Index().Stats(); st.Entries != 0 {
		t.Fatalf("entries left: %+v", st)
	}
}

func TestApproxPrunesOldestDeepestFirst(t *testing.T) {
	a := NewApprox(ApproxConfig{TTL: time.Hour, MaxEntries: 10, PruneTargetRatio: 0.5})
	w1, w2 := WorkerID{Instance: 1}, WorkerID{Instance: 2}
	t0 := time.Unix(1000, 0)
	a.Predict(w1, []uint64{1, 2, 3, 4, 5, 6}, t0)                // oldest
	a.Predict(w2, []uint64{11, 12, 13, 14}, t0.Add(time.Second)) // 10 entries: at the limit
	if st := a.Index().Stats(); st.Entries != 10 {
		t.Fatalf("entries = %d, want 10 before pruning", st.Entries)
	}
	a.Predict(w2, []uint64{21}, t0.Add(2*time.Second)) // 11 > 10: prune to 5
	st := a.Index().Stats()
	if st.Entries != 5 {
		t.Fatalf("entries after pruning = %d, want 5", st.Entries)
	}
	// w1's six went first (oldest); their removal took none of w2's newer ones.
	if n := a.Index().Blocks(w1); n != 0 {
		t.Fatalf("w1 keeps %d blocks, want 0", n)
	}
	if got := a.Overlaps([]uint64{11, 12, 13, 14}, t0.Add(3*time.Second)); len(got) != 1 || got[0].Blocks != 4 {
		t.Fatalf("w2's prefix after pruning = %v, want 4 blocks", got)
	}

	// Among equally old predictions, the deepest block goes first, so a
	// prefix survives its extension.
	b := NewApprox(ApproxConfig{TTL: time.Hour, MaxEntries: 4, PruneTargetRatio: 0.5})
	b.Predict(w1, []uint64{1, 2, 3, 4}, t0)
	b.Predict(w1, []uint64{1}, t0) // renew at the same time: no change
	b.Predict(w2, []uint64{9}, t0.Add(time.Second))
	if got := b.Overlaps([]uint64{1, 2, 3, 4}, t0.Add(time.Second)); len(got) != 1 || got[0].Blocks != 1 {
		t.Fatalf("after pruning equal-age blocks: %v, want the 1-block prefix", got)
	}
}

func TestApproxRemoveWorker(t *testing.T) {
	a := NewApprox(ApproxConfig{TTL: time.Minute})
	w := WorkerID{Instance: 1}
	t0 := time.Unix(1000, 0)
	a.Predict(w, []uint64{1, 2}, t0)
	a.RemoveWorker(w)
	if got := a.Overlaps([]uint64{1}, t0); len(got) != 0 {
		t.Fatalf("removed worker still predicted: %v", got)
	}
	// Its stale queue items expire without resurrecting anything.
	a.Expire(t0.Add(2 * time.Minute))
	if st := a.Index().Stats(); st.Workers != 0 || st.Entries != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestHolderRepresentations walks one block from one holder to many (list,
// then bitset) and back, checking lookups at every size.
func TestHolderRepresentations(t *testing.T) {
	x := New()
	// Past maxList holders the hashes are sets, which grow twice (at the
	// 65th and 129th slot) as the workers come.
	const n = 200
	for i := range n {
		x.Store(WorkerID{Instance: uint64(i + 1)}, []uint64{1, 2})
		if got := len(x.Overlaps([]uint64{1, 2})); got != i+1 {
			t.Fatalf("with %d holders Overlaps found %d", i+1, got)
		}
	}
	for i := range n {
		x.Remove(WorkerID{Instance: uint64(i + 1)}, []uint64{2})
		got := x.Overlaps([]uint64{1, 2})
		full := 0
		for _, o := range got {
			if o.Blocks == 2 {
				full++
			}
		}
		if len(got) != n || full != n-i-1 {
			t.Fatalf("after %d removals: %d overlaps, %d of 2 blocks; want %d and %d", i+1, len(got), full, n, n-i-1)
		}
	}
	for i := range n {
		x.RemoveWorker(WorkerID{Instance: uint64(i + 1)})
	}
	if st := x.Stats(); st != (Stats{}) {
		t.Fatalf("Stats after removing everyone = %+v", st)
	}
	if len(x.lists) > 0 && len(x.freeLists) != len(x.lists) || len(x.sets) > 0 && len(x.freeSets) != len(x.sets) {
		t.Fatalf("holder storage leaked: %d/%d lists free, %d/%d sets free", len(x.freeLists), len(x.lists), len(x.freeSets), len(x.sets))
	}
}
