package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// DecodeStall is what the request's prefill on a worker costs the requests
// decoding there. An engine runs a prompt's chunks in the same steps as its
// decoding requests' next tokens, so every step that computes part of this
// request's prompt delays the next token of each of them by that part's
// prefill time: each decoding request's remaining tokens, and its end, come
// that much later. The term adds the worker's decoding requests times the
// prefill time the request adds to the worker's steps (its span's prefill
// less that of what is queued ahead of it: its tokens' compute, the
// per-step constant being the decode step's, which runs anyway; see
// timingmodel's StepMs), weighted as Prefill is.
//
// It is in the same unit as the rest of the cost, milliseconds of some
// request's wait that the choice causes, and counts each such millisecond
// once, as QueueWait counts those of the requests arriving behind this
// one: the cost is the total wait the choice adds, and a decoding
// request's delayed token is as much wait as a queued request's delayed
// first token. Without it the cost sees a worker's decoding requests only
// as what slows this request's prefill (Decode), not as what this
// request's prefill slows, and it stacks long prompts on a worker whose
// many decoding requests then wait out every chunk: their inter-token
// latency, which the workers' objective bounds as it bounds the time to
// first token, grows with load long before the first tokens do.
type DecodeStall struct{}

// Add adds each candidate's stall of its decoding requests.
func (DecodeStall) Add(cands []Candidate, req Request, p Params) {
	var buf timingmodel.Steps
	for i := range cands {
		c := &cands[i]
		if c.Decoding <= 0 {
			continue
		}
		s := c.stepsOf(&buf)
		all, queued := c.spanPair(s, &req, c.Overlap)
		added := s.PrefillMs(all, p.OverlapWeight) - s.PrefillMs(queued, p.OverlapWeight)
		c.Cost += float64(c.Decoding) * max(added, 0)
	}
}
