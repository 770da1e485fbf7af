package scheduler

import (
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
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

// TestAdapterSlotWait: a request whose adapter must wait for a slot pays
// the part of the wait that outlasts the worker's queue (the engine
// computes the queue while the request is passed over), on top of the
// load; nothing when a slot is free. The queue's time is the timing
// model's: its prompt tokens' prefill and the decode steps beside them.
func TestAdapterSlotWait(t *testing.T) {
	tm := timingmodel.Default()
	queueOf := func(c Candidate) float64 {
		s := tm.Steps(c.Decoding, c.Usage)
		sp := s.Span(c.QueuedTokens)
		sp.Attn = c.QueuedAttn
		ms := s.PrefillMs(sp, 1)
		if d, ok := s.DecodeMs(sp); ok {
			ms += d
		}
		return ms
	}
	// Ten uncached prompts of 2,000 tokens.
	queued := Candidate{QueuedTokens: 20000, QueuedAttn: 10 * 2000 * 2000, Decoding: 4, Usage: 0.5, Timing: tm}
	q := queueOf(queued)
	if q < 100 {
		t.Fatalf("a queue of 20,000 tokens takes %v ms: the cases below need a long one", q)
	}
	with := func(c Candidate, cost, load, wait float64) Candidate {
		c.Cost, c.AdapterMs, c.SlotWaitMs = cost, load, wait
		return c
	}
	idle := Candidate{Timing: tm}
	tests := []struct {
		name string
		cand Candidate
		want float64 // added to the cost
		wait float64 // AdapterWaitMs
	}{
		{name: "a free slot: the load alone", cand: with(idle, 100, 77.4, 0), want: 77.4, wait: 77.4},
		{name: "an idle worker waits the whole slot wait", cand: with(idle, 100, 77.4, 1500), want: 77.4 + 1500, wait: 77.4 + 1500},
		{name: "a wait shorter than the queue costs nothing more", cand: with(queued, 100, 77.4, q/2), want: 77.4 * 5, wait: 77.4},
		{name: "a wait longer than the queue costs what outlasts it", cand: with(queued, 100, 77.4, q+900), want: 77.4*5 + 900, wait: 77.4 + 900},
		{name: "loaded: nothing", cand: with(queued, 100, 0, 0), want: 0, wait: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{tt.cand}
			AdapterLoad{}.Add(cands, Request{}, Params{})
			if got := cands[0].Cost - tt.cand.Cost; math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("added %v, want %v", got, tt.want)
			}
			c := tt.cand
			if got := c.AdapterWaitMs(); math.Abs(got-tt.wait) > 1e-9 {
				t.Errorf("AdapterWaitMs %v, want %v", got, tt.wait)
			}
		})
	}
}
