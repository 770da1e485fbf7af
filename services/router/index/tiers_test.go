package index

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// tierModel is the brute-force truth with tiers: per worker, each held
// hash's tier.
type tierModel map[WorkerID]map[uint64]Tier

func (m tierModel) overlaps(hashes []uint64) []Overlap {
	var out []Overlap
	for w, set := range m {
		o := Overlap{Worker: w}
		for _, h := range hashes {
			t, ok := set[h]
			if !ok {
				break
			}
			o.Blocks++
			if t != TierGPU {
				o.Lower[t-1]++
			}
		}
		if o.Blocks > 0 {
			out = append(out, o)
		}
	}
	return out
}

// TestTiersMatchBruteForce drives the index with stores on every tier,
// removals from a tier and from any, clears and departures, and checks
// each lookup's prefix and per-tier counts, the per-tier entry counts and
// a dump's tiers against the model: a store on a tier moves a block, a
// removal from a tier drops it only if held there.
func TestTiersMatchBruteForce(t *testing.T) {
	t.Run("few workers", func(t *testing.T) { rapid.Check(t, checkTiersAgainstModel(5, 200, false)) })
	t.Run("many workers", func(t *testing.T) { rapid.Check(t, checkTiersAgainstModel(150, 400, false)) })
	t.Run("many workers, lazy reclaim", func(t *testing.T) { rapid.Check(t, checkTiersAgainstModel(150, 400, true)) })
}

