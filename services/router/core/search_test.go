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
