package scheduler

import (
	"fmt"
	"testing"
	"time"

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

// TestPrefillAttentionPerSequence: each prompt's attention is over its
// own context, as an engine computes it (timingmodel.Attention), whatever
// the steps it shares: worked by hand on a model of 0.001 ms per token
// squared, 0.1 ms per token and 10 ms per step, steps of 1,000 tokens,
// blocks of 100. The prompts queued on the worker are routed through the
// load record, as the router's own.
func TestPrefillAttentionPerSequence(t *testing.T) {
	m := timingmodel.Model{PrefillQuadratic: 0.001, PrefillPerToken: 0.1, PrefillPerBatch: 10, DecodeBase: 5, MaxBatchedTokens: 1000}
	type queued struct{ prefill, blocks int } // a routed prompt's uncached and total blocks
	tests := []struct {
		name    string
		queue   []queued
		tokens  int // the request's prompt
		overlap int // its blocks cached on the worker
		elapsed time.Duration
		want    float64
	}{
		// 500^2 = 250,000: 250 + 50 + 10, as one sequence priced it.
		{name: "one uncached prompt in one step: unchanged", tokens: 500, want: 250 + 50 + 10},
		// 200 new tokens after 800 cached attend to all 1,000:
		// 1,000^2 - 800^2 = 360,000 (not 200^2 = 40,000).
		{name: "a prompt after a long cached prefix", tokens: 1000, overlap: 8, want: 360 + 20 + 10},
		// A queued uncached prompt of 300 and the request's 500 in one
		// step: 300^2 + 500^2 = 340,000 (not 800^2 = 640,000).
		{name: "two prompts in one step", queue: []queued{{3, 3}}, tokens: 500, want: 340 + 80 + 10},
		// 2,500 tokens in steps of 1,000, 1,000 and 500: the later chunks
		// attend to the earlier, 2,500^2 = 6,250,000 in all (not 2 x
		// 1,000^2 + 500^2 = 2,250,000), and three per-step constants.
		{name: "a long prompt's later chunks", tokens: 2500, want: 6250 + 250 + 30},
		// The queued prompt's 200 uncached tokens attend to its 800
		// cached (360,000), the request's 300 to themselves (90,000).
		{name: "a queued prompt after its cached prefix", queue: []queued{{2, 10}}, tokens: 300, want: 450 + 50 + 10},
		// The head, 1,000 uncached tokens, is computed at its mean pace
		// (its 900 tokens before the block it keeps, their 810,000 in one
		// step of 810 + 90 + 10 ms): 450 done after 455 ms. Left: 550
		// tokens, whose attention is over the 450 before them, 1,000^2 -
		// 450^2 = 797,500; the request's 100, 10,000.
		{name: "the head's computed tokens", queue: []queued{{10, 10}}, tokens: 100, elapsed: 455 * time.Millisecond,
			want: 807.5 + 65 + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			l := NewLoadClock(func() time.Time { return now })
			for i, q := range tt.queue {
				l.Add(fmt.Sprint("queued", i), w(1), q.prefill, make([]uint64, q.blocks))
			}
			now = now.Add(tt.elapsed)
			cands := []Candidate{{Worker: w(1), Overlap: tt.overlap, Timing: m}}
			l.FillAll(cands, 100)
			req := Request{Blocks: tt.tokens / 100, Tokens: tt.tokens, BlockSize: 100}
			got := addTerms(cands, req, Params{OverlapWeight: 1}, Prefill{})
			near(t, "cost", got, []float64{tt.want})
		})
	}
}
