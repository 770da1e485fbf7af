package scheduler

import "math"

// Seed is the credit of a worker without the prefix the request's
// best-cached workers (its homes) hold: what a copy of the prefix there
// saves the recent requests that share it (see Shared and the package
// doc), while req.Rate and req.Shared.Rate are positive. A worker the
// prefix is routed to is a home though the request would find part of it
// not computed yet (its Reach, not its Overlap: see FillComputed): a copy
// there adds none. It reads the time ahead and the work QueueWait
// recorded, so it follows QueueWait.
type Seed struct{}

// Add subtracts each candidate's credit.
func (Seed) Add(cands []Candidate, req Request, _ Params) {
	if req.Rate > 0 && req.Shared.Rate > 0 {
		seed(cands, req.Shared)
	}
}

// seed credits each worker without the shared prefix with the wait a copy
// of it there saves the requests that share it, and says whether it did.
// Those requests go to the homes, whose shortest queue (backlog, in ms of
// work) drains at 1 - HomeBusy per ms as more work arrives; with a copy on
// worker c, they can wait instead for c's queue, this request's work
// included, which drains at 1 - SeedBusy. Each one arriving at t saves the
// difference while it is positive, and they arrive at Rate: the credit is
// Rate times the integral of the saving over the home's busy period. It
// counts that one busy period only, and no request after it: a lower bound
// on the copy's worth. At low load the homes have no queue and it is 0.
func seed(cands []Candidate, sh Shared) bool {
	homes, backlog := 0, math.Inf(1)
	for i := range cands {
		if cands[i].reach() >= sh.Blocks {
			homes++
			backlog = min(backlog, cands[i].ahead)
		}
	}
	if homes == 0 || homes == len(cands) || !(backlog > 0) {
		return false
	}
	drainHome, drainSeed := 1-sh.HomeBusy, 1-sh.SeedBusy
	if !(drainHome > 0) || !(drainSeed > 0) {
		return false
	}
	for i := range cands {
		if c := &cands[i]; c.reach() < sh.Blocks {
			c.Cost -= sh.Rate * WaitSaved(backlog, drainHome, c.ahead+c.work, drainSeed)
		}
	}
	return true
}

// WaitSaved is the integral over t >= 0 of how much less a request
// arriving at t waits for the shorter of two queues than for the first
// alone: the first holds home ms of work and drains at drainHome per ms,
// the second seeded ms draining at drainSeed, neither taking the arrivals
// into account (the drain rates do).
func WaitSaved(home, drainHome, seeded, drainSeed float64) float64 {
	if !(home > 0) || !(drainHome > 0) || !(drainSeed > 0) {
		return 0
	}
	seeded = max(seeded, 0)
	homeEnd, seedEnd := home/drainHome, seeded/drainSeed
	// While both queues last, the saving is home - seeded + (drainSeed -
	// drainHome) t; after the second is empty, the first's backlog.
	saved := positiveIntegral(home-seeded, drainSeed-drainHome, min(homeEnd, seedEnd))
	if homeEnd > seedEnd {
		left := home - drainHome*seedEnd
		saved += left * left / (2 * drainHome)
	}
	return saved
}

// positiveIntegral is the integral of max(0, a + b x) for x in [0, t].
func positiveIntegral(a, b, t float64) float64 {
	end := a + b*t
	switch {
	case a >= 0 && end >= 0:
		return (a + end) / 2 * t
	case a >= 0: // falls through zero: b < 0
		return a * a / (2 * -b)
	case end > 0: // rises through zero: b > 0
		return end * end / (2 * b)
	}
	return 0
}

// reach is how far c's cache will hold the request's prefix once what is
// routed there is computed: Reach, or Overlap when not filled.
func (c *Candidate) reach() int { return max(c.Overlap, c.Reach) }
