package index

import (
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/internal/fifo"
)

// Pending holds the blocks of requests routed to a worker that its KV
// events have not confirmed yet: a router that knew only confirmed blocks
// would spread a burst of requests sharing a new prefix over every worker
// while the first of them is still in prefill. A request's blocks count as
// predicted on its worker until the worker's events store them (Confirm),
// the request ends (Release), or a TTL passes (Expire). It is safe for
// concurrent use.
type Pending struct {
	mu  sync.Mutex
	ttl time.Duration
	// one holds the blocks predicted on one worker (nearly all of them),
	// multi those predicted on several. one has no pointers, so the
	// collector does not scan it: a router predicting a few hundred
	// thousand blocks would otherwise have it marked on every cycle.
	one   map[uint64]pendingRef
	multi map[uint64][]pendingRef
	reqs  map[string]*pendingReq
	// order lists requests as they were added, for the TTL. It is a
	// chunked queue: a slice compacted now and then would copy minutes of
	// entries in one decision.
	order fifo.Queue[pendingAdded]
	// done lists requests that ended after computing their blocks, whose
	// predictions stay a grace period for their KV events to arrive.
	done fifo.Queue[pendingAdded]
}

// Grace is how long the predictions of a request that ended after its
// prefill outlive it, for the KV events storing its blocks to arrive.
const Grace = 2 * time.Second

type pendingRef struct {
	w    WorkerID
	refs int32
}

type pendingReq struct {
	w      WorkerID
	hashes []uint64
}

type pendingAdded struct {
	id string
	r  *pendingReq
	at time.Time
}

// NewPending returns an empty set whose predictions live at most ttl.
func NewPending(ttl time.Duration) *Pending {
	return &Pending{ttl: ttl, one: map[uint64]pendingRef{}, multi: map[uint64][]pendingRef{}, reqs: map[string]*pendingReq{}}
}

// Add predicts hashes on w for request id, routed at now; an id already
// present is replaced (a retry moved it). Add keeps its own copy.
func (p *Pending) Add(id string, w WorkerID, hashes []uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
	if len(hashes) == 0 {
		return
	}
	r := &pendingReq{w: w, hashes: append([]uint64(nil), hashes...)}
	p.reqs[id] = r
	p.order.Push(pendingAdded{id: id, r: r, at: now})
	for _, h := range r.hashes {
		p.addRefLocked(h, w)
	}
}

// addRefLocked adds a reference of w to h's predictions.
func (p *Pending) addRefLocked(h uint64, w WorkerID) {
	if o, ok := p.one[h]; ok {
		if o.w == w {
			o.refs++
			p.one[h] = o
			return
		}
		delete(p.one, h)
		p.multi[h] = []pendingRef{o, {w: w, refs: 1}}
		return
	}
	refs, ok := p.multi[h]
	if !ok {
		p.one[h] = pendingRef{w: w, refs: 1}
		return
	}
	for i := range refs {
		if refs[i].w == w {
			refs[i].refs++
			return
		}
	}
	p.multi[h] = append(refs, pendingRef{w: w, refs: 1})
}

// Release forgets a request's predictions: it ended before computing its
// blocks (cancelled, or rejected). Unknown ids are ignored.
func (p *Pending) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
}

func (p *Pending) releaseLocked(id string) {
	r, ok := p.reqs[id]
	if !ok {
		return
	}
	delete(p.reqs, id)
	for _, h := range r.hashes {
		p.dropLocked(h, r.w, false)
	}
	// Its entry in order stays until the TTL; its hashes need not.
	r.hashes = nil
}

// dropLocked takes one reference of w off h, or all of them.
func (p *Pending) dropLocked(h uint64, w WorkerID, all bool) {
	if o, ok := p.one[h]; ok {
		if o.w != w {
			return
		}
		if o.refs--; all || o.refs <= 0 {
			delete(p.one, h)
		} else {
			p.one[h] = o
		}
		return
	}
	refs, ok := p.multi[h]
	if !ok {
		return
	}
	for i := range refs {
		if refs[i].w != w {
			continue
		}
		if refs[i].refs--; all || refs[i].refs <= 0 {
			refs[i] = refs[len(refs)-1]
			refs = refs[:len(refs)-1]
		}
		break
	}
	switch len(refs) {
	case 0:
		delete(p.multi, h)
	case 1:
		delete(p.multi, h)
		p.one[h] = refs[0]
	default:
		p.multi[h] = refs
	}
}

