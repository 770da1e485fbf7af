package scheduler

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestDecode: while requests decode, every prefill step of the request's
// span (and, with a rate, of the span ahead) carries a decode step at the
// worker's KV usage; nothing while none decode.
func TestDecode(t *testing.T) {
	// Decode(u) = max(1, 20u + 10); a step holds 100 tokens less one per
	// decoding request.
	m := timingmodel.Model{PrefillPerToken: 1, DecodeLinear: 20, DecodeBase: 10, DecodeMin: 1, MaxBatchedTokens: 100}
	r := Request{Blocks: 10, Tokens: 100, BlockSize: 10}
	tests := []struct {
		name  string
		cand  Candidate
		rate  float64
		cost  float64
		ahead float64
	}{
		{name: "nothing decodes", cand: Candidate{QueuedTokens: 500}, cost: 0},
		{name: "one decoding request: 100 tokens in two steps of 99", cand: Candidate{Decoding: 1}, cost: 2 * 10},
		{name: "KV usage slows each decode step", cand: Candidate{Decoding: 1, Usage: 0.5}, cost: 2 * 20},
		{name: "a cached prefix saves steps", cand: Candidate{Decoding: 1, Overlap: 8}, cost: 1 * 10},
		{name: "queued tokens add steps", cand: Candidate{Decoding: 10, QueuedTokens: 170}, cost: 3 * 10},
		{name: "the steps ahead, with a rate", cand: Candidate{Decoding: 10, QueuedTokens: 170}, rate: 0.1, cost: 3 * 10, ahead: 2 * 10},
		{name: "nothing ahead: no step", cand: Candidate{Decoding: 10}, rate: 0.1, cost: 2 * 10, ahead: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cand
			c.Timing = m
			rq := r
			rq.Rate = tt.rate
			// Prefill records the spans; weight 0 leaves its time out.
			cands := []Candidate{c}
			got := addTerms(cands, rq, Params{OverlapWeight: 0}, Prefill{}, Decode{})
			near(t, "cost", got, []float64{tt.cost})
			if tt.rate > 0 {
				near(t, "ahead", []float64{cands[0].ahead}, []float64{tt.ahead})
			}
		})
	}
}
