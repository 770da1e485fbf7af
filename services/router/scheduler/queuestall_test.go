package scheduler

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestQueueStall: the last queued prompt's first token waits for the
// request's tokens that fill the room of the step that ends it (their
// compute, no per-step constant); none when nothing is queued, when the
// queue ends on a step's boundary, or when all of it is in the step the
// worker runs now; weighted as Prefill.
func TestQueueStall(t *testing.T) {
	// A step holds 100 tokens less one per decoding request; 1 ms a token
	// (and 0.01 ms per unit of attention in the quadratic case).
	m := timingmodel.Model{PrefillPerToken: 1, PrefillPerBatch: 5, DecodeBase: 10, MaxBatchedTokens: 100}
	quad := m
	quad.PrefillQuadratic = 0.01
	tests := []struct {
		name     string
		m        timingmodel.Model
		decoding int
		queued   int
		inStep   int // of queued, in the step running now
		overlap  int // of req's 5 blocks of 10 tokens
		weight   float64
		want     float64
	}{
		{name: "nothing queued: nothing", m: m, weight: 1, want: 0},
		// 40 queued: the step that ends them has room for 60 of the
		// request's 50 tokens: all of them.
		{name: "all its tokens in the queue's last step", m: m, queued: 40, weight: 1, want: 50},
		// 80 queued: room for 20.
		{name: "the room of the step only", m: m, queued: 80, weight: 1, want: 20},
		// 97-token chunks with 3 decoding: 150 queued end in a step of 53
		// tokens, room 44.
		{name: "chunks less the decoding requests", m: m, decoding: 3, queued: 150, weight: 1, want: 44},
		{name: "a queue ending on a step's boundary: nothing", m: m, queued: 200, weight: 1, want: 0},
		{name: "the whole queue in the running step: nothing", m: m, queued: 40, inStep: 40, weight: 1, want: 0},
		// 130 queued, 70 of them in the running step: 60 start a new
		// step, with room for 40.
		{name: "the queue past the running step", m: m, queued: 130, inStep: 70, weight: 1, want: 40},
		// 3 of its 5 blocks cached: 20 new tokens, attending to the 30
		// before them too: 20 + 0.01 x (50^2 - 30^2) = 36.
		{name: "after a cached prefix: its own attention", m: quad, queued: 40, overlap: 3, weight: 1, want: 36},
		// 80 queued, room 20 of its 50 uncached: 20 + 0.01 x 20^2 = 24.
		{name: "the room's tokens' attention only", m: quad, queued: 80, weight: 1, want: 24},
		{name: "weighted as the prefill", m: m, queued: 40, weight: 0.5, want: 25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{{Decoding: tt.decoding, QueuedTokens: tt.queued, HeadStepTokens: tt.inStep, Overlap: tt.overlap, Timing: tt.m, Cost: 7}}
			QueueStall{}.Add(cands, Request{Blocks: 5, Tokens: 50, BlockSize: 10}, Params{OverlapWeight: tt.weight})
			near(t, "cost", []float64{cands[0].Cost}, []float64{7 + tt.want})
		})
	}
}

// TestHeadStepTokens: of the head's tokens left, those of the step it is
// computing now at its pace: the rest of its current chunk, and in its last
// step all of them, its kept block too; Fill and FillAll agree.
func TestHeadStepTokens(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// 3000 tokens: steps of 1000 tokens, 1 s each (linear), its last
	// block of 10 kept until its first token.
	tests := []struct {
		after      time.Duration
		head, step int
	}{
		{0, 3000, 1000},
		{999 * time.Millisecond, 2001, 1},
		{1000 * time.Millisecond, 2000, 1000},
		{1500 * time.Millisecond, 1500, 500},
		{2500 * time.Millisecond, 500, 500},
		{time.Hour, 10, 10},
	}
	for _, tt := range tests {
		t.Run(tt.after.String(), func(t *testing.T) {
			now := t0
			l := NewLoadClock(func() time.Time { return now })
			l.Add("a", w(1), 300, nil)
			now = t0.Add(tt.after)
			c := Candidate{Worker: w(1), Timing: linear}
			l.Fill(&c, 10)
			if c.HeadTokens != tt.head || c.HeadStepTokens != tt.step {
				t.Fatalf("Fill: head %d tokens, %d in its step; want %d, %d", c.HeadTokens, c.HeadStepTokens, tt.head, tt.step)
			}
			cs := []Candidate{{Worker: w(1), Timing: linear}}
			l.FillAll(cs, 10)
			if cs[0].HeadTokens != tt.head || cs[0].HeadStepTokens != tt.step {
				t.Fatalf("FillAll: head %d tokens, %d in its step; want %d, %d", cs[0].HeadTokens, cs[0].HeadStepTokens, tt.head, tt.step)
			}
		})
	}
}
