package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// Prefill is the prefill a worker computes before the request's first
// token, times the overlap weight: the prompt tokens queued there, then
// the request's own that the worker does not cache (prefix reuse: its
// cached blocks are not computed, but at least the last block is; see
// Request.NewTokens), in steps of the worker's chunk. The queued and new
// tokens share steps, so their prefill is one span, not two sums. When
// req.Rate > 0 it also adds the queued tokens' prefill alone to the time
// ahead of the request, which QueueWait and Seed read.
type Prefill struct{}

// Add adds each candidate's weighted prefill time.
func (Prefill) Add(cands []Candidate, req Request, p Params) {
	var buf timingmodel.Steps
	for i := range cands {
		c := &cands[i]
		s := c.stepsOf(&buf)
		all, ahead := spans(c, s, &req)
		prefillOne(c, s, all, ahead, req.Rate > 0, p.OverlapWeight)
	}
}

// spans are the prefill up to the request's first token on c and, when
// req.Rate > 0, that of what is queued ahead of it, in c's steps s.
func spans(c *Candidate, s *timingmodel.Steps, req *Request) (all, ahead timingmodel.Span) {
	if req.Rate > 0 {
		return s.SpanPair(c.QueuedTokens, req.NewTokens(c.Overlap))
	}
	return s.Span(c.QueuedTokens + req.NewTokens(c.Overlap)), timingmodel.Span{}
}

// prefillOne is Prefill for one candidate at its step costs s and spans;
// withAhead says whether the time ahead is priced too.
func prefillOne(c *Candidate, s *timingmodel.Steps, all, ahead timingmodel.Span, withAhead bool, weight float64) {
	c.Cost += s.PrefillMs(all, weight)
	if withAhead {
		c.ahead += s.PrefillMs(ahead, weight)
	}
}

// stepsOf is c's step costs: those FillAll prepared, or computed into buf.
func (c *Candidate) stepsOf(buf *timingmodel.Steps) *timingmodel.Steps {
	if c.prepared {
		return &c.steps
	}
	*buf = c.Timing.Steps(c.Decoding, c.Usage)
	return buf
}
