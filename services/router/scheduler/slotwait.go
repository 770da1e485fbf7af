package scheduler

// SlotWait is the wait for a running slot on a worker that runs at most
// its timing model's MaxRunning requests at once (vLLM's max_num_seqs;
// the simulated engine's MaxNumSeqs). An engine admits a waiting request
// only while fewer than that run, in arrival order, so a request that
// finds the worker's running requests and those waiting ahead of it (the
// requests the router routed there and has not seen start decoding,
// KVSpace.Waiting: decode legs among them until the worker's report shows
// them decoding, see Load.AddLeg) at or past the limit starts once enough
// of them have ended: ends = Holders + Waiting + 1 - MaxRunning (the
// router may count more running than the limit: requests it saw reach
// their first token and still waiting for a slot, as a decode leg on a
// worker whose reports list no requests, which runs from its handoff). As BlockWait takes a running request's remaining time,
// memoryless, a mean run of RunMs over k running requests ends one every
// RunMs/k, and each end admits the next waiting request in its place (the
// running stay k = min(Holders, MaxRunning)): the wait is ends x RunMs/k.
// The request's admission waits for a slot and for its blocks
// (BlockWait), its prompts queued ahead compute meanwhile and so does an
// adapter's slot wait: the term adds the part of the slot wait beyond all
// of those. A worker with a slot free, or whose limit or run is unknown,
// costs nothing and keeps its cost to the bit.
type SlotWait struct{}

// Add adds each candidate's wait for a running slot beyond its queue, its
// adapter's slot wait and its wait for blocks.
func (SlotWait) Add(cands []Candidate, req Request, _ Params) {
	for i := range cands {
		c := &cands[i]
		if w := c.RunSlotWaitMs(); w > 0 {
			if extra := w - max(c.queueMs(), c.SlotWaitMs, c.BlockWaitMs(&req)); extra > 0 {
				c.Cost += extra
			}
		}
	}
}

// RunSlotWaitMs is how long from now a request routed to c waits for a
// running slot there (see SlotWait): 0 when one is free.
func (c *Candidate) RunSlotWaitMs() float64 {
	s := &c.KV
	most := c.Timing.MaxRunning
	if most <= 0 || !(s.RunMs > 0) || s.Holders <= 0 {
		return 0
	}
	ends := s.Holders + max(s.Waiting, 0) + 1 - most
	if ends <= 0 {
		return 0
	}
	return s.RunMs * float64(ends) / float64(min(s.Holders, most))
}
