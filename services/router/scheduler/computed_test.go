package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// TestFillComputed works out by hand which predicted blocks a request finds
// computed when the engine admits it. Blocks of 4 tokens, a step budget of
// 16 tokens, 1 ms of prefill per token, a decode step of 10 ms. The request's blocks are h0..h9; a
// waiting request "a" computes h0..h5 (24 tokens: h0..h3 end 4, 8, 12 and
// 16 tokens into the queue, h4 and h5 20 and 24). The engine is in a step
// while anything waits; the request is admitted at the start of the first
// step after it that leaves budget free, and finds the blocks computed in
// the steps before.
func TestFillComputed(t *testing.T) {
	const bs = 4
	model := timingmodel.Model{PrefillPerToken: 1, DecodeBase: 10, MaxBatchedTokens: 16}
	w := index.WorkerID{Instance: 1}
	seq := func(from, to int) []uint64 {
		var out []uint64
		for i := from; i < to; i++ {
			out = append(out, uint64(100+i))
		}
		return out
	}
	hashes := seq(0, 10)
	other := func(n int) []uint64 { // a prompt sharing nothing with the request
		var out []uint64
		for i := range n {
			out = append(out, uint64(900+i))
		}
		return out
	}
	type rec struct {
		id       string
		prefill  int      // blocks it computes (its last ones)
		blocks   []uint64 // all its blocks
		prefills bool     // it has had its first token (decoding)
		after    time.Duration
	}
	decoder := rec{"d", 1, other(1), true, 0}
	cases := []struct {
		name              string
		recs              []rec
		foreign           int           // prompt tokens a fresh report adds ahead
		elapsed           time.Duration // from the last routing to the decision
		model             timingmodel.Model
		overlap, indexed  int
		wantOverlap, want int // want: Reach
	}{
		{name: "its request is decoding: computed", recs: []rec{{"a", 6, seq(0, 6), true, 0}},
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "idle engine: a's first step is in flight, then the request joins a's second",
			recs: []rec{{"a", 6, seq(0, 6), false, 0}}, overlap: 6, wantOverlap: 4, want: 6},
		{name: "idle engine, a shorter than a step: all in flight",
			recs: []rec{{"a", 3, seq(0, 3), false, 0}}, overlap: 3, wantOverlap: 3, want: 3},
		{name: "a routed during a decode step joins the next one beside the request: none",
			// One decoder: chunk 15; a waits for the decode step in
			// flight, its end taken half a decode step (5 ms) away.
			recs: []rec{decoder, {"a", 3, seq(0, 3), false, 0}}, overlap: 3, wantOverlap: 0, want: 3},
		{name: "once that decode step has ended, a's step is in flight",
			recs: []rec{decoder, {"a", 3, seq(0, 3), false, 0}}, elapsed: 6 * time.Millisecond,
			overlap: 3, wantOverlap: 3, want: 3},
		{name: "the request waits for whole chunks after the step in flight",
			// One decoder, a not in flight: 24 queued, one whole chunk
			// of 15 before the request's step (h0..h2); h3 ends at 16.
			recs: []rec{decoder, {"a", 6, seq(0, 6), false, 0}}, overlap: 6, wantOverlap: 3, want: 6},
		{name: "a block a decoding request holds is computed",
			// As above, but d holds h0..h3: h4 is the first late one.
			recs:    []rec{{"d", 4, seq(0, 4), true, 0}, {"a", 6, seq(0, 6), false, 0}},
			overlap: 6, wantOverlap: 4, want: 6},
		{name: "decoders shrink the chunk",
			// 8 decoders: chunk 8; a not in flight fills three steps and
			// leaves no budget, so the fourth admits the request.
			recs: []rec{{"d0", 1, other(1), true, 0}, {"d1", 1, other(1), true, 0}, {"d2", 1, other(1), true, 0},
				{"d3", 1, other(1), true, 0}, {"d4", 1, other(1), true, 0}, {"d5", 1, other(1), true, 0},
				{"d6", 1, other(1), true, 0}, {"d7", 1, other(1), true, 0}, {"a", 6, seq(0, 6), false, 0}},
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "indexed blocks stay; the next ones by the queue",
			// x (8 tokens of another prompt) and a (h2..h5 after them:
			// ends 12, 16, 20, 24) in flight; the step ends at 16.
			recs:    []rec{{"x", 2, other(2), false, 0}, {"a", 4, seq(0, 6), false, 0}},
			overlap: 6, indexed: 2, wantOverlap: 4, want: 6},
		{name: "a routed after the step in flight began waits with the request",
			// x began a step alone at 0 (its pace: 4 tokens a step of
			// 4 ms); a came at 3 ms, so the step in flight ends at 8.
			recs:    []rec{{"x", 2, other(2), false, 0}, {"a", 3, seq(0, 3), false, 3 * time.Millisecond}},
			overlap: 3, wantOverlap: 0, want: 3},
		{name: "foreign prompts ahead delay the admission",
			// 24 + 16 queued: one whole chunk after the step in flight,
			// 32 tokens before the request's step.
			recs: []rec{{"a", 6, seq(0, 6), false, 0}}, foreign: 16,
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "the step in flight, not the head's pace, decides",
			// 8 ms into a's first step (8 tokens at its pace): the step
			// still ends at 16.
			recs: []rec{{"a", 6, seq(0, 6), false, 0}}, elapsed: 8 * time.Millisecond,
			overlap: 6, wantOverlap: 4, want: 6},
		{name: "once a's second step is in flight, all",
			recs: []rec{{"a", 6, seq(0, 6), false, 0}}, elapsed: 17 * time.Millisecond,
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "a step's time is its chunk's attention, not the prompt's mean",
			// Attention 0.01 ms per token squared: a's first step is 16 +
			// 0.01 x 16 x 16 = 18.56 ms (its mean step would be 19.2),
			// so 19 ms in its second and last step is in flight.
			recs: []rec{{"a", 6, seq(0, 6), false, 0}}, elapsed: 19 * time.Millisecond,
			model:   timingmodel.Model{PrefillQuadratic: 0.01, PrefillPerToken: 1, DecodeBase: 10, MaxBatchedTokens: 16},
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "the earliest of two waiting requests computes",
			// a then c (c's record computes h3..h7 itself), both in
			// flight: 24 + 20 queued, the request's step after 32
			// tokens. c alone would have h5 late (it ends 36 tokens
			// in); a's end by 24.
			recs:    []rec{{"a", 6, seq(0, 6), false, 0}, {"c", 5, seq(0, 8), false, 0}},
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "a prompt that parts from the request computes only the shared blocks",
			// b shares h0, h1 (done in the step in flight); h2.. are not
			// computed by any waiting request: computed already.
			recs:    []rec{{"b", 6, append(seq(0, 2), other(4)...), false, 0}},
			overlap: 6, wantOverlap: 6, want: 6},
		{name: "no step budget: kept", recs: []rec{decoder, {"a", 3, seq(0, 3), false, 0}},
			model:   timingmodel.Model{PrefillPerToken: 1},
			overlap: 3, wantOverlap: 3, want: 3},
		{name: "nothing predicted: kept", recs: []rec{decoder, {"a", 3, seq(0, 3), false, 0}},
			overlap: 3, indexed: 3, wantOverlap: 3, want: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			l := NewLoadClock(func() time.Time { return now })
			for _, r := range tc.recs {
				now = now.Add(r.after)
				l.Add(r.id, w, r.prefill, r.blocks)
				if r.prefills {
					l.PrefillDone(r.id)
				}
			}
			if tc.foreign > 0 {
				l.Report(w, []ReportedRequest{{ID: "foreign", PrefillTokens: tc.foreign}}, 0, 0, bs)
			}
			now = now.Add(tc.elapsed)
			m := model
			if tc.model != (timingmodel.Model{}) {
				m = tc.model
			}
			cands := []Candidate{{Worker: w, Overlap: tc.overlap, Timing: m}}
			l.FillAll(cands, bs)
			one := cands[0]
			l.FillComputed(cands, hashes, []int{tc.indexed}, bs)
			if got := fmt.Sprint(cands[0].Overlap, cands[0].Reach); got != fmt.Sprint(tc.wantOverlap, tc.want) {
				t.Errorf("overlap, reach = %s, want %d %d", got, tc.wantOverlap, tc.want)
			}
			l.FillComputedOne(&one, hashes, tc.indexed, bs)
			if one.Overlap != cands[0].Overlap || one.Reach != cands[0].Reach {
				t.Errorf("FillComputedOne: %d %d, FillComputed %d %d", one.Overlap, one.Reach, cands[0].Overlap, cands[0].Reach)
			}
		})
	}
}
