package scheduler

// Held is the time on a worker that receives the KV of the whole prompt
// before it starts the request, the decode worker of a disaggregated pair:
// Prefill and Decode for a candidate caching every block of the request.
// It computes the prompt tokens queued there, then only what an engine
// computes of a fully cached prompt (its last block, for the first
// token's logits: see Request.NewTokens), with a decode step beside each
// prefill step while requests decode there; its running requests and KV
// usage set those steps' cost. The blocks' arrival is KVTransfer's part,
// which reads the candidate's real cached prefix.
type Held struct{}

// Add adds each candidate's time as a holder of every block.
func (Held) Add(cands []Candidate, req Request, p Params) {
	f := fused{}
	for i := range cands {
		c := &cands[i]
		cached := c.Overlap
		c.Overlap = max(cached, req.Blocks)
		f.Add(cands[i:i+1], req, p)
		c.Overlap = cached
	}
}
