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
	bs, weight := req.BlockSize, p.OverlapWeight
	for i := range cands {
		c := &cands[i]
		if c.Lower == ([index.LowerTiers]int32{}) {
			continue
		}
		// Blocks on the host tier alone, loaded for less than their
		// recomputation, with a token or more of the prompt past the
		// cached prefix (the common case, where offloading engines keep
		// a tier of host memory): tierLoadMs' sums, here without its
		// call.
		if n := c.Lower[0]; n > 0 && c.Lower[1] == 0 && c.Lower[2] == 0 {
			all := req.Tokens - c.Overlap*bs
			gpu := all + min(int(n), c.Overlap)*bs
			load := float64(int(n)*bs) * c.Timing.LoadMsPerToken(false) * weight
			if all >= 1 && gpu >= 1 && load <= float64(gpu-all)*c.Timing.PrefillPerToken*weight {
				c.Cost += load
				continue
			}
		}
		c.Cost += tierLoadMs(c, &req, weight)
	}
}

// tierLoadMs is TierLoad's part for one candidate with lower-tier blocks.
// The tiers are read in one pass with the disk rate found once for disk
// and unknown, and the prefill the lower blocks would add as misses is
// their tokens wherever the prompt past the cached prefix is at least a
// token (NewTokens' floor applies only past it): a decision prices every
// candidate holding blocks below GPU, and these were most of its term.
func tierLoadMs(c *Candidate, req *Request, weight float64) float64 {
	bs := req.BlockSize
	lower := 0
	load := 0.0
	// The sum runs in tier order, as the terms' float sums must to give
	// the same costs: host, disk, unknown (priced as disk). 0 plus the
	// first part is that part.
	if n := c.Lower[0]; n > 0 {
		lower = int(n)
		load = float64(int(n)*bs) * c.Timing.LoadMsPerToken(false)
	}
	if d, u := c.Lower[1], c.Lower[2]; d > 0 || u > 0 {
		disk := c.Timing.LoadMsPerToken(true)
		if d > 0 {
			lower += int(d)
			load += float64(int(d)*bs) * disk
		}
		if u > 0 {
			lower += int(u)
			load += float64(int(u)*bs) * disk
		}
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
	var extra int
	if all, gpu := req.Tokens-c.Overlap*bs, req.Tokens-(c.Overlap-lower)*bs; all >= 1 && gpu >= 1 {
		extra = gpu - all // NewTokens of each, unclamped
	} else {
		extra = req.NewTokens(c.Overlap-lower) - req.NewTokens(c.Overlap)
	}
	if load <= float64(extra)*c.Timing.PrefillPerToken*weight {
		return load
	}
	return tierLoadSpans(c, req, weight, lower, load)
}

// tierLoadMs reads Lower as host, disk and unknown: this fails to compile
// if the index's tiers below GPU are not those three.
const _ = uint(index.LowerTiers-3) + uint(3-index.LowerTiers)

// tierLoadSpans is tierLoadMs for a load that may cost more than
// recomputing the lower blocks: the smaller of the two, from the worker's
// prefill spans with and without them.
func tierLoadSpans(c *Candidate, req *Request, weight float64, lower int, load float64) float64 {
	var buf timingmodel.Steps
	s := c.stepsOf(&buf)
	withLower, _ := c.spanPair(s, req, c.Overlap)
	gpuPrefix, _ := c.spanPair(s, req, c.Overlap-lower)
	cached := s.PrefillMs(withLower, weight)
	gpuOnly := s.PrefillMs(gpuPrefix, weight)
	return max(min(load, gpuOnly-cached), 0)
}
