package scheduler_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// DecodeStall is a cost term: what a request's prefill on a worker costs
// the requests decoding there, each of which waits while the prompt's
// uncached tokens are computed (one prefill step of them, in this sketch),
// times Weight. A term reads the request and each worker's state, adds its
// part to every candidate's Cost in one call, and changes nothing else.
type DecodeStall struct{ Weight float64 }

// Add adds each candidate's stall.
func (s DecodeStall) Add(cands []scheduler.Candidate, req scheduler.Request, _ scheduler.Params) {
	for i := range cands {
		c := &cands[i]
		c.Cost += s.Weight * float64(c.Decoding) * c.Timing.PrefillMs(float64(req.NewTokens(c.Overlap)))
	}
}

// A new cost term is a type with an Add method (one file of this package,
// with its table test) and its place in a composition: here KV's terms and
// DecodeStall after them. Worker 1 caches three quarters of a 4,096-token
// prompt but decodes 40 requests; worker 2 caches nothing and is idle. KV
// keeps the request with its cache; with the stall of 40 decoding
// requests priced in, it goes to the idle worker.
func ExampleCompose() {
	kvStall := scheduler.Compose(scheduler.Lowest{},
		scheduler.Prefill{}, scheduler.Decode{}, scheduler.QueueWait{}, scheduler.Seed{},
		DecodeStall{Weight: 0.1})
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
	}{{"kv", &scheduler.KV}, {"kv + decode stall", &kvStall}} {
		cands := workers()
		i, _ := p.policy.Select(cands, req, scheduler.Params{OverlapWeight: 1}, rng)
		fmt.Printf("%s: worker %d (costs %.1f, %.1f ms)\n", p.name, cands[i].Worker.Instance, cands[0].Cost, cands[1].Cost)
	}
	// Output:
	// kv: worker 1 (costs 58.8, 85.8 ms)
	// kv + decode stall: worker 2 (costs 188.8, 85.8 ms)
}
