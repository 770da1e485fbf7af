package scheduler

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestDecodeStall: a worker's decoding requests each wait for the prefill
// time the request adds to its steps, which is its tokens' compute: the
// per-step constant is the decode step's, paid with or without the prompt
// (timingmodel's StepMs), on an idle worker, behind a queue, or spilling
// into another step; nothing where nothing decodes; weighted as
// Prefill. The requests waiting ahead are served in the request's steps
// too (decoding, or ending their prompt in the step it shares), and wait
// as long.
func TestDecodeStall(t *testing.T) {
	// A step holds 100 tokens (1 ms each, 2 ms more each squared/100 with
	// the quadratic case) and a prefill step alone costs 5 ms more.
	m := timingmodel.Model{PrefillPerToken: 1, PrefillPerBatch: 5, DecodeBase: 10, MaxBatchedTokens: 100}
	quad := m
	quad.PrefillQuadratic = 0.01
	tests := []struct {
		name     string
		m        timingmodel.Model
		decoding int
		waiting  int // requests queued ahead for their first token
		queued   int
		attn     float64 // of the queued tokens
		overlap  int     // of req's 5 blocks of 10 tokens
		weight   float64
		want     float64
	}{
		{name: "nothing decodes: nothing", m: m, decoding: 0, weight: 1, want: 0},
		// The chunk is 100 - 3 = 97 tokens: 50 new tokens are one step.
		{name: "idle worker: the tokens, not the constant", m: m, decoding: 3, weight: 1, want: 3 * 50},
		{name: "a cached prefix stalls less", m: m, decoding: 3, overlap: 3, weight: 1, want: 3 * 20},
		{name: "behind a queue in the same step: the tokens only", m: m, decoding: 2, queued: 40, weight: 1, want: 2 * 50},
		// 80 queued + 50 new = 130 tokens: a step of 98 and one of 32,
		// where the queue alone was one step of 80.
		{name: "spilling into another step: still the tokens", m: m, decoding: 2, queued: 80, weight: 1, want: 2 * 50},
		// 0.01 x 50^2 = 25 ms of quadratic on top of the 50.
		{name: "the quadratic term of the chunk", m: quad, decoding: 3, weight: 1, want: 3 * 75},
		// 40 queued (a prompt of its own) + 50 in one chunk: the
		// request's attention is over its own tokens, 0.01 x 50^2, not
		// over the queue's it shares the step with.
		{name: "a chunk shared with a queued prompt: its own attention", m: quad, decoding: 2, queued: 40, attn: 40 * 40, weight: 1, want: 2 * (50 + 25)},
		// 3 of its 5 blocks cached: its 20 new tokens attend to all 50,
		// 0.01 x (50^2 - 30^2) = 16 ms.
		{name: "after a cached prefix: attention over the prefix", m: quad, decoding: 2, overlap: 3, weight: 1, want: 2 * (20 + 16)},
		{name: "weighted as the prefill", m: m, decoding: 3, weight: 0.5, want: 3 * 50 * 0.5},
		{name: "weight 0: nothing", m: m, decoding: 3, weight: 0, want: 0},
		// 2 decoding and 1 waiting: the waiting prompt decodes in the
		// request's steps after the queue, or ends in the one its first
		// tokens share, whose end they delay: 3 requests wait 50 ms.
		{name: "a waiting prompt waits as a decoding one", m: m, decoding: 2, waiting: 1, queued: 80, weight: 1, want: 3 * 50},
		{name: "all in the step the waiting prompt ends in", m: m, decoding: 2, waiting: 1, queued: 100, weight: 1, want: 3 * 50},
		// Three small prompts all ending in the step the request joins:
		// each first token comes 50 ms later.
		{name: "small waiting prompts sharing the step", m: m, decoding: 2, waiting: 3, queued: 30, weight: 1, want: 5 * 50},
		// The heads have their last block left, which a router counts
		// as no queued tokens.
		{name: "waiting with nothing queued", m: m, decoding: 1, waiting: 2, weight: 1, want: 3 * 50},
		// A prefill worker's prompts decode elsewhere.
		{name: "nothing decodes: nothing for the waiting either", m: m, waiting: 1, queued: 97, weight: 1, want: 0},
		{name: "waiting, the quadratic term", m: quad, decoding: 2, waiting: 1, queued: 80, attn: 80 * 80, weight: 1, want: 3 * 75},
		{name: "waiting, weighted", m: m, decoding: 2, waiting: 1, queued: 80, weight: 0.5, want: 0.5 * 3 * 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{{Decoding: tt.decoding, KV: KVSpace{Waiting: tt.waiting}, QueuedTokens: tt.queued, QueuedAttn: tt.attn, Overlap: tt.overlap, Timing: tt.m, Cost: 7}}
			DecodeStall{}.Add(cands, Request{Blocks: 5, Tokens: 50, BlockSize: 10}, Params{OverlapWeight: tt.weight})
			near(t, "cost", []float64{cands[0].Cost}, []float64{7 + tt.want})
		})
	}
}
