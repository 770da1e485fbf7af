package scheduler

import (
	"math"
	"testing"
)

// addTerms runs terms, in order, over cands as a Policy does (costs and
// the time ahead start at -0) and returns the costs.
func addTerms(cands []Candidate, req Request, p Params, terms ...Term) []float64 {
	pol := Policy{Terms: terms}
	pol.cost(cands, req, p)
	out := make([]float64, len(cands))
	for i := range cands {
		out[i] = cands[i].Cost
	}
	return out
}

// near fails t unless got and want are equal within 1e-9 each.
func near(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
}
