package scheduler

// QueueWait is what the request's work on a worker costs the requests that
// reach it after this one, while req.Rate > 0 (see the package doc): its
// work there, the terms before this one less the time queued ahead, which
// every request arriving while the worker drains what is ahead waits for
// in full, and those arriving during it for the rest:
// rate * work * (ahead + work/2). It records the work, which Seed reads.
type QueueWait struct{}

// Add adds each candidate's wait on later requests.
func (QueueWait) Add(cands []Candidate, req Request, _ Params) {
	if !(req.Rate > 0) {
		return
	}
	for i := range cands {
		waitOne(&cands[i], req.Rate)
	}
}

// waitOne is QueueWait for one candidate at rate > 0.
func waitOne(c *Candidate, rate float64) {
	work := max(c.Cost-c.ahead, 0)
	c.work = work
	c.Cost += rate * work * (c.ahead + work/2)
}
