package scheduler

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestPrefill: the weighted prefill of the queued tokens and the request's
// uncached ones, in the worker's steps; with a rate, the queued tokens'
// prefill alone is the time ahead.
func TestPrefill(t *testing.T) {
	// A step of 100 tokens costs 2 ms per token and 5 ms per step.
	m := timingmodel.Model{PrefillPerToken: 2, PrefillPerBatch: 5, DecodeBase: 10, MaxBatchedTokens: 100}
	r := Request{Blocks: 10, Tokens: 100, BlockSize: 10} // 10 blocks of 10 tokens
	tests := []struct {
		name   string
		cand   Candidate
		weight float64
		rate   float64
		cost   float64
		ahead  float64
	}{
		{name: "prefix reuse: nothing cached, one step of 100 tokens", cand: Candidate{}, weight: 1, cost: 205},
		{name: "prefix reuse: 6 blocks cached, 40 tokens", cand: Candidate{Overlap: 6}, weight: 1, cost: 85},
		{name: "prefix reuse: all cached, the last block still computed", cand: Candidate{Overlap: 10}, weight: 1, cost: 25},
		{name: "prefix reuse: cached past the prompt, the last block", cand: Candidate{Overlap: 40}, weight: 1, cost: 25},
		{name: "queued prefill: 150 queued and 40 new share two steps", cand: Candidate{Overlap: 6, QueuedTokens: 150}, weight: 1, cost: 205 + 185},
		{name: "queued prefill: the time ahead, with a rate", cand: Candidate{Overlap: 6, QueuedTokens: 150}, weight: 1, rate: 0.1, cost: 205 + 185, ahead: 205 + 105},
		{name: "queued prefill: nothing ahead", cand: Candidate{Overlap: 6}, weight: 1, rate: 0.1, cost: 85, ahead: 0},
		{name: "weight scales the prefill", cand: Candidate{Overlap: 6, QueuedTokens: 150}, weight: 0.5, rate: 0.1, cost: (205 + 185) / 2.0, ahead: (205 + 105) / 2.0},
		{name: "weight 0: prefill is free", cand: Candidate{QueuedTokens: 150}, weight: 0, cost: 0},
		// Chunks of 50 beside the decodes, whose steps pay the 5 ms.
		{name: "decoding requests shrink the chunk, no decode time here", cand: Candidate{Decoding: 50}, weight: 1, cost: 2 * 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cand
			c.Timing = m
			rq := r
			rq.Rate = tt.rate
			cands := []Candidate{c}
			got := addTerms(cands, rq, Params{OverlapWeight: tt.weight}, Prefill{})
			near(t, "cost", got, []float64{tt.cost})
			if tt.rate > 0 {
				near(t, "ahead", []float64{cands[0].ahead}, []float64{tt.ahead})
			}
		})
	}
}
