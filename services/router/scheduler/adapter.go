package scheduler

// AdapterLoad is the time a worker spends loading the request's LoRA
// adapter into a slot before it can start the request: each candidate's
// AdapterMs, which the caller sets from the worker's timing model when the
// worker has not loaded the adapter (0 when it has, or when the request
// runs on the base model, and then the cost is left as it was to the bit).
type AdapterLoad struct{}

// Add adds each candidate's adapter load time.
func (AdapterLoad) Add(cands []Candidate, _ Request, _ Params) {
	for i := range cands {
		if ms := cands[i].AdapterMs; ms != 0 {
			cands[i].Cost += ms
		}
	}
}
