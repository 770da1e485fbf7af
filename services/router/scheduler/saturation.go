package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// Limits say when a worker is full: one more request would get its first
// token later than TTFTMs, or the prompt tokens queued for prefill there
// are more than PrefillTokens. A zero limit is off; both off, no worker is
// ever full.
type Limits struct {
	// TTFTMs is the predicted time to first token, in ms, past which a
	// worker is full (--queue-ttft-threshold).
	TTFTMs float64
	// PrefillTokens is the outstanding prefill, in prompt tokens, past
	// which a worker is full (--queue-prefill-budget).
	PrefillTokens int
}

// Off says whether both limits are off.
func (l Limits) Off() bool { return !(l.TTFTMs > 0) && l.PrefillTokens <= 0 }

// Full says whether c is full for req under l: req's predicted time to
// first token there (the prefill queued ahead, its own tokens c does not
// cache and the decode steps beside them, unweighted: the model as the
// worker published it) past l.TTFTMs, or c's queued prefill past
// l.PrefillTokens. c must have been filled (Load.FillAll).
func (l Limits) Full(c *Candidate, req Request) bool { return l.full(c, req, 0) }

// full is Full with queued more prompt tokens queued on c.
func (l Limits) full(c *Candidate, req Request, queued int) bool {
	queued += c.QueuedTokens
	if l.PrefillTokens > 0 && queued > l.PrefillTokens {
		return true
	}
	if !(l.TTFTMs > 0) {
		return false
	}
	var buf timingmodel.Steps
	s := c.stepsOf(&buf)
	return s.TTFTMs(queued, req.NewTokens(c.Overlap), 1) > l.TTFTMs
}

// Saturated says whether every candidate is full for one more request like
// req once req itself is on cands[chosen] (its prompt tokens cands[chosen]
// does not cache queued there; chosen -1: req is not routed among them);
// false for no candidates, and when l is off. It stops at the first
// worker with room, which at low load is the first or second: below
// saturation it costs a prediction or two.
func (l Limits) Saturated(cands []Candidate, req Request, chosen int) bool {
	if l.Off() || len(cands) == 0 {
		return false
	}
	for i := range cands {
		queued := 0
		if i == chosen {
			queued = req.NewTokens(cands[i].Overlap)
		}
		if !l.full(&cands[i], req, queued) {
			return false
		}
	}
	return true
}
