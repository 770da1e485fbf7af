package index

import "time"
import "sync"

// oldPending is Pending in its first form, every block's references in one
// map, before they were split into one and multi: the reference
// TestPendingMatchesOld holds the split form to.

type oldPending struct {
	mu     sync.Mutex
	ttl    time.Duration
	blocks map[uint64][]oldRef
	reqs   map[string]*oldReq
	order  []oldAdded
	head   int

	done     []oldAdded
	doneHead int
}

type oldRef struct {
	w    WorkerID
	refs int32
}

type oldReq struct {
	w      WorkerID
	hashes []uint64
}

type oldAdded struct {
	id string
	r  *oldReq
	at time.Time
}

func newOldPending(ttl time.Duration) *oldPending {
	return &oldPending{ttl: ttl, blocks: map[uint64][]oldRef{}, reqs: map[string]*oldReq{}}
}

func (p *oldPending) Add(id string, w WorkerID, hashes []uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
	if len(hashes) == 0 {
		return
	}
	r := &oldReq{w: w, hashes: append([]uint64(nil), hashes...)}
	p.reqs[id] = r
	p.order = append(p.order, oldAdded{id: id, r: r, at: now})

	var chunk []oldRef
	for _, h := range r.hashes {
		refs := p.blocks[h]
		found := false
		for i := range refs {
			if refs[i].w == w {
				refs[i].refs++
				found = true
				break
			}
		}
		switch {
		case found:
		case len(refs) > 0:
			p.blocks[h] = append(refs, oldRef{w: w, refs: 1})
		default:
			if len(chunk) == 0 {
				chunk = make([]oldRef, len(r.hashes))
			}
			chunk[0] = oldRef{w: w, refs: 1}
			p.blocks[h] = chunk[:1:1]
			chunk = chunk[1:]
		}
	}
}

func (p *oldPending) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
}

func (p *oldPending) releaseLocked(id string) {
	r, ok := p.reqs[id]
	if !ok {
		return
	}
	delete(p.reqs, id)
	for _, h := range r.hashes {
		p.dropLocked(h, r.w, false)
	}

	r.hashes = nil
}

func (p *oldPending) dropLocked(h uint64, w WorkerID, all bool) {
	refs := p.blocks[h]
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
	if len(refs) == 0 {
		delete(p.blocks, h)
	} else {
		p.blocks[h] = refs
	}
}

func (p *oldPending) Done(id string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.reqs[id]; ok {
		p.done = append(p.done, oldAdded{id: id, r: r, at: now.Add(Grace)})
	}
}

func (p *oldPending) Confirm(w WorkerID, hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.blocks) == 0 {
		return
	}
	for _, h := range hashes {
		p.dropLocked(h, w, true)
	}
}

func (p *oldPending) Expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cutoff := now.Add(-p.ttl)
	for p.head < len(p.order) && p.order[p.head].at.Before(cutoff) {
		a := p.order[p.head]
		p.order[p.head] = oldAdded{}
		p.head++
		if p.reqs[a.id] == a.r {
			p.releaseLocked(a.id)
		}
	}
	if p.head > 1024 && p.head > len(p.order)/2 {
		p.order = append(p.order[:0], p.order[p.head:]...)
		p.head = 0
	}
	for p.doneHead < len(p.done) && p.done[p.doneHead].at.Before(now) {
		a := p.done[p.doneHead]
		p.done[p.doneHead] = oldAdded{}
		p.doneHead++
		if p.reqs[a.id] == a.r {
			p.releaseLocked(a.id)
		}
	}
	if p.doneHead > 1024 && p.doneHead > len(p.done)/2 {
		p.done = append(p.done[:0], p.done[p.doneHead:]...)
		p.doneHead = 0
	}
}

func (p *oldPending) RemoveWorker(instance uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.reqs {
		if r.w.Instance == instance {
			p.releaseLocked(id)
		}
	}
}

func (p *oldPending) Extend(w WorkerID, hashes []uint64, from int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := from
	for n < len(hashes) && p.holdsLocked(w, hashes[n]) {
		n++
	}
	return n
}

func (p *oldPending) ExtendAll(workers []WorkerID, hashes []uint64, overlaps []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.blocks) == 0 {
		return
	}
	type memo struct {
		pos  int
		refs []oldRef
	}
	var seen [8]memo
	memos := seen[:0]
	lookup := func(pos int) []oldRef {
		for _, m := range memos {
			if m.pos == pos {
				return m.refs
			}
		}
		refs := p.blocks[hashes[pos]]
		memos = append(memos, memo{pos, refs})
		return refs
	}
	for i, w := range workers {
		n := overlaps[i]
		if n >= len(hashes) || !oldHolds(lookup(n), w) {
			continue
		}
		for n++; n < len(hashes) && p.holdsLocked(w, hashes[n]); n++ {
		}
		overlaps[i] = n
	}
}

func oldHolds(refs []oldRef, w WorkerID) bool {
	for _, r := range refs {
		if r.w == w {
			return true
		}
	}
	return false
}

func (p *oldPending) Empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.blocks) == 0
}

func (p *oldPending) holdsLocked(w WorkerID, h uint64) bool { return oldHolds(p.blocks[h], w) }

func (p *oldPending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}
