package scheduler_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Flat is a cost term for the example: a fixed time per decoding request
// on the worker, times Weight. A term reads the request and each worker's
// state, adds its part to every candidate's Cost in one call, and changes
// nothing else.
type Flat struct{ Weight float64 }

// Add adds each candidate's part.
func (f Flat) Add(cands []scheduler.Candidate, _ scheduler.Request, _ scheduler.Params) {
	for i := range cands {
		cands[i].Cost += f.Weight * float64(cands[i].Decoding)
	}
}

// A cost policy is a composition: its terms, summed in order, and the
// picker that chooses from the sums. A new term is a type with an Add
// method (one file of this package, with its table test) and its place in
// a composition. Worker 1 caches three quarters of a 4,096-token prompt
// but decodes 40 requests; worker 2 caches nothing and is idle. The
// request's own time to first token (Prefill, Decode) keeps it with its
// cache; KV also prices the wait its 1,024 uncached tokens cause the 40
// decoding requests (DecodeStall) and sends it to the idle worker; a term
// of the example's own, added to the first, does the same.
func ExampleCompose() {
	ttft := scheduler.Compose(scheduler.Lowest{}, scheduler.Prefill{}, scheduler.Decode{})
	ttftFlat := scheduler.Compose(scheduler.Lowest{}, scheduler.Prefill{}, scheduler.Decode{}, Flat{Weight: 5})
	req := scheduler.Request{Blocks: 256, Tokens: 4096, BlockSize: 16}
	workers := func() []scheduler.Candidate {
		return []scheduler.Candidate{
			{Worker: index.WorkerID{Instance: 1}, Overlap: 192, Decoding: 40, Usage: 0.5, Timing: timingmodel.Default()},
			{Worker: index.WorkerID{Instance: 2}, Timing: timingmodel.Default()},
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []struct {
		name   string
		policy *scheduler.Policy
	}{{"time to first token", &ttft}, {"kv", &scheduler.KV}, {"time to first token + flat", &ttftFlat}} {
		cands := workers()
		i, _ := p.policy.Select(cands, req, scheduler.Params{OverlapWeight: 1}, rng)
		fmt.Printf("%s: worker %d (costs %.1f, %.1f ms)\n", p.name, cands[i].Worker.Instance, cands[0].Cost, cands[1].Cost)
	}
	// Output:
	// time to first token: worker 1 (costs 44.9, 75.0 ms)
	// kv: worker 2 (costs 790.5, 75.0 ms)
	// time to first token + flat: worker 2 (costs 244.9, 75.0 ms)
}
