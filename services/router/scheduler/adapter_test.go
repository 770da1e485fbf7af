package scheduler

import (
	"math"
	"testing"
)

// TestAdapterLoad: a worker without the request's adapter loaded pays its
// load time, once for the request and once per request decoding there
// (the load delays their next token); one with it loaded, or a request
// without an adapter, pays nothing and keeps its cost to the bit (a
// negative zero stays one), however many decode there.
func TestAdapterLoad(t *testing.T) {
	negZero := math.Copysign(0, -1)
	tests := []struct {
		name  string
		cands []Candidate
		want  []float64
	}{
		{name: "not loaded pays its load", cands: []Candidate{{Cost: 100, AdapterMs: 25}, {Cost: 110}}, want: []float64{125, 110}},
		{name: "each its own load time", cands: []Candidate{{Cost: 10, AdapterMs: 40}, {Cost: 10, AdapterMs: 5}}, want: []float64{50, 15}},
		{name: "all loaded", cands: []Candidate{{Cost: 7}, {Cost: 9, Decoding: 12}}, want: []float64{7, 9}},
		{name: "each decoding request waits the load too", cands: []Candidate{{Cost: 100, AdapterMs: 25, Decoding: 3}, {Cost: 100, AdapterMs: 25}}, want: []float64{200, 125}},
		{name: "a busy worker with it loaded beats an idle one without", cands: []Candidate{{Cost: 100, Decoding: 30}, {Cost: 60, AdapterMs: 77.4, Decoding: 1}}, want: []float64{100, 214.8}},
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
