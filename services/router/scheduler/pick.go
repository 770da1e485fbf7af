package scheduler

import (
	"math"
	"math/rand/v2"
)

// Lowest is the kv mode's picker: Argmin at temperature 0, Softmax above.
type Lowest struct{}

// Pick chooses by p.Temperature.
func (Lowest) Pick(cands []Candidate, p Params, rng *rand.Rand) int {
	if p.Temperature <= 0 {
		return Argmin{}.Pick(cands, p, rng)
	}
	return Softmax{}.Pick(cands, p, rng)
}

// Argmin picks the cheapest candidate; among equals the one with the
// longest cached prefix (it keeps the cache where it is), then one drawn
// uniformly.
type Argmin struct{}

// Pick chooses the cheapest.
func (Argmin) Pick(cands []Candidate, _ Params, rng *rand.Rand) int {
	best := lowestCost(cands)
	ties, chosen, overlap := 0, -1, -1
	for i := range cands {
		c := &cands[i] // not a copy of each candidate
		if c.Cost > best {
			continue
		}
		switch {
		case c.Overlap > overlap:
			ties, chosen, overlap = 1, i, c.Overlap
		case c.Overlap == overlap:
			ties++
			if rng.IntN(ties) == 0 { // reservoir: uniform among ties
				chosen = i
			}
		}
	}
	return chosen
}

// Softmax draws a candidate with probability proportional to
// exp(-normalised cost / p.Temperature), costs normalised to [0, 1] so
// that the temperature means the same whatever the request size: load
// spreads while cache affinity still pulls. Equal costs are a uniform
// draw.
type Softmax struct{}

// Pick draws one.
func (Softmax) Pick(cands []Candidate, p Params, rng *rand.Rand) int {
	best := lowestCost(cands)
	worst := best
	for i := range cands {
		worst = max(worst, cands[i].Cost)
	}
	span := worst - best
	if span == 0 {
		return rng.IntN(len(cands))
	}
	weights := make([]float64, len(cands))
	total := 0.0
	for i := range cands {
		weights[i] = math.Exp(-(cands[i].Cost - best) / span / p.Temperature)
		total += weights[i]
	}
	r := rng.Float64() * total
	for i, w := range weights {
		if r < w {
			return i
		}
		r -= w
	}
	return len(cands) - 1
}

// Random draws a candidate uniformly, blind to costs.
type Random struct{}

// Pick draws one.
func (Random) Pick(cands []Candidate, _ Params, rng *rand.Rand) int {
	return rng.IntN(len(cands))
}

// lowestCost is the least of the candidates' costs (NaN if any is NaN, as
// min takes it).
func lowestCost(cands []Candidate) float64 {
	best := math.Inf(1)
	for i := range cands {
		best = min(best, cands[i].Cost)
	}
	return best
}
