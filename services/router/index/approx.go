package index

import (
	"sync"
	"time"
)

// Approx predicts workers' caches from the router's own decisions, for
// engines that publish no KV events: routing a request to a worker records
// that the worker now holds the request's blocks. Predictions expire after a
// TTL, and when the index grows past a maximum it is pruned oldest-first
// (deepest block first among equally old ones, since a prefix outlives its
// extensions in a real LRU cache) down to a target fraction.
type Approx struct {
	idx         *Index
	ttl         time.Duration
	maxEntries  int
	pruneTarget int

	mu    sync.Mutex
	times map[approxKey]int64 // last prediction time, unix nanoseconds
	queue []approxItem        // predictions in time order; stale ones skipped
	head  int
}

type approxKey struct {
	w WorkerID
	h uint64
}

type approxItem struct {
	approxKey
	at int64
}

// ApproxConfig tunes an Approx index.
type ApproxConfig struct {
	// TTL is how long a prediction lives without being renewed.
	TTL time.Duration
	// MaxEntries bounds the (block, worker) pairs; 0 means unbounded.
	MaxEntries int
	// PruneTargetRatio is the fraction of MaxEntries pruning brings the
	// index down to.
	PruneTargetRatio float64
}

// NewApprox returns an empty approximate index.
func NewApprox(cfg ApproxConfig) *Approx {
	return &Approx{
		idx:         New(),
		ttl:         cfg.TTL,
		maxEntries:  cfg.MaxEntries,
		pruneTarget: int(float64(cfg.MaxEntries) * cfg.PruneTargetRatio),
		times:       map[approxKey]int64{},
	}
}

// Index is the underlying index (for lookups and stats).
func (a *Approx) Index() *Index { return a.idx }

// Predict records that w holds hashes as of now, renewing older predictions.
func (a *Approx) Predict(w WorkerID, hashes []uint64, now time.Time) {
	at := now.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.idx.Store(w, hashes)
	// Deepest first, so that among equal times the queue pops deep blocks
	// before their prefixes.
	for i := len(hashes) - 1; i >= 0; i-- {
		k := approxKey{w, hashes[i]}
		a.times[k] = at
		a.queue = append(a.queue, approxItem{k, at})
	}
	a.expireLocked(at)
	a.pruneLocked()
}

// Expire drops predictions older than the TTL.
func (a *Approx) Expire(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(now.UnixNano())
}

// Overlaps expires old predictions, then answers like Index.Overlaps.
func (a *Approx) Overlaps(hashes []uint64, now time.Time) []Overlap {
	a.Expire(now)
	return a.idx.Overlaps(hashes)
}

// RemoveWorker forgets a worker's predictions.
func (a *Approx) RemoveWorker(w WorkerID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.idx.RemoveWorker(w)
	// Its queue items go stale: popItem finds no time for them.
	for k := range a.times {
		if k.w == w {
			delete(a.times, k)
		}
	}
}

func (a *Approx) expireLocked(now int64) {
	if a.ttl <= 0 {
		return
	}
	cutoff := now - int64(a.ttl)
	for a.head < len(a.queue) && a.queue[a.head].at <= cutoff {
		a.popLocked()
	}
	a.compactLocked()
}

func (a *Approx) pruneLocked() {
	if a.maxEntries <= 0 || a.idx.Stats().Entries <= a.maxEntries {
		return
	}
	for a.head < len(a.queue) && a.idx.Stats().Entries > a.pruneTarget {
		a.popLocked()
	}
	a.compactLocked()
}

// popLocked removes the oldest queue item and, unless a newer prediction
// renewed it, its entry.
func (a *Approx) popLocked() {
	it := a.queue[a.head]
	a.head++
	if at, ok := a.times[it.approxKey]; ok && at == it.at {
		delete(a.times, it.approxKey)
		a.idx.Remove(it.w, []uint64{it.h})
	}
}

func (a *Approx) compactLocked() {
	if a.head > 1024 && a.head > len(a.queue)/2 {
		n := copy(a.queue, a.queue[a.head:])
		a.queue = a.queue[:n]
		a.head = 0
	}
}
