package scheduler

import (
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// TierLoad prices the blocks of a candidate's cached prefix that it holds
// below GPU (Candidate.Lower: host memory, disk): Prefill counts every
// cached block as reused, and an engine does reuse them, but only after
// copying them back to the GPU, which takes each block's tokens times the
// worker's published load time per token of that tier (timingmodel's
// LoadMsPerToken; a tier the router does not know is priced as disk).
// The load is weighted as the prefill is.
//
// A load never costs more than recomputing the same blocks: the term adds
// the smaller of the load and the prefill those blocks would add had they
// been misses (the prefill, in the worker's steps, of its queue and the
// prompt past its GPU prefix, less that past its whole cached prefix). So
// a lower-tier hit is credited less than a GPU hit and at least as much
// as a miss. The copy runs beside the engine's compute (its link, not its
// steps), so it adds to this request's time only, not to the work others
// wait behind (QueueWait).
type TierLoad struct{}

// Add adds each candidate's load time of its lower-tier blocks.
func (TierLoad) Add(cands []Candidate, req Request, p Params) {
	for i := range cands {
		c := &cands[i]
		if c.Lower == ([index.LowerTiers]int32{}) {
			continue
		}
		c.Cost += tierLoadMs(c, &req, p.OverlapWeight)
	}
}

// tierLoadMs is TierLoad's part for one candidate with lower-tier blocks.
func tierLoadMs(c *Candidate, req *Request, weight float64) float64 {
	lower := 0
	load := 0.0
	for t, n := range c.Lower {
		if n <= 0 {
			continue
		}
		lower += int(n)
		disk := index.Tier(t+1) != index.TierCPU
		load += float64(int(n)*req.BlockSize) * c.Timing.LoadMsPerToken(disk)
	}
	lower = min(lower, c.Overlap)
	load *= weight
	// What the lower blocks would cost as misses: the prefill span grows
	// from the whole cached prefix's to the GPU prefix's. Every token more
	// costs at least the model's linear prefill time (more tokens take no
	// fewer steps, and the prompt's attention, over the same whole
	// prompt, grows as its cached prefix shrinks), so
	// a load below that needs no spans: a host load on the default model
	// (0.005 ms per token against 0.0152) never does.
	extra := req.NewTokens(c.Overlap-lower) - req.NewTokens(c.Overlap)
	if load <= float64(extra)*c.Timing.PrefillPerToken*weight {
		return load
	}
	var buf timingmodel.Steps
	s := c.stepsOf(&buf)
	withLower, _ := c.spanPair(s, req, c.Overlap)
	gpuPrefix, _ := c.spanPair(s, req, c.Overlap-lower)
	cached := s.PrefillMs(withLower, weight)
	gpuOnly := s.PrefillMs(gpuPrefix, weight)
	return max(min(load, gpuOnly-cached), 0)
}
