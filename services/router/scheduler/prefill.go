package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// Prefill is the prefill a worker computes before the request's first
// token, times the overlap weight: the prompt tokens queued there, then
// the request's own that the worker does not cache (prefix reuse: its
// cached blocks are not computed, but at least the last block is; see
// Request.NewTokens), in steps of the worker's chunk. The queued and new
// tokens share steps, so their prefill is one span, not two sums; each
// prompt's attention is over its own context (the request's over its
// cached prefix there: a long cached prefix makes the uncached rest
// dearer per token), not over the others' it shares steps with. When
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
		return c.spanPair(s, req, c.Overlap)
	}
	all = s.Span(c.QueuedTokens + req.NewTokens(c.Overlap))
	all.Attn = c.QueuedAttn + req.Attention(c.Overlap)
	return all, timingmodel.Span{}
}

// spanPair is the prefill up to the request's first token on c, were c
// to cache overlap of its blocks, and that of what is queued ahead of
// it, in c's steps s: the queue's prompts and the request's in shared
// steps, each prompt's attention over its own context (the queued ones'
// QueuedAttn, the request's over its cached prefix).
func (c *Candidate) spanPair(s *timingmodel.Steps, req *Request, overlap int) (all, ahead timingmodel.Span) {
	all, ahead = s.SpanPair(c.QueuedTokens, req.NewTokens(overlap))
	ahead.Attn = c.QueuedAttn
	all.Attn = c.QueuedAttn + req.Attention(overlap)
	if ahead.Tokens <= 0 {
		ahead.Attn = 0
	}
	return all, ahead
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

// TTFTMs is the time to first token, at weight, of a prompt of newTokens
// tokens whose attention is newAttn (an uncached prompt's: newTokens
// squared) behind c's queue: Prefill and Decode of it on c.
func (c *Candidate) TTFTMs(newTokens int, newAttn, weight float64) float64 {
	var buf timingmodel.Steps
	s := c.stepsOf(&buf)
	all, _ := s.SpanPair(c.QueuedTokens, newTokens)
	all.Attn = c.QueuedAttn + newAttn
	if all.Tokens <= 0 {
		all.Attn = 0
	}
	ms := s.PrefillMs(all, weight)
	if d, ok := s.DecodeMs(all); ok {
		ms += d
	}
	return ms
}