func checkTiersAgainstModel(instances uint64, maxSteps int, lazy bool) func(*rapid.T) {
	return func(t *rapid.T) {
		if lazy {
			defer func(n, k int) { reclaimAtOnce, reclaimShards = n, k }(reclaimAtOnce, reclaimShards)
			reclaimAtOnce, reclaimShards = -1, 97
		}
		x := New()
		m := tierModel{}
		workerGen := rapid.Custom(func(t *rapid.T) WorkerID {
			return WorkerID{Instance: rapid.Uint64Range(1, instances).Draw(t, "instance")}
		})
		hashes := rapid.SliceOfN(rapid.Uint64Range(0, 30), 0, 30)
		tiers := rapid.SampledFrom([]Tier{TierGPU, TierGPU, TierCPU, TierDisk, TierUnknown})
		for range rapid.IntRange(1, maxSteps).Draw(t, "steps") {
			w := workerGen.Draw(t, "worker")
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3:
				hs, tier := hashes.Draw(t, "stored"), tiers.Draw(t, "tier")
				x.Apply(w, 0, func(tx Tx) { tx.StoreOn(hs, tier) })
				if m[w] == nil {
					m[w] = map[uint64]Tier{}
				}
				for _, h := range hs {
					m[w][h] = tier
				}
			case 4:
				hs := hashes.Draw(t, "removed")
				x.Remove(w, hs)
				for _, h := range hs {
					delete(m[w], h)
				}
			case 5:
				hs, tier := hashes.Draw(t, "removed"), tiers.Draw(t, "tier")
				x.Apply(w, 0, func(tx Tx) { tx.RemoveFrom(hs, tier) })
				if m[w] == nil {
					m[w] = map[uint64]Tier{}
				}
				for _, h := range hs {
					if held, ok := m[w][h]; ok && held == tier {
						delete(m[w], h)
					}
				}
			case 6:
				x.Apply(w, 0, func(tx Tx) { tx.Clear() })
				if m[w] != nil {
					m[w] = map[uint64]Tier{}
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
			var lower [LowerTiers]int
			entries := 0
			for w, set := range m {
				var mine [LowerTiers]int
				for _, tier := range set {
					entries++
					if tier != TierGPU {
						lower[tier-1]++
						mine[tier-1]++
					}
				}
				if got := x.LowerBlocks(w); got != mine {
					t.Fatalf("LowerBlocks(%v) = %v, want %v", w, got, mine)
				}
			}
			if got := x.TierStats(); got != lower || x.Stats().Entries != entries {
				t.Fatalf("TierStats = %v with %d entries, want %v with %d", got, x.Stats().Entries, lower, entries)
			}
			checkTierLists(t, x)
		}
		if lazy {
			for range 2 * (tableShards/reclaimShards + 2) {
				x.Remove(WorkerID{Instance: 1 << 40}, nil)
			}
		}
		// Every hash marked as held below GPU is, by someone live or not
		// yet reclaimed; once reclaimed, none is marked for nothing.
		dumps := x.Dump()
		for _, d := range dumps {
			for i, h := range d.Hashes {
				if want := m[d.ID][h]; tierAt(d.Tiers, i) != want {
					t.Fatalf("dump of %v: %d on %v, model %v", d.ID, h, tierAt(d.Tiers, i), want)
				}
			}
		}
		y := New()
		y.Restore(dumps)
		if y.TierStats() != x.TierStats() || y.Stats().Entries != x.Stats().Entries {
			t.Fatalf("restored %v %+v, dumped %v %+v", y.TierStats(), y.Stats(), x.TierStats(), x.Stats())
		}
		if lazy && x.tiers.t.len() > 0 {
			n := 0
			for _, set := range m {
				for _, tier := range set {
					if tier != TierGPU {
						n++
					}
				}
			}
			if n == 0 {
				t.Fatalf("tier table keeps %d hashes after reclaim, the model none", x.tiers.t.len())
			}
		}
	}
}

// checkTierLists checks what a lookup reads of the tier table instead of
// its entries: each list's per-tier bitsets name exactly its entries'
// slots on that tier (each slot once), its oldest stamp is no later than
// any entry's, a free list is empty, and every live worker's tier that
// has seen no eviction is marked store-only.
func checkTierLists(t interface{ Fatalf(string, ...any) }, x *Index) {
	tt := &x.tiers
	free := map[uint32]bool{}
	for _, i := range tt.freeLists {
		free[i] = true
	}
	for i := range tt.lists {
		l := &tt.lists[i]
		if free[uint32(i)] != (len(l.entries) == 0) {
			t.Fatalf("tier list %d: free %v with %d entries", i, free[uint32(i)], len(l.entries))
		}
		var want [LowerTiers][]uint64
		seen := map[uint32]bool{}
		for _, e := range l.entries {
			if seen[e.slot] {
				t.Fatalf("tier list %d: slot %d twice", i, e.slot)
			}
			seen[e.slot] = true
			want[e.tier-1] = setBit(want[e.tier-1], e.slot)
			if e.at < l.oldest {
				t.Fatalf("tier list %d: entry stamped %d before its oldest %d", i, e.at, l.oldest)
			}
		}
		for tier := range LowerTiers {
			for wi := range max(len(want[tier]), len(l.on[tier])) {
				var w, g uint64
				if wi < len(want[tier]) {
					w = want[tier][wi]
				}
				if wi < len(l.on[tier]) {
					g = l.on[tier][wi]
				}
				if w != g {
					t.Fatalf("tier list %d, tier %v, word %d: bits %#x, entries say %#x", i, Tier(tier+1), wi, g, w)
				}
			}
		}
	}
	for s, w := range x.workers {
		if w == nil || deadSlot(x.dead, uint32(s)) {
			continue
		}
		for tier := range LowerTiers {
			so := tt.storeOnly[tier]
			marked := s/64 < len(so) && so[s/64]&(1<<(s%64)) != 0
			if w.removes&(1<<(tier+1)) == 0 && !marked {
				t.Fatalf("slot %d: tier %v has seen no eviction, not marked store-only", s, Tier(tier+1))
			}
		}
	}
}

// TestTierListAging: a lookup counts the slots holding a block below GPU
// by its list's bitsets unless an entry of a slot still in the walk may
// have aged (stamped past the TTL, on a store-only tier), and entry by
// entry then; both give the brute-force answer. Three workers hold a
// prefix on host memory: one store-only, two that report evictions.
func TestTierListAging(t *testing.T) {
	now := time.Unix(1000, 0)
	lm, v1, v2 := WorkerID{Instance: 1}, WorkerID{Instance: 2}, WorkerID{Instance: 3}
	hs := []uint64{1, 2, 3, 4}
	steps := []struct {
		name    string
		advance time.Duration
		apply   func(x *Index)
		want    []Overlap
	}{
		{name: "young: by the bitsets", want: []Overlap{
			{Worker: lm, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v1, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v2, Blocks: 4, Lower: [3]int32{2, 1, 0}}}},
		{name: "old: the store-only worker's blocks age, the others' are counted", advance: 2 * time.Minute, want: []Overlap{
			{Worker: lm, Blocks: 1}, {Worker: v1, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v2, Blocks: 4, Lower: [3]int32{2, 1, 0}}}},
		{name: "stored again: young again", apply: func(x *Index) {
			x.Apply(lm, 0, func(tx Tx) { tx.StoreOn(hs[1:3], TierCPU) })
		}, want: []Overlap{
			{Worker: lm, Blocks: 3, Lower: [3]int32{2, 0, 0}}, {Worker: v1, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v2, Blocks: 4, Lower: [3]int32{2, 1, 0}}}},
		{name: "the store-only worker evicts: its tier ages no more", apply: func(x *Index) {
			x.Apply(lm, 0, func(tx Tx) { tx.RemoveFrom([]uint64{99}, TierCPU) })
		}, want: []Overlap{
			{Worker: lm, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v1, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v2, Blocks: 4, Lower: [3]int32{2, 1, 0}}}},
		{name: "v2 leaves", apply: func(x *Index) { x.RemoveWorker(v2) }, want: []Overlap{
			{Worker: lm, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v1, Blocks: 4, Lower: [3]int32{3, 0, 0}}}},
		{name: "v1 evicts block 3 from host: lm alone past it", apply: func(x *Index) {
			x.Apply(v1, 0, func(tx Tx) { tx.RemoveFrom(hs[2:3], TierCPU) })
		}, want: []Overlap{
			{Worker: lm, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v1, Blocks: 2, Lower: [3]int32{1, 0, 0}}}},
		{name: "lm alone past block 3, its entries young", apply: func(x *Index) {
			x.Apply(lm, 0, func(tx Tx) { tx.StoreOn(hs[1:], TierCPU) })
			x.Apply(v1, 0, func(tx Tx) { tx.StoreOn(hs[3:], TierDisk) })
		}, want: []Overlap{
			{Worker: lm, Blocks: 4, Lower: [3]int32{3, 0, 0}}, {Worker: v1, Blocks: 2, Lower: [3]int32{1, 0, 0}}}},
	}
	x := New()
	x.SetTierTTL(time.Minute, func() time.Time { return now })
	x.Apply(lm, 0, func(tx Tx) { tx.StoreOn(hs[:1], TierGPU); tx.StoreOn(hs[1:], TierCPU) })
	x.Apply(v1, 0, func(tx Tx) {
		tx.StoreOn(hs[:1], TierGPU)
		tx.StoreOn(hs[1:], TierCPU)
		tx.RemoveFrom([]uint64{99}, TierCPU)
	})
	x.Apply(v2, 0, func(tx Tx) {
		tx.StoreOn(hs[:1], TierGPU)
		tx.StoreOn(hs[1:3], TierCPU)
		tx.StoreOn(hs[3:], TierDisk)
		tx.RemoveFrom([]uint64{99}, TierCPU)
		tx.RemoveFrom([]uint64{99}, TierDisk)
	})
	for _, st := range steps {
		now = now.Add(st.advance)
		if st.apply != nil {
			st.apply(x)
		}
		if d := cmp.Diff(sorted(st.want), sorted(x.Overlaps(hs))); d != "" {
			t.Fatalf("%s: (-want +got)\n%s", st.name, d)
		}
		checkTierLists(t, x)
	}
}

// TestTierMoves walks one block through an offloading engine's life: on
// GPU, offloaded to host (one store, not a loss), the GPU eviction that
// follows (nothing), reloaded to GPU, then evicted from everywhere.
func TestTierMoves(t *testing.T) {
	w := WorkerID{Instance: 1}
	hs := []uint64{11, 12, 13}
	steps := []struct {
		name  string
		apply func(tx Tx)
		want  []Overlap
	}{
		{"stored on gpu", func(tx Tx) { tx.StoreOn(hs, TierGPU) }, []Overlap{{Worker: w, Blocks: 3}}},
		{"tail offloaded to host", func(tx Tx) { tx.StoreOn(hs[1:], TierCPU) }, []Overlap{{Worker: w, Blocks: 3, Lower: [3]int32{2, 0, 0}}}},
		{"gpu evicts the offloaded tail", func(tx Tx) { tx.RemoveFrom(hs[1:], TierGPU) }, []Overlap{{Worker: w, Blocks: 3, Lower: [3]int32{2, 0, 0}}}},
		{"one block to disk", func(tx Tx) { tx.StoreOn(hs[2:], TierDisk) }, []Overlap{{Worker: w, Blocks: 3, Lower: [3]int32{1, 1, 0}}}},
		{"host block reloaded", func(tx Tx) { tx.StoreOn(hs[1:2], TierGPU) }, []Overlap{{Worker: w, Blocks: 3, Lower: [3]int32{0, 1, 0}}}},
		{"host eviction of a block on disk", func(tx Tx) { tx.RemoveFrom(hs[2:], TierCPU) }, []Overlap{{Worker: w, Blocks: 3, Lower: [3]int32{0, 1, 0}}}},
		{"disk eviction", func(tx Tx) { tx.RemoveFrom(hs[2:], TierDisk) }, []Overlap{{Worker: w, Blocks: 2}}},
		{"an unknown medium", func(tx Tx) { tx.StoreOn(hs[:1], TierUnknown) }, []Overlap{{Worker: w, Blocks: 2, Lower: [3]int32{0, 0, 1}}}},
		{"removed from any tier", func(tx Tx) { tx.Remove(hs) }, nil},
	}
	x := New()
	for _, s := range steps {
		x.Apply(w, 0, s.apply)
		if d := cmp.Diff(s.want, x.Overlaps(hs)); d != "" {
			t.Fatalf("%s: (-want +got)\n%s", s.name, d)
		}
	}
	if x.TierStats() != [3]int{} || x.tiers.t.len() != 0 {
		t.Fatalf("empty index keeps tiers: %v, %d hashes", x.TierStats(), x.tiers.t.len())
	}
}

// TestTierTTL ages out a store-only tier's blocks, and only those: a
// worker that has evicted from a tier keeps its blocks there for ever,
// GPU blocks never age, and a block stored again is young again. Writes
// sweep the aged entries out of the table.
func TestTierTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	x := New()
	x.SetTierTTL(time.Minute, func() time.Time { return now })
	lm, vl := WorkerID{Instance: 1}, WorkerID{Instance: 2} // store-only (LMCache), and one that reports removals
	hs := []uint64{1, 2, 3}
	x.Apply(lm, 0, func(tx Tx) { tx.StoreOn(hs[:1], TierGPU); tx.StoreOn(hs[1:], TierCPU) })
	x.Apply(vl, 0, func(tx Tx) {
		tx.StoreOn(hs, TierCPU)
		tx.RemoveFrom([]uint64{99}, TierCPU)
	})
	want := func(name string, lmBlocks int, lower int32) {
		t.Helper()
		got := sorted(x.Overlaps(hs))
		exp := []Overlap{{Worker: lm, Blocks: lmBlocks, Lower: [3]int32{lower, 0, 0}}, {Worker: vl, Blocks: 3, Lower: [3]int32{3, 0, 0}}}
		if d := cmp.Diff(exp, got); d != "" {
			t.Fatalf("%s: (-want +got)\n%s", name, d)
		}
	}
	want("fresh", 3, 2)
	now = now.Add(50 * time.Second)
	x.Apply(lm, 0, func(tx Tx) { tx.StoreOn(hs[1:2], TierCPU) }) // stored again
	now = now.Add(20 * time.Second)
	want("past the TTL for block 3, not for block 2", 2, 1)
	now = now.Add(time.Minute)
	want("past the TTL for both", 1, 0)
	for range tableShards + 1 {
		x.Remove(WorkerID{Instance: 1 << 40}, nil) // writes sweep
	}
	if got := x.LowerBlocks(lm); got != [3]int{} {
		t.Fatalf("after the sweep lm holds %v below GPU", got)
	}
	if got := x.Blocks(lm); got != 1 {
		t.Fatalf("after the sweep lm holds %d blocks, want its GPU one", got)
	}
	if got := x.LowerBlocks(vl); got != [3]int{3, 0, 0} {
		t.Fatalf("vl reports removals; its blocks aged: %v", got)
	}
}
