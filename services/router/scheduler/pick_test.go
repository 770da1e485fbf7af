package scheduler

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPickers: Argmin takes the cheapest, then the longest cached prefix,
// then draws among equals; Softmax draws among equal costs uniformly and
// favours the cheapest as the temperature falls; Random draws uniformly;
// Lowest is Argmin at temperature 0 and Softmax above.
func TestPickers(t *testing.T) {
	cands := func(costs []float64, overlaps []int) []Candidate {
		cs := make([]Candidate, len(costs))
		for i := range cs {
			cs[i].Cost = costs[i]
			if overlaps != nil {
				cs[i].Overlap = overlaps[i]
			}
		}
		return cs
	}
	const draws = 4000
	tests := []struct {
		name     string
		picker   Picker
		temp     float64
		costs    []float64
		overlaps []int
		// share is the least share of the draws each candidate gets
		// (0: never chosen); nil with only: always only.
		only  int
		share []float64
	}{
		{name: "argmin: the cheapest", picker: Argmin{}, costs: []float64{5, 3, 4}, only: 1},
		{name: "argmin: among equals the longest prefix", picker: Argmin{}, costs: []float64{3, 3, 4}, overlaps: []int{1, 2, 9}, only: 1},
		{name: "argmin: among full ties a uniform draw", picker: Argmin{}, costs: []float64{3, 3, 3}, share: []float64{0.28, 0.28, 0.28}},
		{name: "softmax: equal costs, a uniform draw", picker: Softmax{}, temp: 1, costs: []float64{2, 2}, share: []float64{0.45, 0.45}},
		{name: "softmax: a cold temperature takes the cheapest", picker: Softmax{}, temp: 0.01, costs: []float64{9, 1, 5}, only: 1},
		{name: "softmax: a warm one spreads", picker: Softmax{}, temp: 10, costs: []float64{9, 1, 5}, share: []float64{0.25, 0.3, 0.25}},
		{name: "random: uniform, blind to costs", picker: Random{}, costs: []float64{9, 1, 5}, share: []float64{0.3, 0.3, 0.3}},
		{name: "lowest at temperature 0: argmin", picker: Lowest{}, costs: []float64{3, 3, 4}, overlaps: []int{0, 5, 0}, only: 1},
		{name: "lowest above 0: softmax", picker: Lowest{}, temp: 10, costs: []float64{9, 1, 5}, share: []float64{0.25, 0.3, 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			counts := make([]int, len(tt.costs))
			for range draws {
				counts[tt.picker.Pick(cands(tt.costs, tt.overlaps), Params{Temperature: tt.temp}, rng)]++
			}
			for i, n := range counts {
				switch {
				case tt.share == nil && i == tt.only && n != draws,
					tt.share == nil && i != tt.only && n != 0:
					t.Fatalf("counts %v, want all on %d", counts, tt.only)
				case tt.share != nil && float64(n) < tt.share[i]*draws:
					t.Fatalf("counts %v, want shares at least %v", counts, tt.share)
				}
			}
		})
	}
	// A NaN cost makes every candidate as cheap as any (min takes NaN).
	if got := (Argmin{}).Pick(cands([]float64{1, math.NaN()}, []int{0, 3}), Params{}, rand.New(rand.NewPCG(1, 1))); got != 1 {
		t.Fatalf("argmin with a NaN cost chose %d, want the longest prefix (1)", got)
	}
}
