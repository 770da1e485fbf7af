// Package scheduler chooses a worker for a request from each candidate's
// cached prefix and current load. The cost of a worker is the prefill it
// would do, weighted, plus the decode it is already doing:
//
//	cost(w) = weight * (blocks of this request not cached on w + w's pending prefill blocks)
//	        + w's decode blocks (distinct blocks of its decoding requests)
//
// Temperature 0 takes the cheapest worker, breaking ties at random;
// temperature t > 0 samples with probability proportional to
// exp(-normalised cost / t), so load spreads while cache affinity still pulls.
package scheduler

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/index"
)

// ErrNoCandidates is returned by Select when no worker can serve.
var ErrNoCandidates = errors.New("scheduler: no candidate workers")

// Candidate is one worker that could serve a request.
type Candidate struct {
	Worker index.WorkerID
	// Overlap is how many leading blocks of the request the worker caches.
	Overlap int
	// PrefillBlocks and DecodeBlocks are the worker's current load.
	PrefillBlocks, DecodeBlocks int
	// Cost is filled in by Select.
	Cost float64
}

// Params weigh a decision.
type Params struct {
	// OverlapWeight multiplies prefill blocks; 1 values a prefill block like
	// a decode block, more favours cache hits, less favours spreading load.
	OverlapWeight float64
	// Temperature 0 is deterministic argmin; larger samples more widely.
	Temperature float64
}

// Select fills each candidate's cost for a request of requestBlocks blocks and
// returns the index of the chosen one. rng breaks ties and samples.
func Select(cands []Candidate, requestBlocks int, p Params, rng *rand.Rand) (int, error) {
	if len(cands) == 0 {
		return -1, ErrNoCandidates
	}
	best := math.Inf(1)
	for i := range cands {
		c := &cands[i]
		prefill := max(requestBlocks-c.Overlap, 0) + c.PrefillBlocks
		c.Cost = p.OverlapWeight*float64(prefill) + float64(c.DecodeBlocks)
		best = min(best, c.Cost)
	}
	if p.Temperature <= 0 {
		ties := 0
		chosen := -1
		for i, c := range cands {
			if c.Cost == best {
				ties++
				if rng.IntN(ties) == 0 { // reservoir: uniform among ties
					chosen = i
				}
			}
		}
		return chosen, nil
	}
	// Softmax over costs normalised to [0, 1], so the temperature means the
	// same whatever the request size.
	worst := best
	for _, c := range cands {
		worst = max(worst, c.Cost)
	}
	span := worst - best
	if span == 0 {
		return rng.IntN(len(cands)), nil
	}
	weights := make([]float64, len(cands))
	total := 0.0
	for i, c := range cands {
		weights[i] = math.Exp(-(c.Cost - best) / span / p.Temperature)
		total += weights[i]
	}
	r := rng.Float64() * total
	for i, w := range weights {
		if r < w {
			return i, nil
		}
		r -= w
	}
	return len(cands) - 1, nil
}

// Load tracks the requests the router has sent to each worker: added on
// route, moved from prefill to decode on prefill-complete, removed on free.
// A worker's decode blocks are the distinct blocks of its decoding requests,
// counted once however many requests share them (a shared system prompt
// occupies the cache once), which is what its KV memory holds.
type Load struct {
	mu       sync.Mutex
	workers  map[index.WorkerID]*workerLoad
	requests map[string]*request
	// order lists requests by when they were added, for Expire.
	order []added
	head  int
}

type added struct {
	id string
	r  *request
	at time.Time
}

type workerLoad struct {
	prefillBlocks, requests int
	blocks                  map[uint64]int32 // active block -> requests holding it
}

type request struct {
	worker        index.WorkerID
	prefillBlocks int
	blocks        []uint64
	prefilled     bool
}

// NewLoad returns an empty tracker.
func NewLoad() *Load {
	return &Load{workers: map[index.WorkerID]*workerLoad{}, requests: map[string]*request{}}
}

// Add records a request routed to w: it will prefill prefillBlocks blocks
// and holds the blocks with these sequence hashes while it runs. A request
// id already present is replaced (a retry moved it). Add keeps its own copy
// of blocks.
func (l *Load) Add(id string, w index.WorkerID, prefillBlocks int, blocks []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freeLocked(id)
	r := &request{worker: w, prefillBlocks: prefillBlocks, blocks: append([]uint64(nil), blocks...)}
	l.requests[id] = r
	l.order = append(l.order, added{id: id, r: r, at: time.Now()})
	wl := l.workerLocked(w)
	wl.prefillBlocks += prefillBlocks
	wl.requests++
}

// PrefillDone records that a request finished its prefill. Unknown ids and
// repeats are ignored.
func (l *Load) PrefillDone(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.requests[id]
	if !ok || r.prefilled {
		return
	}
	r.prefilled = true
	wl := l.workerLocked(r.worker)
	wl.prefillBlocks -= r.prefillBlocks
	for _, h := range r.blocks {
		wl.blocks[h]++
	}
}

// Free forgets a request (finished or cancelled). Unknown ids are ignored.
func (l *Load) Free(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freeLocked(id)
}

func (l *Load) freeLocked(id string) {
	r, ok := l.requests[id]
	if !ok {
		return
	}
	delete(l.requests, id)
	wl := l.workerLocked(r.worker)
	wl.requests--
	if !r.prefilled {
		wl.prefillBlocks -= r.prefillBlocks
		return
	}
	for _, h := range r.blocks {
		if n := wl.blocks[h] - 1; n > 0 {
			wl.blocks[h] = n
		} else {
			delete(wl.blocks, h)
		}
	}
}

func (l *Load) workerLocked(w index.WorkerID) *workerLoad {
	wl, ok := l.workers[w]
	if !ok {
		wl = &workerLoad{blocks: map[uint64]int32{}}
		l.workers[w] = wl
	}
	return wl
}

// Expire forgets requests added before cutoff that were never freed: their
// frontend or router replica died without saying so. It returns how many.
func (l *Load) Expire(cutoff time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for l.head < len(l.order) && l.order[l.head].at.Before(cutoff) {
		a := l.order[l.head]
		l.order[l.head] = added{}
		l.head++
		if l.requests[a.id] == a.r { // not freed, nor replaced by a retry
			l.freeLocked(a.id)
			n++
		}
	}
	if l.head > 1024 && l.head > len(l.order)/2 {
		l.order = append(l.order[:0], l.order[l.head:]...)
		l.head = 0
	}
	return n
}

// RemoveWorker drops a worker and its requests: it left.
func (l *Load) RemoveWorker(w index.WorkerID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.workers, w)
	for id, r := range l.requests {
		if r.worker == w {
			delete(l.requests, id)
		}
	}
}

// Of returns a worker's pending prefill blocks, distinct decode blocks and
// requests in flight.
func (l *Load) Of(w index.WorkerID) (prefillBlocks, decodeBlocks, requests int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wl, ok := l.workers[w]; ok {
		return wl.prefillBlocks, len(wl.blocks), wl.requests
	}
	return 0, 0, 0
}
