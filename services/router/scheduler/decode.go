package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// Decode is the decode load a worker's running requests put on the
// request's prefill: while any decode, every prefill step Prefill counted
// also runs a decode step, at the worker's KV usage. When req.Rate > 0 it
// adds the same to the time ahead of the request.
type Decode struct{}

// Add adds each candidate's decode steps.
func (Decode) Add(cands []Candidate, req Request, _ Params) {
	var buf timingmodel.Steps
	ahead := req.Rate > 0
	for i := range cands {
		c := &cands[i]
		s := c.stepsOf(&buf)
		all, queued := spans(c, s, &req)
		decodeOne(c, s, all, queued, ahead)
	}
}

// decodeOne is Decode for one candidate at its step costs s and spans;
// withAhead says whether the time ahead is priced too.
func decodeOne(c *Candidate, s *timingmodel.Steps, all, ahead timingmodel.Span, withAhead bool) {
	if d, ok := s.DecodeMs(all); ok {
		c.Cost += d
	}
	if withAhead {
		if d, ok := s.DecodeMs(ahead); ok {
			c.ahead += d
		}
	}
}
