package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// QueueStall is what the request's prefill on a worker costs the prompt
// queued ahead of it there whose last chunk shares a step with the
// request's first. An engine computes its queued prompts in routing order,
// in steps of its chunk (its token budget less one token per decoding
// request), and fills a step's room past one prompt's last chunk with the
// next prompt's first tokens: so the step that ends the last queued
// prompt, and with it that prompt's time to first token, is longer by the
// compute of the request's tokens it carries (their linear time and their
// attention over the request's cached prefix; no per-step constant, which
// the step pays anyway). Only a step not begun yet can take them: the
// tokens of the step the head of the queue is in now
// (Candidate.HeadStepTokens) are not followed by the request's in that
// step. The term adds that delay, weighted as Prefill is, for the one
// prompt that surely ends in the shared step, the last queued (a shorter
// one before it may end there too: a lower bound). It is milliseconds of
// that prompt's wait, counted as DecodeStall counts its decoding
// requests': without it the cost sees the queue ahead as what the
// request waits for, never as what it delays, and puts a prompt behind
// another's long prefill where its first chunk lengthens the other's last
// step, while an idle worker would have delayed nobody.
type QueueStall struct{}

// Add adds each candidate's delay of its last queued prompt.
func (QueueStall) Add(cands []Candidate, req Request, p Params) {
	var buf timingmodel.Steps
	for i := range cands {
		c := &cands[i]
		unstarted := c.QueuedTokens - c.HeadStepTokens
		if unstarted <= 0 {
			continue
		}
		s := c.stepsOf(&buf)
		c.Cost += s.SharedStepMs(unstarted, req.Tokens-req.NewTokens(c.Overlap), req.NewTokens(c.Overlap), p.OverlapWeight)
	}
}
