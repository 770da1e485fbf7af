package index

import (
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLowerCountsAdd: the bit-sliced counters count as one counter per
// slot and tier does, through the planes' overflow into c, with slots
// counted entry by entry (c) beside them, and a reset after a lookup that
// used the planes starts every count from zero again.
func TestLowerCountsAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(39, 1))
	tests := []struct {
		name  string
		slots int
		adds  int
		dense bool // most adds to most slots (counts pass 1<<countPlanes)
	}{
		{"one word, sparse", 40, 300, false},
		{"one word, past the top plane", 64, 1500, true},
		{"three words, past the top plane", 150, 5000, true},
		{"three words, sparse", 150, 500, false},
	}
	lc := new(lowerCounts)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			words := (tt.slots + 63) / 64
			for round := range 2 {
				lc.reset(tt.slots, words)
				want := make([][LowerTiers]int32, tt.slots)
				for range tt.adds {
					tier := r.IntN(LowerTiers)
					if r.IntN(20) == 0 {
						// Counted entry by entry, as an aged list is.
						s := r.IntN(tt.slots)
						lc.c[s][tier]++
						want[s][tier]++
						continue
					}
					wi := r.IntN(words)
					x := r.Uint64()
					if tt.dense {
						x |= r.Uint64() | r.Uint64()
					} else {
						x &= r.Uint64() & r.Uint64()
					}
					if n := tt.slots - wi*64; n < 64 {
						x &= 1<<n - 1
					}
					if x == 0 {
						continue
					}
					lc.add(tier, wi, x)
					for ; x != 0; x &= x - 1 {
						want[wi*64+bits.TrailingZeros64(x)][tier]++
					}
				}
				most := int32(0)
				for s := range tt.slots {
					if got := lc.of(s); got != want[s] {
						t.Fatalf("round %d: slot %d counts %v, want %v", round, s, got, want[s])
					}
					most = max(most, want[s][0], want[s][1], want[s][2])
				}
				for wi := range words {
					lc.snapWord(wi)
					for s := wi * 64; s < min(tt.slots, wi*64+64); s++ {
						if got := lc.ofSnapped(wi, s-wi*64); got != want[s] {
							t.Fatalf("round %d: slot %d counts %v read at once, want %v", round, s, got, want[s])
						}
					}
				}
				if tt.dense && most < 1<<countPlanes {
					t.Fatalf("most %d: the counts never passed the planes", most)
				}
			}
		})
	}
}

// TestLowerCountsLongPrefix: lookups of a prefix that several workers hold
// with hundreds of its blocks below GPU (past what the bit-sliced counters
// hold before they move a count to c) count each worker's blocks per tier
// as the brute-force model does, through Overlaps and Lookup alike.
func TestLowerCountsLongPrefix(t *testing.T) {
	const n = 1200
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	tierOf := func(w, i int) Tier {
		switch {
		case i%5 == 0:
			return TierDisk
		case i%2 == 0 || (w == 2 && i%3 == 0):
			return TierCPU
		case i%7 == 0:
			return TierUnknown
		}
		return TierGPU
	}
	tests := []struct {
		name   string
		holds  []int // blocks each worker holds of the prefix
		lookup int   // blocks looked up
	}{
		{"three workers hold it all", []int{n, n, n}, n},
		{"they leave at different depths", []int{n, 900, 300, 40}, n},
		{"many workers", []int{n, n, 1000, 700, 700, 600, 300, 300, 10, 1, n, 999}, n},
		{"a short lookup", []int{n, n, n}, 100},
		{"many leave at once", []int{n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n}, n},
		{"many leave at once, and at the end", []int{n, n, n, n, n, n, n, n, n, n, 700, 700, 700, 700, 700, 700, 700, 700, 700, 700, 700, 5}, n},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New()
			m := tierModel{}
			for w, held := range tt.holds {
				id := WorkerID{Instance: uint64(w + 1)}
				m[id] = map[uint64]Tier{}
				byTier := map[Tier][]uint64{}
				for i := range held {
					tier := tierOf(w, i)
					byTier[tier] = append(byTier[tier], hashes[i])
					m[id][hashes[i]] = tier
				}
				x.Apply(id, 0, func(tx Tx) {
					for tier, hs := range byTier {
						tx.StoreOn(hs, tier)
					}
				})
			}
			q := hashes[:tt.lookup]
			want := sorted(m.overlaps(q))
			if d := cmp.Diff(want, sorted(x.Overlaps(q))); d != "" {
				t.Fatalf("Overlaps (-want +got):\n%s", d)
			}
			checkGrouped(t, x, q, want, nil)
			most := int32(0)
			for _, o := range want {
				most = max(most, o.Lower[0])
			}
			if tt.lookup == n && most < 1<<countPlanes {
				t.Fatalf("at most %d blocks on the host tier: the counters never pass their planes", most)
			}
		})
	}
}
