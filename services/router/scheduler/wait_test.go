package scheduler

import "testing"

// TestQueueWait: with a rate, a request's work on a worker (the terms
// before less the time ahead) costs rate * work * (ahead + work/2) to the
// requests behind it; nothing without a rate.
func TestQueueWait(t *testing.T) {
	tests := []struct {
		name        string
		cost, ahead float64
		rate        float64
		want, work  float64
	}{
		{name: "no rate: nothing", cost: 120, ahead: 100, want: 120},
		{name: "work behind a queue", cost: 120, ahead: 100, rate: 0.5, want: 120 + 0.5*20*(100+10), work: 20},
		{name: "an idle worker: half the work", cost: 40, ahead: 0, rate: 0.25, want: 40 + 0.25*40*20, work: 40},
		{name: "no work: nothing", cost: 100, ahead: 100, rate: 1, want: 100},
		{name: "less than ahead counts as no work", cost: 90, ahead: 100, rate: 1, want: 90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{{Cost: tt.cost, ahead: tt.ahead}}
			QueueWait{}.Add(cands, Request{Rate: tt.rate}, Params{})
			near(t, "cost", []float64{cands[0].Cost}, []float64{tt.want})
			if tt.rate > 0 {
				near(t, "work", []float64{cands[0].work}, []float64{tt.work})
			}
		})
	}
}
