package scheduler

import (
	"math"
	"testing"
)

// TestAdapterLoad: a worker without the request's adapter loaded pays its
// load time; one with it loaded, or a request without an adapter, pays
// nothing and keeps its cost to the bit (a negative zero stays one).
func TestAdapterLoad(t *testing.T) {
	negZero := math.Copysign(0, -1)
	tests := []struct {
		name  string
		cands []Candidate
		want  []float64
	}{
		{name: "not loaded pays its load", cands: []Candidate{{Cost: 100, AdapterMs: 25}, {Cost: 110}}, want: []float64{125, 110}},
		{name: "each its own load time", cands: []Candidate{{Cost: 10, AdapterMs: 40}, {Cost: 10, AdapterMs: 5}}, want: []float64{50, 15}},
		{name: "all loaded", cands: []Candidate{{Cost: 7}, {Cost: 9}}, want: []float64{7, 9}},
		{name: "a negative zero stays", cands: []Candidate{{Cost: negZero}}, want: []float64{negZero}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := append([]Candidate(nil), tt.cands...)
			AdapterLoad{}.Add(cands, Request{}, Params{})
			for i := range cands {
				if math.Float64bits(cands[i].Cost) != math.Float64bits(tt.want[i]) {
					t.Errorf("candidate %d: cost %v, want %v", i, cands[i].Cost, tt.want[i])
				}
			}
		})
	}
}
