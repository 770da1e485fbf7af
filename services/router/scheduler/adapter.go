package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// AdapterLoad is what loading the request's LoRA adapter on a worker costs:
// each candidate's AdapterMs, which the caller sets from the worker's
// timing model when the worker has not loaded the adapter (0 when it has,
// or when the request runs on the base model, and then the cost is left as
// it was to the bit), paid by the request itself and by each request
// decoding there. vLLM loads an adapter inside the step that first needs
// it, before the step's forward pass, so that step, and with it the next
// token of every request decoding on the worker, comes the load's time
// later: as DecodeStall counts the wait a prefill causes the decoding
// requests, in the same unit (milliseconds of some request's wait the
// choice causes, each counted once), the term adds the load time once for
// the request and once per decoding request. Without that part a load on a
// busy worker looks as cheap as one on an idle worker, and the slots of the
// workers decoding the most churn the most.
//
// A load needs a free slot. When every slot of the worker is held by an
// adapter some running request uses, the engine passes the request over
// (vLLM's scheduler skips a waiting request whose adapter does not fit and
// schedules the ones behind it) until enough of those adapters have no
// request left: SlotWaitMs, which the caller predicts from the worker's
// running requests. The request alone waits, and while it waits the
// prompts queued ahead of it are computed, so the term adds the part of
// the slot wait that outlasts the worker's queue (its prefill and the
// decode steps beside it, unweighted: the engine's time): the request's
// first token comes after the later of the two, and the cost's prefill
// part already counts the queue.
type AdapterLoad struct{}

// Add adds each candidate's adapter load time, for the request and for
// each of the worker's decoding requests, and the wait for a slot beyond
// its queue.
func (AdapterLoad) Add(cands []Candidate, _ Request, _ Params) {
	for i := range cands {
		c := &cands[i]
		if ms := c.AdapterMs; ms != 0 {
			c.Cost += ms * float64(1+max(c.Decoding, 0))
		}
		if c.SlotWaitMs > 0 {
			c.Cost += c.slotWaitBeyondQueue()
		}
	}
}

// AdapterWaitMs is the time the request's adapter adds before its first
// token on c, beyond c's queue and the request's own prefill: its load,
// and the part of the wait for a slot that outlasts the queue.
func (c *Candidate) AdapterWaitMs() float64 {
	ms := c.AdapterMs
	if c.SlotWaitMs > 0 {
		ms += c.slotWaitBeyondQueue()
	}
	return ms
}

// slotWaitBeyondQueue is the part of c's slot wait that outlasts its
// queue.
func (c *Candidate) slotWaitBeyondQueue() float64 {
	return max(c.SlotWaitMs-c.queueMs(), 0)
}

// queueMs is the time c's worker takes to compute the prompt tokens queued
// there, with the decode steps that run beside them.
func (c *Candidate) queueMs() float64 {
	var buf timingmodel.Steps
	s := c.stepsOf(&buf)
	sp := s.Span(c.QueuedTokens)
	sp.Attn = c.QueuedAttn
	ms := s.PrefillMs(sp, 1)
	if d, ok := s.DecodeMs(sp); ok {
		ms += d
	}
	return ms
}
