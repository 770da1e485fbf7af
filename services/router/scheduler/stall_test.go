package scheduler

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestDecodeStall: a worker's decoding requests each wait for the prefill
// time the request adds to its steps: all of it on an idle worker (the
// per-step overhead included), the added tokens' share behind a queue
// whose steps run anyway, a whole chunk more when the tokens spill into
// another step; nothing where nothing decodes; weighted as Prefill.
func TestDecodeStall(t *testing.T) {
	// A step holds 100 tokens (1 ms each) and costs 5 ms more.
	m := timingmodel.Model{PrefillPerToken: 1, PrefillPerBatch: 5, DecodeBase: 10, MaxBatchedTokens: 100}
	tests := []struct {
		name     string
		decoding int
		queued   int
		overlap  int // of req's 5 blocks of 10 tokens
		weight   float64
		want     float64
	}{
		{name: "nothing decodes: nothing", decoding: 0, weight: 1, want: 0},
		// The chunk is 100 - 3 = 97 tokens: 50 new tokens are one step.
		{name: "idle worker: the whole step, overhead included", decoding: 3, weight: 1, want: 3 * (50 + 5)},
		{name: "a cached prefix stalls less", decoding: 3, overlap: 3, weight: 1, want: 3 * (20 + 5)},
		{name: "behind a queue in the same step: the tokens only", decoding: 2, queued: 40, weight: 1, want: 2 * 50},
		// 80 queued + 50 new = 130 tokens: a second step of 32 (and its
		// overhead), where the queue alone was one step of 80.
		{name: "spilling into another step adds its overhead", decoding: 2, queued: 80, weight: 1, want: 2 * ((98 + 5 + 32 + 5) - (80 + 5))},
		{name: "weighted as the prefill", decoding: 3, weight: 0.5, want: 3 * 55 * 0.5},
		{name: "weight 0: nothing", decoding: 3, weight: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{{Decoding: tt.decoding, QueuedTokens: tt.queued, Overlap: tt.overlap, Timing: m, Cost: 7}}
			DecodeStall{}.Add(cands, Request{Blocks: 5, Tokens: 50, BlockSize: 10}, Params{OverlapWeight: tt.weight})
			near(t, "cost", []float64{cands[0].Cost}, []float64{7 + tt.want})
		})
	}
}
