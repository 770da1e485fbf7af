package scheduler

import (
	"math"
	"sort"

	"github.com/switchyard-llm/switchyard/services/router/index"
)

// KVSpace is a worker's KV memory as the admission of a new request meets
// it, from the router's record and the worker's fresh load report (see
// Load.Fill): what its capacity is, what its running requests hold, what
// the requests routed there and not yet at their first token will take
// before this one, and how long a request runs there.
type KVSpace struct {
	// Total is the worker's KV capacity in blocks; 0: unknown (its load
	// report has not said).
	Total int
	// Held is the blocks its running requests hold: the distinct blocks
	// of those decoding (a shared prefix once), each of the router's with
	// half the mean output's blocks (its tokens generated so far, on
	// average, which the record of its prompt does not count), and the
	// report's foreign decoding requests' as reported.
	Held int
	// Holders is how many running requests hold them.
	Holders int
	// Queued is the blocks the requests waiting for their first token
	// there need to be admitted (each its uncached prompt blocks), and
	// the decode legs waiting for admission the blocks they receive (see
	// Load.AddLeg); Waiting their number.
	Queued, Waiting int
	// RunMs is how long a request runs there once admitted, on average:
	// its mean output times a decode step at the worker's KV usage, from
	// its last load report; 0: unknown.
	RunMs float64
}

// BlockWait is the wait for free KV blocks on a worker whose memory the
// requests running there hold. An engine admits a waiting request when
// the blocks of its prompt fit beside those the running requests hold
// (vLLM's scheduler, and the simulated engine, admit in arrival order,
// and a request that does not fit stops admission), and a running request
// frees its blocks when it ends. So when the blocks held, those of the
// requests queued ahead and the request's own (its prompt past the
// prefix running requests hold: see OwnBlocks) exceed the capacity, the request is admitted
// once enough running requests have ended to free the excess: a running
// request frees Held/Holders blocks on average.
//
// The router knows a request's mean run only, not how far a running one
// has got: its remaining time is taken as memoryless (what is left of it
// is the mean run however long it has run), so of k running requests the
// first ends after RunMs/k on average, the next RunMs/(k-1) later, and m
// of them have ended after RunMs*(1/k + ... + 1/(k-m+1)). While requests
// queued ahead remain, each end admits one of them in its place and the
// running stay k. The wait is priced as the slot wait of an adapter is
// (see AdapterLoad): the request alone waits, the prompts queued ahead
// are computed meanwhile, and its first token comes after the later of
// the two, so the term adds the part of the wait that outlasts the queue
// (and the slot wait, which the same time covers). A worker with room, or
// whose capacity or run is unknown, costs nothing and keeps its cost to
// the bit.
type BlockWait struct{}

// Add adds each candidate's wait for blocks beyond its queue.
func (BlockWait) Add(cands []Candidate, req Request, _ Params) {
	for i := range cands {
		c := &cands[i]
		if w := c.BlockWaitMs(&req); w > 0 {
			c.Cost += c.blockWaitBeyondQueue(w)
		}
	}
}

// blockWaitBeyondQueue is the part of the block wait w that outlasts c's
// queue and its adapter slot wait.
func (c *Candidate) blockWaitBeyondQueue(w float64) float64 {
	return max(w-max(c.queueMs(), c.SlotWaitMs), 0)
}

// FillShared sets each candidate's SharedBlocks for a request with these
// block hashes: the leading blocks of its cached prefix (Overlap) that
// the worker's decoding requests hold, as the router records them. Only
// a candidate whose memory might not hold the request unshared is looked
// at (the others keep 0: they have room either way); the blocks held
// along a prefix are a leading run of it (a request holding a block
// holds those before it), so each costs a binary search.
func (l *Load) FillShared(cands []Candidate, hashes []uint64) {
	locked := false
	for i := range cands {
		c := &cands[i]
		c.SharedBlocks = 0
		s := &c.KV
		if c.Overlap <= 0 || s.Total <= 0 || !(s.RunMs > 0) || s.Holders <= 0 || s.Held+s.Queued+len(hashes) <= s.Total {
			continue
		}
		if !locked {
			l.mu.Lock()
			defer l.mu.Unlock()
			locked = true
		}
		c.SharedBlocks = heldPrefixLocked(l.workers[c.Worker], hashes, c.Overlap)
	}
}

// SharedPrefix is how many leading blocks of hashes, of the first
// overlap, w's decoding requests hold (see FillShared).
func (l *Load) SharedPrefix(w index.WorkerID, hashes []uint64, overlap int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return heldPrefixLocked(l.workers[w], hashes, overlap)
}

// heldPrefixLocked is the length of the leading run of hashes[:overlap]
// that wl's decoding requests hold.
func heldPrefixLocked(wl *workerLoad, hashes []uint64, overlap int) int {
	if wl == nil || len(wl.blocks) == 0 {
		return 0
	}
	n := min(max(overlap, 0), len(hashes))
	return sort.Search(n, func(i int) bool { return wl.blocks[hashes[i]] == 0 })
}

// BlockWaitMs is how long from now the request waits on c for free KV
// blocks (see BlockWait): 0 when they fit.
func (c *Candidate) BlockWaitMs(req *Request) float64 {
	s := &c.KV
	if s.Total <= 0 || !(s.RunMs > 0) || s.Holders <= 0 || s.Held <= 0 {
		return 0
	}
	excess := s.Held + s.Queued + req.OwnBlocks(c.SharedBlocks) - s.Total
	if excess <= 0 {
		return 0
	}
	k := s.Holders
	per := float64(s.Held) / float64(k)
	m := int(math.Ceil(float64(excess) / per))
	replaced := min(m, max(s.Waiting, 0))
	rest := min(m-replaced, k)
	return s.RunMs * (float64(replaced)/float64(k) + harmonic(k) - harmonic(k-rest))
}

// OwnBlocks is how many blocks of a worker's free memory the request
// takes when admitted there, shared of them the leading blocks the
// worker's running requests hold: its prompt's blocks past those, its
// partial last block included. A cached block nobody holds is free
// memory that the request takes (an engine counts a hit on it against
// its free blocks, as the simulated engine and vLLM do), so only blocks
// a running request holds are shared.
func (r Request) OwnBlocks(shared int) int {
	blocks := r.Blocks
	if r.BlockSize > 0 {
		blocks = max(blocks, (r.Tokens+r.BlockSize-1)/r.BlockSize)
	}
	return max(blocks-max(shared, 0), 0)
}

// harmonic is 1 + 1/2 + ... + 1/n (0 for n <= 0): summed for small n,
// from its asymptotic series past that (its error there is below 1e-12).
func harmonic(n int) float64 {
	if n <= 0 {
		return 0
	}
	if n <= 64 {
		h := 0.0
		for i := n; i >= 1; i-- {
			h += 1 / float64(i)
		}
		return h
	}
	x := float64(n)
	const eulerGamma = 0.57721566490153286061
	return math.Log(x) + eulerGamma + 1/(2*x) - 1/(12*x*x) + 1/(120*x*x*x*x)
}
