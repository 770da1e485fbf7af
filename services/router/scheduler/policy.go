package scheduler

import (
	"math"
	"math/rand/v2"
)

// Term is one part of a worker's predicted cost for a request: a time in
// milliseconds that Add adds to each candidate's Cost, from the request and
// the worker's state (its cached prefix, its load, its timing model). A
// policy's terms run in the order it lists them, each over all candidates
// in one call (no call per worker); a term may read what the terms before
// it left in the candidates (see the ahead and work fields) but never
// changes another term's part. Each term is one file of this package with
// its own table test.
type Term interface {
	Add(cands []Candidate, req Request, p Params)
}

// Picker chooses one of the candidates from their costs, once every term
// has added its part. It returns an index of cands (never -1: cands is not
// empty); rng breaks ties and samples.
type Picker interface {
	Pick(cands []Candidate, p Params, rng *rand.Rand) int
}

// Policy is a composition: the candidates' cost is the sum of its terms,
// in order, and its picker chooses from them. Make one with Compose; a
// Policy written as a literal runs the same terms one pass each.
type Policy struct {
	Terms  []Term
	Picker Picker
	// passes run Terms (see fuse); starts says the first begins the sums.
	passes []Term
	starts bool
}

// Compose is the policy that sums terms, in order, and chooses with
// picker. Its terms that price each candidate alone and follow each other
// (Prefill, Decode, QueueWait) run in one pass over the candidates.
func Compose(picker Picker, terms ...Term) Policy {
	passes, starts := fuse(terms)
	return Policy{Terms: terms, Picker: picker, passes: passes, starts: starts}
}

// The compositions. A new term is a file of this package and a line in the
// composition that uses it; a mode of the router (services/router/core)
// names the composition it chooses with.
var (
	// KV is the router's kv mode: the predicted time to first token
	// (queued prefill and this request's uncached prefill, the decode
	// steps that run beside them), plus what the request's work costs the
	// requests that arrive behind it, less what a copy of a hot prefix
	// saves those that share it, plus the time to load the prefix's
	// blocks held below GPU and the request's LoRA adapter where it is not
	// loaded, plus the wait for free KV blocks where the running requests
	// hold the worker's memory, plus the wait its prefill causes the
	// requests decoding there; the cheapest worker at temperature 0, else
	// a softmax draw.
	KV = Compose(Lowest{}, Prefill{}, Decode{}, QueueWait{}, Seed{}, TierLoad{}, AdapterLoad{}, BlockWait{}, DecodeStall{})
	// LeastLoaded is the same time at the cheapest worker, for candidates
	// whose caches the caller hides (least-loaded mode, at weight 1 and
	// temperature 0).
	LeastLoaded = Compose(Lowest{}, Prefill{}, Decode{}, QueueWait{}, Seed{})
)

// KVDisagg is KV for a decode worker that receives the prompt's KV blocks
// it does not cache from a prefill worker over link: the transfer is one
// more part of its time to first token, before the wait it imposes on
// later requests. No mode uses it yet.
func KVDisagg(link KVTransfer) Policy {
	return Compose(Lowest{}, Prefill{}, Decode{}, link, QueueWait{}, Seed{})
}

// DecodeLeg is the decode worker's cost in a disaggregated pair whose
// prompt a prefill worker computes: its time as the holder of every block
// (Held: its queue, the last block, the decode steps beside them), what
// that work costs the requests behind it, the wait for the blocks it
// does not cache to arrive over link, and the wait for free KV blocks to
// receive them in (BlockWait) and for a running slot (SlotWait). The
// prefill worker's own cost is KV's over the prefill pool; the router
// adds the two to compare the pair with the request run whole on one
// worker.
func DecodeLeg(link KVTransfer) Policy {
	return Compose(Lowest{}, Held{}, QueueWait{}, link, BlockWait{}, SlotWait{})
}

// WithSlotWait is pol with SlotWait after its terms: the cost of a request
// run whole on a worker whose running slots a disaggregated model's decode
// legs fill too, priced as the decode leg is (see DecodeLeg).
func WithSlotWait(pol *Policy) Policy {
	terms := append(append([]Term(nil), pol.Terms...), SlotWait{})
	return Compose(pol.Picker, terms...)
}

// Select fills each candidate's cost for req and returns the index of the
// chosen one: it is KV.Select.
func Select(cands []Candidate, req Request, p Params, rng *rand.Rand) (int, error) {
	return KV.Select(cands, req, p, rng)
}

// Select fills each candidate's cost for req with the policy's terms and
// returns the index its picker chooses; ErrNoCandidates when there is
// none.
func (pol *Policy) Select(cands []Candidate, req Request, p Params, rng *rand.Rand) (int, error) {
	if len(cands) == 0 {
		return -1, ErrNoCandidates
	}
	pol.cost(cands, req, p)
	return pol.Picker.Pick(cands, p, rng), nil
}

// Cost fills c.Cost for req with KV's terms and returns it.
func Cost(c *Candidate, req Request, p Params) float64 {
	cands := []Candidate{*c}
	KV.cost(cands, req, p)
	*c = cands[0]
	return c.Cost
}

// negZero is where a cost's sum starts: -0 + x is x for every x (+0 +
// -0 would be +0), so the sum of one term is that term's value, to the
// sign of a zero.
var negZero = math.Copysign(0, -1)

// cost sets every candidate's Cost (and the time queued ahead of the
// request, which terms may add to) to the sum of the terms.
func (pol *Policy) cost(cands []Candidate, req Request, p Params) {
	passes := pol.passes
	if passes == nil {
		passes = pol.Terms
	}
	if !pol.starts {
		for i := range cands {
			cands[i].Cost, cands[i].ahead = negZero, negZero
		}
	}
	for _, t := range passes {
		t.Add(cands, req, p)
	}
}
