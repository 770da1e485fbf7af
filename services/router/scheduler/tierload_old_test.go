package scheduler

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// tierLoadBefore is tierLoadMs as it was before its one-pass form: a loop
// over the tiers, and the prefill the lower blocks would add as misses
// from NewTokens twice.
func tierLoadBefore(c *Candidate, req *Request, weight float64) float64 {
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

// TestTierLoadMatchesBefore: tierLoadMs, and TierLoad's sum with it, give
// tierLoadBefore's answer to the bit over random candidates and requests: tier mixes with zero and
// negative counts, lower blocks past the overlap, prefixes covering the
// whole prompt (NewTokens' floor), published and default rates, loads
// cheaper and dearer than recomputing, weights, queues and batches.
func TestTierLoadMatchesBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(39, 7))
	rate := func() float64 {
		switch r.IntN(4) {
		case 0:
			return 0 // unset: the default
		case 1:
			return r.Float64() * 0.002
		case 2:
			return r.Float64() * 0.05
		}
		return r.Float64() * 5
	}
	count := func() int32 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int32N(3)
		}
		return r.Int32N(300)
	}
	const n = 20000
	dearer := 0
	for i := range n {
		m := timingmodel.Default()
		m.CPULoadPerToken, m.DiskLoadPerToken = rate(), rate()
		if r.IntN(3) == 0 {
			m.PrefillPerToken *= 0.1 + 3*r.Float64()
		}
		bs := []int{1, 16, 32, 64}[r.IntN(4)]
		blocks := r.IntN(400)
		tokens := blocks*bs + r.IntN(bs)
		if r.IntN(4) == 0 {
			tokens = blocks * bs
		}
		req := Request{Blocks: blocks, Tokens: tokens, BlockSize: bs, Rate: r.Float64() * 0.01 * float64(r.IntN(2))}
		c := Candidate{
			Overlap: r.IntN(blocks + 2),
			Lower:   [index.LowerTiers]int32{count(), count(), count()},
			Timing:  m,
		}
		if r.IntN(2) == 0 {
			c.QueuedTokens, c.Decoding, c.Usage = r.IntN(20000), r.IntN(128), r.Float64()
			c.QueuedAttn = float64(c.QueuedTokens) * float64(r.IntN(4000))
		}
		weight := []float64{1, 0.5, 2, r.Float64() * 4}[r.IntN(4)]
		want := tierLoadBefore(&c, &req, weight)
		if got := tierLoadMs(&c, &req, weight); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("case %d: candidate %+v, request %+v, weight %v: tierLoadMs %v, want %v", i, c, req, weight, got, want)
		}
		// Through the term, on a cost summed so far.
		c.Cost = r.Float64() * 1000
		sum := c.Cost
		if c.Lower != ([index.LowerTiers]int32{}) {
			sum += want
		}
		cands := []Candidate{c}
		TierLoad{}.Add(cands, req, Params{OverlapWeight: weight})
		if math.Float64bits(cands[0].Cost) != math.Float64bits(sum) {
			t.Fatalf("case %d: candidate %+v, request %+v, weight %v: cost %v, want %v", i, c, req, weight, cands[0].Cost, sum)
		}
		if tierLoadDearer(&c, &req, weight) {
			dearer++
		}
	}
	t.Logf("%d of %d cases dearer than recomputing", dearer, n)
	// Both branches ran: loads priced as they are and loads capped at
	// recomputing.
	if dearer < n/20 || dearer > n-n/20 {
		t.Fatalf("%d of %d cases dearer than recomputing: the inputs miss a branch", dearer, n)
	}
}

// tierLoadDearer says whether the load of c's lower blocks costs more than
// recomputing them (tierLoadBefore's second branch).
func tierLoadDearer(c *Candidate, req *Request, weight float64) bool {
	lower, load := 0, 0.0
	for t, n := range c.Lower {
		if n > 0 {
			lower += int(n)
			load += float64(int(n)*req.BlockSize) * c.Timing.LoadMsPerToken(index.Tier(t+1) != index.TierCPU)
		}
	}
	lower = min(lower, c.Overlap)
	extra := req.NewTokens(c.Overlap-lower) - req.NewTokens(c.Overlap)
	return load*weight > float64(extra)*c.Timing.PrefillPerToken*weight
}
