package index

// splitPending is Pending in its former form, one table entry per predicted
// block (a worker number and its count of requests, or a list of them):
// the reference TestPendingMatchesSplit holds the range form to.

import (
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/internal/fifo"
)

// splitPending holds the blocks of requests routed to a worker that its KV
// events have not confirmed yet: a router that knew only confirmed blocks
// would spread a burst of requests sharing a new prefix over every worker
// while the first of them is still in prefill. A request's blocks count as
// predicted on its worker until the worker's events store them (Confirm),
// the request ends (Release), or a TTL passes (Expire). It is safe for
// concurrent use.
type splitPending struct {
	mu  sync.Mutex
	ttl time.Duration
	// preds maps a block to the worker it is predicted on (nearly all
	// blocks have one) with its count of requests, or, tagged splitMultiTag, to
	// lists[i] when several workers have it. It is the index's table: one
	// probe is one cache line, and a route decision makes one or two per
	// block of its request (predict, expire, extend), where a Go map took
	// several and hashed its key first. No pointers: the collector does not
	// scan it.
	preds     table[splitRef]
	lists     [][]splitRef
	freeLists []uint32
	// nums numbers the workers with predicted requests densely, so that a
	// reference is 8 bytes; workers[n] is number n's worker and count[n]
	// its requests. A number is reused once its worker has none left
	// (then no reference names it: each comes from one of its requests).
	nums     map[WorkerID]uint32
	workers  []WorkerID
	count    []int32
	freeNums []uint32
	reqs     map[string]*splitReq
	// order lists requests as they were added, for the TTL. It is a
	// chunked queue: a slice compacted now and then would copy minutes of
	// entries in one decision.
	order fifo.Queue[splitAdded]
	// done lists requests that ended after computing their blocks, whose
	// predictions stay a grace period for their KV events to arrive.
	done fifo.Queue[splitAdded]
}

// splitMultiTag marks a splitRef whose w indexes splitPending.lists.
const splitMultiTag = 1 << 31

// splitRef is a worker number (or splitMultiTag|list) and how many requests
// predict the block there.
type splitRef struct {
	w    uint32
	refs int32
}

type splitReq struct {
	w      WorkerID
	num    uint32
	hashes []uint64
}

type splitAdded struct {
	id string
	r  *splitReq
	at time.Time
}

// newSplitPending returns an empty set whose predictions live at most ttl.
func newSplitPending(ttl time.Duration) *splitPending {
	return &splitPending{ttl: ttl, nums: map[WorkerID]uint32{}, reqs: map[string]*splitReq{}}
}

// Add predicts hashes on w for request id, routed at now; an id already
// present is replaced (a retry moved it). Add keeps its own copy.
func (p *splitPending) Add(id string, w WorkerID, hashes []uint64, now time.Time) {
	p.AddShared(id, w, append([]uint64(nil), hashes...), now)
}

// AddShared is Add keeping hashes itself, not a copy: the caller must not
// change them afterwards.
func (p *splitPending) AddShared(id string, w WorkerID, hashes []uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
	if len(hashes) == 0 {
		return
	}
	n, ok := p.nums[w]
	if !ok {
		if k := len(p.freeNums); k > 0 {
			n = p.freeNums[k-1]
			p.freeNums = p.freeNums[:k-1]
			p.workers[n] = w
		} else {
			n = uint32(len(p.workers))
			p.workers = append(p.workers, w)
			p.count = append(p.count, 0)
		}
		p.nums[w] = n
	}
	p.count[n]++
	r := &splitReq{w: w, num: n, hashes: hashes}
	p.reqs[id] = r
	p.order.Push(splitAdded{id: id, r: r, at: now})
	p.preds.touch(r.hashes)
	// Most blocks are predicted nowhere yet: refOrAdd adds them with
	// one probe, and only a block predicted already takes the call that
	// adds a reference to its predictions.
	for _, h := range r.hashes {
		if v, added := p.preds.refOrAdd(h, splitRef{w: n, refs: 1}); !added {
			p.addRefLocked(v, n)
		}
	}
}

// addRefLocked adds a reference of worker number n to a block's
// predictions v, found in the table.
func (p *splitPending) addRefLocked(v *splitRef, n uint32) {
	switch {
	case v.w == n:
		v.refs++
	case v.w&splitMultiTag == 0:
		li := p.newListLocked(*v, splitRef{w: n, refs: 1})
		*v = splitRef{w: splitMultiTag | li}
	default:
		li := v.w &^ splitMultiTag
		refs := p.lists[li]
		for i := range refs {
			if refs[i].w == n {
				refs[i].refs++
				return
			}
		}
		p.lists[li] = append(refs, splitRef{w: n, refs: 1})
	}
}

