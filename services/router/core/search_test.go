package core

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/services/router/index"
)

func TestSearchWorkersMatchesBinarySearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 2_000 {
		workers := make([]index.WorkerID, rng.IntN(40))
		for i := range workers {
			workers[i] = index.WorkerID{Instance: uint64(rng.IntN(60)), DPRank: uint32(rng.IntN(2))}
		}
		slices.SortFunc(workers, func(a, b index.WorkerID) int { return cmp.Compare(a.Instance, b.Instance) })
		id := uint64(rng.IntN(64))
		want, _ := slices.BinarySearchFunc(workers, id, func(w index.WorkerID, id uint64) int { return cmp.Compare(w.Instance, id) })
		if got := searchWorkers(workers, id); got != want {
			t.Fatalf("searchWorkers(%v, %d) = %d, want %d", workers, id, got, want)
		}
	}
}

// TestSetIndexedMatchesSearch compares setIndexed with a brute-force
// search over random candidate lists (an instance may serve two endpoints
// of a model, so ids repeat; some serve several data-parallel ranks) and
// overlaps in slot order, in instance order and shuffled, with ranks that
// are not candidates and instances that are not candidates: rank-aware, a
// candidate gets its own rank's overlap and its blocks below GPU;
// rank-blind, the longest of its instance's.
func TestSetIndexedMatchesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 3_000 {
		var workers []index.WorkerID
		for range 1 + rng.IntN(40) {
			id, ranks := uint64(1+rng.IntN(60)), 1
			if rng.IntN(4) == 0 {
				ranks = 2 + rng.IntN(3)
			}
			for r := range ranks {
				workers = append(workers, index.WorkerID{Instance: id, DPRank: uint32(r)})
			}
		}
		slices.SortFunc(workers, func(a, b index.WorkerID) int {
			return cmp.Or(cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.DPRank, b.DPRank))
		})
		var overlaps []index.Overlap
		for id := range uint64(64) {
			for r := range uint32(5) {
				if rng.IntN(3+3*int(r)) == 0 {
					o := index.Overlap{Worker: index.WorkerID{Instance: id, DPRank: r}, Blocks: 1 + rng.IntN(9)}
					if rng.IntN(2) == 0 {
						o.Lower[rng.IntN(index.LowerTiers)] = int32(1 + rng.IntN(o.Blocks))
					}
					overlaps = append(overlaps, o)
				}
			}
		}
		switch rng.IntN(3) {
		case 0: // by depth, then slot, as a lookup reports them
			slices.SortStableFunc(overlaps, func(a, b index.Overlap) int { return cmp.Compare(a.Blocks, b.Blocks) })
		case 1:
			rng.Shuffle(len(overlaps), func(i, j int) { overlaps[i], overlaps[j] = overlaps[j], overlaps[i] })
		}
		for _, anyRank := range []bool{false, true} {
			want := make([]int, len(workers))
			wantLower := make([][index.LowerTiers]int32, len(workers))
			for i, w := range workers {
				for _, o := range overlaps {
					if o.Worker == w || anyRank && o.Worker.Instance == w.Instance {
						want[i] = max(want[i], o.Blocks)
					}
					if o.Worker == w {
						wantLower[i] = o.Lower
					}
				}
			}
			got := make([]int, len(workers))
			var gotLower [][index.LowerTiers]int32
			if !anyRank {
				gotLower = make([][index.LowerTiers]int32, len(workers))
			}
			setIndexed(got, gotLower, workers, overlaps, anyRank)
			if !slices.Equal(got, want) {
				t.Fatalf("setIndexed(%v, %v, anyRank %v) = %v, want %v", workers, overlaps, anyRank, got, want)
			}
			if !anyRank && !slices.Equal(gotLower, wantLower) {
				t.Fatalf("setIndexed(%v, %v): lower %v, want %v", workers, overlaps, gotLower, wantLower)
			}
		}
	}
}
