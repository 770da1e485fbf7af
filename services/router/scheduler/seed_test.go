package scheduler

import "testing"

// TestSeed: a worker without the shared prefix is credited with what a
// copy there saves its sharers (Shared.Rate times WaitSaved of the homes'
// shortest backlog and the worker's queue with this request's work), and
// only while there is a rate, sharers, a home with a backlog, a worker
// that is not a home, and queues that drain.
func TestSeed(t *testing.T) {
	sh := Shared{Blocks: 8, Rate: 0.01, HomeBusy: 0.5, SeedBusy: 0.25}
	home := Candidate{Overlap: 8, Cost: 300, ahead: 150, work: 20}
	home2 := Candidate{Overlap: 9, Cost: 320, ahead: 200, work: 20}
	cold := Candidate{Overlap: 2, Cost: 250, ahead: 30, work: 70}
	credit := sh.Rate * WaitSaved(150, 0.5, 100, 0.75)
	tests := []struct {
		name  string
		cands []Candidate
		rate  float64
		sh    Shared
		want  []float64
	}{
		{name: "a copy saves the sharers' wait", cands: []Candidate{home, cold}, rate: 0.1, sh: sh, want: []float64{300, 250 - credit}},
		{name: "the homes' shortest backlog counts", cands: []Candidate{home2, home, cold}, rate: 0.1, sh: sh, want: []float64{320, 300, 250 - credit}},
		{name: "no rate", cands: []Candidate{home, cold}, sh: sh, want: []float64{300, 250}},
		{name: "no sharers", cands: []Candidate{home, cold}, rate: 0.1, sh: Shared{Blocks: 8, HomeBusy: 0.5}, want: []float64{300, 250}},
		{name: "every worker a home", cands: []Candidate{home, home2}, rate: 0.1, sh: sh, want: []float64{300, 320}},
		{name: "no home", cands: []Candidate{cold, cold}, rate: 0.1, sh: sh, want: []float64{250, 250}},
		{name: "no backlog at the home", cands: []Candidate{{Overlap: 8, Cost: 20, work: 20}, cold}, rate: 0.1, sh: sh, want: []float64{20, 250}},
		{name: "a home that never drains", cands: []Candidate{home, cold}, rate: 0.1, sh: Shared{Blocks: 8, Rate: 0.01, HomeBusy: 1}, want: []float64{300, 250}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := append([]Candidate(nil), tt.cands...)
			Seed{}.Add(cands, Request{Rate: tt.rate, Shared: tt.sh}, Params{})
			got := make([]float64, len(cands))
			for i := range cands {
				got[i] = cands[i].Cost
			}
			near(t, "costs", got, tt.want)
		})
	}
}