// newListLocked stores a list of two references and returns its index.
func (p *splitPending) newListLocked(a, b splitRef) uint32 {
	if k := len(p.freeLists); k > 0 {
		li := p.freeLists[k-1]
		p.freeLists = p.freeLists[:k-1]
		p.lists[li] = append(p.lists[li][:0], a, b)
		return li
	}
	p.lists = append(p.lists, []splitRef{a, b})
	return uint32(len(p.lists) - 1)
}

// Release forgets a request's predictions: it ended before computing its
// blocks (cancelled, or rejected). Unknown ids are ignored.
func (p *splitPending) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
}

func (p *splitPending) releaseLocked(id string) {
	r, ok := p.reqs[id]
	if !ok {
		return
	}
	delete(p.reqs, id)
	p.preds.touch(r.hashes)
	for _, h := range r.hashes {
		p.dropLocked(h, r.num, false)
	}
	// Its entry in order stays until the TTL; its hashes need not.
	r.hashes = nil
	if p.count[r.num]--; p.count[r.num] == 0 {
		// Its worker has no request left, so no reference to its number.
		delete(p.nums, r.w)
		p.freeNums = append(p.freeNums, r.num)
	}
}

// dropLocked takes one reference of worker number n off h, or all of them.
func (p *splitPending) dropLocked(h uint64, n uint32, all bool) {
	v, s, at := p.preds.find(h)
	switch {
	case v == nil:
		return
	case v.w&splitMultiTag == 0:
		if v.w != n {
			return
		}
		if v.refs--; all || v.refs <= 0 {
			p.preds.delFound(h, s, at)
		}
		return
	}
	li := v.w &^ splitMultiTag
	refs := p.lists[li]
	for i := range refs {
		if refs[i].w != n {
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
		p.preds.delFound(h, s, at)
	case 1:
		*v = refs[0]
	default:
		p.lists[li] = refs
		return
	}
	p.lists[li] = refs[:0]
	p.freeLists = append(p.freeLists, li)
}

// emptyLocked says whether nothing is predicted.
func (p *splitPending) emptyLocked() bool { return p.preds.len() == 0 }

// Done says a request ended after its prefill: its blocks are in the
// worker's cache, and its events are on their way, so its predictions stay
// until they arrive, or Grace after now.
func (p *splitPending) Done(id string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.reqs[id]; ok {
		p.done.Push(splitAdded{id: id, r: r, at: now.Add(Grace)})
	}
}

// Confirm drops the predictions of blocks w's events say it stored (the
// index knows them now) or removed (they are gone).
func (p *splitPending) Confirm(w WorkerID, hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() {
		return
	}
	n, ok := p.nums[w]
	if !ok {
		return // nothing is predicted on w
	}
	for _, h := range hashes {
		p.dropLocked(h, n, true)
	}
}

// Expire forgets requests added before now minus the TTL.
func (p *splitPending) Expire(now time.Time) {
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
func (p *splitPending) RemoveWorker(instance uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.reqs {
		if r.w.Instance == instance {
			p.releaseLocked(id)
		}
	}
}

// RemoveRank forgets every prediction on one rank of an instance (its
// cache was cleared).
func (p *splitPending) RemoveRank(w WorkerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.reqs {
		if r.w == w {
			p.releaseLocked(id)
		}
	}
}

// Extend returns how far w's cached prefix of hashes reaches when the
// blocks predicted there count too: from the first from blocks (what the
// index says w holds), on while the next block is predicted on w.
func (p *splitPending) Extend(w WorkerID, hashes []uint64, from int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := from
	for n < len(hashes) && p.holdsLocked(w, hashes[n]) {
		n++
	}
	return n
}

// ExtendAll is Extend for several workers at once: overlaps[i] is what
// the index says workers[i] holds, and becomes its predicted reach. Its
// work is bounded by the request, not by the workers: each position's
// predictions are looked up once however many workers ask at it or extend
// through it (a long prompt predicted on many workers would otherwise
// cost workers times blocks lookups).
func (p *splitPending) ExtendAll(workers []WorkerID, hashes []uint64, overlaps []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() {
		return
	}
	// Most workers stop where the index does, at one of a few positions:
	// each is looked up once.
	type memo struct {
		pos int
		v   splitRef
		ok  bool
	}
	var seen [8]memo
	memos := seen[:0]
	// ext is a worker predicted where the index stops, to extend from
	// next on.
	type ext struct{ i, next int }
	var extBuf, actBuf [16]ext
	exts := extBuf[:0]
	// m is the last position's, and one the worker its prediction names
	// when it names one (nearly always): workers next to each other
	// mostly stop at the same position (most at 0, no cached prefix), and
	// the loop over every worker then compares an id.
	m := memo{pos: -1}
	var one WorkerID
	single := false
	for i := range workers {
		n := overlaps[i]
		if n != m.pos {
			if n >= len(hashes) {
				continue
			}
			found := false
			for _, x := range memos {
				if x.pos == n {
					m, found = x, true
					break
				}
			}
			if !found {
				m.pos = n
				m.v, m.ok = p.preds.get(hashes[n])
				if len(memos) < cap(memos) {
					memos = append(memos, m)
				}
			}
			if single = m.v.w&splitMultiTag == 0; m.ok && single {
				one = p.workers[m.v.w]
			}
		}
		if !m.ok || single && workers[i] != one || !single && !p.onLocked(m.v, workers[i]) {
			continue
		}
		exts = append(exts, ext{i: i, next: n + 1})
	}
	if len(exts) == 0 {
		return
	}
	// Sweep the positions in order with the workers still extending.
	for a := 1; a < len(exts); a++ {
		for b := a; b > 0 && exts[b].next < exts[b-1].next; b-- {
			exts[b], exts[b-1] = exts[b-1], exts[b]
		}
	}
	// The positions swept are looked up in batches whose cache misses
	// overlap (table.getAll), doubling from firstBatch as AppendOverlaps
	// does: one by one, a prediction that runs to the request's end was
	// a round trip to memory per block.
	var vals [batch]splitRef
	var oks [batch]bool
	from, to, size := 0, 0, firstBatch
	act, j := actBuf[:0], 0
	for pos := exts[0].next; ; pos++ {
		for j < len(exts) && exts[j].next == pos {
			act = append(act, exts[j])
			j++
		}
		if len(act) == 0 {
			if j == len(exts) {
				return
			}
			pos = exts[j].next - 1 // nobody extends in between
			continue
		}
		if pos >= len(hashes) {
			for _, e := range act {
				overlaps[e.i] = len(hashes)
			}
			return
		}
		if pos >= to {
			from, to = pos, min(pos+size, len(hashes))
			p.preds.getAll(hashes[from:to], vals[:], oks[:])
			size = min(2*size, batch)
		}
		if len(act) == 1 && j == len(exts) {
			p.extendOne(workers[act[0].i], hashes, pos, from, to, size, &vals, &oks, &overlaps[act[0].i])
			return
		}
		v, ok := vals[pos-from], oks[pos-from]
		keep := act[:0]
		for _, e := range act {
			if ok && p.onLocked(v, workers[e.i]) {
				keep = append(keep, e)
			} else {
				overlaps[e.i] = pos
			}
		}
		act = keep
	}
}

// extendOne is ExtendAll's sweep once one worker, w, is left extending
// and none is to join it (the common case: the worker a request of the
// same prefix was just routed to): from pos, with the batch [from, to) of
// hashes looked up in vals and oks and the next batch size, it sets
// *reach to the first position not predicted on w. A block predicted on
// one worker names it by number, so once w's number is known (the first
// such block names it) the blocks on w alone are told by comparing
// numbers, not by reading a worker id and comparing it.
func (p *splitPending) extendOne(w WorkerID, hashes []uint64, pos, from, to, size int, vals *[batch]splitRef, oks *[batch]bool, reach *int) {
	var num uint32
	known := false
	for ; pos < len(hashes); pos++ {
		if pos >= to {
			from, to = pos, min(pos+size, len(hashes))
			p.preds.getAll(hashes[from:to], vals[:], oks[:])
			size = min(2*size, batch)
		}
		v := vals[pos-from]
		if !oks[pos-from] {
			*reach = pos
			return
		}
		if known && v.w == num {
			continue
		}
		if !p.onLocked(v, w) {
			*reach = pos
			return
		}
		if v.w&splitMultiTag == 0 {
			num, known = v.w, true
		}
	}
	*reach = len(hashes)
}

// onLocked says whether a block's predictions v include w.
func (p *splitPending) onLocked(v splitRef, w WorkerID) bool {
	if v.w&splitMultiTag == 0 {
		return p.workers[v.w] == w
	}
	for _, r := range p.lists[v.w&^splitMultiTag] {
		if p.workers[r.w] == w {
			return true
		}
	}
	return false
}

// Empty says whether nothing is predicted (a cheap check before Extend).
func (p *splitPending) Empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.emptyLocked()
}

func (p *splitPending) holdsLocked(w WorkerID, h uint64) bool {
	v, ok := p.preds.get(h)
	return ok && p.onLocked(v, w)
}

// Len is the number of requests with predictions.
func (p *splitPending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// AppendWorkersOn appends to dst the workers h is predicted on: with no
// block of a request in the index, the only workers its predictions can
// credit (ExtendAll extends a worker from where the index stops, the first
// block for those with none).
func (p *splitPending) AppendWorkersOn(dst []WorkerID, h uint64) []WorkerID {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.preds.get(h)
	if !ok {
		return dst
	}
	if v.w&splitMultiTag == 0 {
		return append(dst, p.workers[v.w])
	}
	for _, r := range p.lists[v.w&^splitMultiTag] {
		dst = append(dst, p.workers[r.w])
	}
	return dst
}
