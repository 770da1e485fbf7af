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

// TestSetIndexedMatchesSearch compares setIndexed with the loop it
// replaced (a binary search per overlap) over random candidate lists (an
// instance may serve two endpoints of a model, so ids repeat) and overlaps
// in slot order, in instance order and shuffled, with other ranks and with
// instances that are not candidates.
func TestSetIndexedMatchesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 3_000 {
		workers := make([]index.WorkerID, 1+rng.IntN(40))
		for i := range workers {
			workers[i] = index.WorkerID{Instance: uint64(1 + rng.IntN(60))}
		}
		slices.SortFunc(workers, func(a, b index.WorkerID) int { return cmp.Compare(a.Instance, b.Instance) })
		var overlaps []index.Overlap
		for id := range uint64(64) {
			if rng.IntN(3) == 0 {
				overlaps = append(overlaps, index.Overlap{Worker: index.WorkerID{Instance: id, DPRank: uint32(rng.IntN(4) / 3)}, Blocks: 1 + rng.IntN(9)})
			}
		}
		switch rng.IntN(3) {
		case 0: // by depth, then slot, as a lookup reports them
			slices.SortStableFunc(overlaps, func(a, b index.Overlap) int { return cmp.Compare(a.Blocks, b.Blocks) })
		case 1:
			rng.Shuffle(len(overlaps), func(i, j int) { overlaps[i], overlaps[j] = overlaps[j], overlaps[i] })
		}
		want := make([]int, len(workers))
		for _, o := range overlaps {
			if o.Worker.DPRank != 0 {
				continue
			}
			i := searchWorkers(workers, o.Worker.Instance)
			for ; i < len(workers) && workers[i].Instance == o.Worker.Instance; i++ {
				want[i] = o.Blocks
			}
		}
		got := make([]int, len(workers))
		setIndexed(got, workers, overlaps)
		if !slices.Equal(got, want) {
			t.Fatalf("setIndexed(%v, %v) = %v, want %v", workers, overlaps, got, want)
		}
	}
}
