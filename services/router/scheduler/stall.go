package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// DecodeStall is what the request's prefill on a worker costs the requests
// decoding there. An engine runs a prompt's chunks in the same steps as its
// decoding requests' next tokens, so every step that computes part of this
// request's prompt delays the next token of each of them by that part's
// prefill time: each decoding request's remaining tokens, and its end, come
// that much later. The term adds the requests served in those steps
// times the prefill time the request adds to the worker's steps (its
// span's prefill less that of what is queued ahead of it: its tokens'
// compute, the per-step constant being the decode step's, which runs
// anyway; see timingmodel's StepMs), weighted as Prefill is.
//
// The requests waiting ahead of it for their first token (KVSpace.Waiting)
// are served in those steps too: by the time its tokens compute (after the
// queue), each of them either decodes, or ends its prompt in the step the
// request's first tokens share (they fill the rest of its budget) and gets
// its first token at that step's end. Either way every step that computes
// part of the request comes that much later for each of them, as for the
// decoding requests. A worker whose head prompt is about to finish has one
// more request to delay than its decoding count says, and without counting
// it the term would prefer such a worker to an idle one with as many
// decoding requests. A worker with nothing decoding is charged nothing: a
// disaggregated pool's prefill worker never has a request decoding, and
// the prompts waiting there decode on another worker.

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
		waiting := max(c.KV.Waiting, 0)
		s := c.stepsOf(&buf)
		if waiting > 0 {
			// The steps after the queue decode the waiting requests
			// too: each takes a token of the budget.
			buf = c.Timing.Steps(c.Decoding+waiting, c.Usage)
			s = &buf
		}
		all, queued := c.spanPair(s, &req, c.Overlap)
		added := s.PrefillMs(all, p.OverlapWeight) - s.PrefillMs(queued, p.OverlapWeight)
		stall := float64(c.Decoding+waiting) * max(added, 0)
		c.Cost += stall
	}
}
