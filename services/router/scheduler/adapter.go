package scheduler

// AdapterLoad is what loading the request's LoRA adapter on a worker costs:
// each candidate's AdapterMs, which the caller sets from the worker's
// timing model when the worker has not loaded the adapter (0 when it has,
// or when the request runs on the base model, and then the cost is left as
// it was to the bit), paid by the request itself and by each request
// decoding there. vLLM loads an adapter inside the step that first needs
// it, before the step's forward pass, so that step, and with it the next
// token of every request decoding on the worker, comes the load's time
// later: as DecodeStall counts the wait a prefill causes the decoding
// requests, in the same unit (milliseconds of some request's wait the
// choice causes, each counted once), the term adds the load time once for
// the request and once per decoding request. Without that part a load on a
// busy worker looks as cheap as one on an idle worker, and the slots of the
// workers decoding the most churn the most.
type AdapterLoad struct{}

// Add adds each candidate's adapter load time, for the request and for
// each of the worker's decoding requests.
func (AdapterLoad) Add(cands []Candidate, _ Request, _ Params) {
	for i := range cands {
		c := &cands[i]
		if ms := c.AdapterMs; ms != 0 {
			c.Cost += ms * float64(1+max(c.Decoding, 0))
		}
	}
}
