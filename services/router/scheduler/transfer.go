package scheduler

// KVTransfer is the time a worker waits to receive the KV of the prompt
// blocks it does not cache, computed elsewhere (a prefill worker, in a
// disaggregated pair): LatencyMs once when any block moves, plus
// MsPerBlock for each full block of the request past the worker's cached
// prefix. The values are the link's, measured or configured by the
// caller; the zero value costs nothing.
type KVTransfer struct {
	LatencyMs, MsPerBlock float64
}

// Add adds each candidate's transfer time.
func (t KVTransfer) Add(cands []Candidate, req Request, _ Params) {
	for i := range cands {
		c := &cands[i]
		if missing := req.Blocks - min(max(c.Overlap, 0), req.Blocks); missing > 0 {
			c.Cost += t.LatencyMs + t.MsPerBlock*float64(missing)
		}
	}
}