// emptyLocked says whether nothing is predicted.
func (p *Pending) emptyLocked() bool { return len(p.one) == 0 && len(p.multi) == 0 }

// Done says a request ended after its prefill: its blocks are in the
// worker's cache, and its events are on their way, so its predictions stay
// until they arrive, or Grace after now.
func (p *Pending) Done(id string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.reqs[id]; ok {
		p.done.Push(pendingAdded{id: id, r: r, at: now.Add(Grace)})
	}
}

// Confirm drops the predictions of blocks w's events say it stored (the
// index knows them now) or removed (they are gone).
func (p *Pending) Confirm(w WorkerID, hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() {
		return
	}
	for _, h := range hashes {
		p.dropLocked(h, w, true)
	}
}

// Expire forgets requests added before now minus the TTL.
func (p *Pending) Expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cutoff := now.Add(-p.ttl)
	for p.order.Len() > 0 && p.order.Front().at.Before(cutoff) {
		if a := p.order.Pop(); p.reqs[a.id] == a.r {
			p.releaseLocked(a.id)
		}
	}
	for p.done.Len() > 0 && p.done.Front().at.Before(now) {
		if a := p.done.Pop(); p.reqs[a.id] == a.r {
			p.releaseLocked(a.id)
		}
	}
}

// RemoveWorker forgets every prediction on the instance (it left).
func (p *Pending) RemoveWorker(instance uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.reqs {
		if r.w.Instance == instance {
			p.releaseLocked(id)
		}
	}
}

// Extend returns how far w's cached prefix of hashes reaches when the
// blocks predicted there count too: from the first from blocks (what the
// index says w holds), on while the next block is predicted on w.
func (p *Pending) Extend(w WorkerID, hashes []uint64, from int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := from
	for n < len(hashes) && p.holdsLocked(w, hashes[n]) {
		n++
	}
	return n
}

// ExtendAll is Extend for several workers at once: overlaps[i] is what
// the index says workers[i] holds, and becomes its predicted reach. Each
// position's predictions are looked up once however many workers ask.
func (p *Pending) ExtendAll(workers []WorkerID, hashes []uint64, overlaps []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() {
		return
	}
	type memo struct {
		pos   int
		one   pendingRef
		isOne bool
		refs  []pendingRef
	}
	var seen [8]memo
	memos := seen[:0]
	lookup := func(pos int) *memo {
		for i := range memos {
			if memos[i].pos == pos {
				return &memos[i]
			}
		}
		m := memo{pos: pos}
		if m.one, m.isOne = p.one[hashes[pos]]; !m.isOne {
			m.refs = p.multi[hashes[pos]]
		}
		if len(memos) < cap(memos) {
			memos = append(memos, m)
			return &memos[len(memos)-1]
		}
		return &m
	}
	for i, w := range workers {
		n := overlaps[i]
		if n >= len(hashes) {
			continue
		}
		if m := lookup(n); !(m.isOne && m.one.w == w) && !holds(m.refs, w) {
			continue
		}
		for n++; n < len(hashes) && p.holdsLocked(w, hashes[n]); n++ {
		}
		overlaps[i] = n
	}
}

func holds(refs []pendingRef, w WorkerID) bool {
	for _, r := range refs {
		if r.w == w {
			return true
		}
	}
	return false
}

// Empty says whether nothing is predicted (a cheap check before Extend).
func (p *Pending) Empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.emptyLocked()
}

func (p *Pending) holdsLocked(w WorkerID, h uint64) bool {
	if o, ok := p.one[h]; ok {
		return o.w == w
	}
	return holds(p.multi[h], w)
}

// Len is the number of requests with predictions.
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}
