package scheduler

import "github.com/switchyard-llm/switchyard/pkg/timingmodel"

// fused runs Prefill, Decode and, with wait, QueueWait in one pass over
// the candidates, each in turn for one candidate before the next: for
// every candidate the same sums in the same order as the three terms one
// after the other, with its step costs and spans found once and its data
// read in one go instead of once per term (a decision prices every worker, and the
// candidates of 100 workers are past L1). With start it also begins each
// sum (see Policy.cost), so the pass is the first. Compose puts it in
// place of those terms.
type fused struct{ wait, start bool }

// Add adds the fused terms' parts.
func (f fused) Add(cands []Candidate, req Request, p Params) {
	var buf timingmodel.Steps
	ahead := req.Rate > 0
	wait := f.wait && ahead
	for i := range cands {
		c := &cands[i]
		if f.start {
			c.Cost, c.ahead = negZero, negZero
		}
		s := c.stepsOf(&buf)
		all, queued := spans(c, s, &req)
		prefillOne(c, s, all, queued, ahead, p.OverlapWeight)
		decodeOne(c, s, all, queued, ahead)
		if wait {
			waitOne(c, req.Rate)
		}
	}
}

// fuse is the passes that run terms: the same terms in the same order,
// with each run of Prefill, Decode (and QueueWait) one fused pass. It
// reports whether the first pass begins the sums.
func fuse(terms []Term) (passes []Term, starts bool) {
	for i := 0; i < len(terms); i++ {
		if i+1 < len(terms) && isTerm[Prefill](terms[i]) && isTerm[Decode](terms[i+1]) {
			f := fused{start: i == 0}
			i++
			if i+1 < len(terms) && isTerm[QueueWait](terms[i+1]) {
				f.wait = true
				i++
			}
			passes = append(passes, f)
			continue
		}
		passes = append(passes, terms[i])
	}
	return passes, len(passes) > 0 && isTerm[fused](passes[0]) && passes[0].(fused).start
}

func isTerm[T Term](t Term) bool {
	_, ok := t.(T)
	return ok
}
