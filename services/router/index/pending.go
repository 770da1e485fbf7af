package index

import (
	"math/bits"
	"slices"
	"sort"
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
//
// A request's predictions are kept as one range, its hashes as given, with
// a bit per block its worker's events confirmed (a hole). Block hashes are
// chained, as the engines' and kvhash's are: a block's hash covers its
// whole prefix, so the hash at one position of a request fixes the hashes
// before it and the position itself. A range is therefore found from any
// one of its blocks: the table keys it at every keyEvery-th block from its
// first, and a lookup at position n of a request probes the blocks
// n-keyEvery+1 to n, among which every range covering n has a key; the
// range then places each of its blocks against the request's. A route
// decision predicting b blocks adds b/keyEvery entries, where an entry per
// block made the table many times larger than the caches (a decision's
// predictions live until their events come, seconds on a loaded fleet).
type Pending struct {
	mu  sync.Mutex
	ttl time.Duration
	// keys maps a key block's hash to the first of the chain of nodes
	// (ranges keyed at a block of that hash: requests sharing the prefix,
	// on one worker or several) in nodes.
	keys      table[uint32]
	nodes     []keyNode
	freeNodes []uint32
	// nums numbers the workers with predicted requests densely; byNum[n]
	// lists number n's requests. A number is reused once its worker has
	// none left.
	nums     map[WorkerID]uint32
	byNum    [][]*pendingReq
	freeNums []uint32
	reqs     map[string]*pendingReq
	// same finds a range by what it predicts (its worker, first and last
	// hash and length), for a request predicting exactly the blocks of
	// one already there: the two share it. Identical requests in flight
	// at once are common (a client's retries and parallel samples, load
	// tests, and every request of a prompt while its worker's events do
	// not arrive), and a range each would make every lookup, and every
	// event of that worker, walk them all.
	same map[rangeKey]*pendingReq
	// live counts the blocks predicted, over every request (holes not).
	live int
	// order lists requests as they were added, for the TTL. It is a
	// chunked queue: a slice compacted now and then would copy minutes of
	// entries in one decision.
	order fifo.Queue[pendingAdded]
	// done lists requests that ended after computing their blocks, whose
	// predictions stay a grace period for their KV events to arrive.
	done fifo.Queue[pendingAdded]
	// covers, on and sweep are the lookups' scratch (ExtendAll's per
	// position asked, and its sweeps').
	covers, sweep []cover
	on            []onWorker
}

// Grace is how long the predictions of a request that ended after its
// prefill outlive it, for the KV events storing its blocks to arrive.
const Grace = 2 * time.Second

// keyEvery is how far apart a range's keys are: a range of b blocks takes
// ceil(b/keyEvery) table entries, and a lookup probes keyEvery blocks.
const keyEvery = 8

// noNode ends a chain of nodes.
const noNode = ^uint32(0)

// keyNode is a range keyed at its block off, and the next node of its key.
type keyNode struct {
	r    *pendingReq
	off  uint32
	next uint32
}

type pendingReq struct {
	w   WorkerID
	num uint32
	// refs counts the requests whose predictions it is.
	refs int
	// at is its place in byNum[num].
	at     int
	hashes []uint64
	// holes has bit i set when block i was confirmed (nil: none was);
	// live counts the others.
	holes []uint64
	live  int
	// set finds a block's position by its hash (see makeSet).
	set   []uint32
	shift uint8
}

// rangeKey is what a range predicts: with chained hashes its first and
// last hash fix every block between.
type rangeKey struct {
	w           WorkerID
	first, last uint64
	n           int
}

func keyOf(w WorkerID, hashes []uint64) rangeKey {
	return rangeKey{w: w, first: hashes[0], last: hashes[len(hashes)-1], n: len(hashes)}
}

// cover is a range covering a position of a request, which starts at
// start of it.
type cover struct {
	r     *pendingReq
	start int
}

type pendingAdded struct {
	id string
	r  *pendingReq
	at time.Time
}

// NewPending returns an empty set whose predictions live at most ttl.
func NewPending(ttl time.Duration) *Pending {
	return &Pending{ttl: ttl, nums: map[WorkerID]uint32{}, reqs: map[string]*pendingReq{}, same: map[rangeKey]*pendingReq{}}
}

// Add predicts hashes on w for request id, routed at now; an id already
// present is replaced (a retry moved it). Add keeps its own copy.
func (p *Pending) Add(id string, w WorkerID, hashes []uint64, now time.Time) {
	p.AddShared(id, w, append([]uint64(nil), hashes...), now)
}

// AddShared is Add keeping hashes itself, not a copy: the caller must not
// change them afterwards.
func (p *Pending) AddShared(id string, w WorkerID, hashes []uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(id)
	if len(hashes) == 0 {
		return
	}
	k := keyOf(w, hashes)
	if r := p.same[k]; r != nil && r.holes == nil {
		// The same blocks on the same worker, none confirmed yet: what
		// the new request predicts is what r does.
		r.refs++
		p.reqs[id] = r
		p.order.Push(pendingAdded{id: id, r: r, at: now})
		return
	}
	n, ok := p.nums[w]
	if !ok {
		if k := len(p.freeNums); k > 0 {
			n = p.freeNums[k-1]
			p.freeNums = p.freeNums[:k-1]
		} else {
			n = uint32(len(p.byNum))
			p.byNum = append(p.byNum, nil)
		}
		p.nums[w] = n
	}
	r := &pendingReq{w: w, num: n, refs: 1, at: len(p.byNum[n]), hashes: hashes, live: len(hashes)}
	p.byNum[n] = append(p.byNum[n], r)
	p.live += len(hashes)
	p.reqs[id] = r
	p.same[k] = r
	p.order.Push(pendingAdded{id: id, r: r, at: now})
	for off := 0; off < len(hashes); off += keyEvery {
		x := p.newNodeLocked(r, off)
		if v, added := p.keys.refOrAdd(hashes[off], x); !added {
			p.nodes[x].next = *v
			*v = x
		}
	}
}

func (p *Pending) newNodeLocked(r *pendingReq, off int) uint32 {
	nd := keyNode{r: r, off: uint32(off), next: noNode}
	if k := len(p.freeNodes); k > 0 {
		x := p.freeNodes[k-1]
		p.freeNodes = p.freeNodes[:k-1]
		p.nodes[x] = nd
		return x
	}
	p.nodes = append(p.nodes, nd)
	return uint32(len(p.nodes) - 1)
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
	if r.refs--; r.refs == 0 && r.hashes != nil {
		p.detachLocked(r)
	}
}

// detachLocked takes r out of the table and its worker's list, and drops
// its hashes: it predicts nothing any more (released by every request
// sharing it, or every block of it confirmed). Its entries in order stay
// until the TTL.
func (p *Pending) detachLocked(r *pendingReq) {
	if k := keyOf(r.w, r.hashes); p.same[k] == r {
		delete(p.same, k)
	}
	for off := 0; off < len(r.hashes); off += keyEvery {
		p.unkeyLocked(r, off)
	}
	p.live -= r.live
	r.hashes, r.holes, r.live, r.set = nil, nil, 0, nil
	list := p.byNum[r.num]
	last := list[len(list)-1]
	list[r.at], last.at = last, r.at
	list[len(list)-1] = nil
	p.byNum[r.num] = list[:len(list)-1]
	if len(list) == 1 {
		// Its worker has no request left, so no reference to its number.
		delete(p.nums, r.w)
		p.freeNums = append(p.freeNums, r.num)
	}
}

// unkeyLocked takes r's node keyed at its block off out of its chain.
func (p *Pending) unkeyLocked(r *pendingReq, off int) {
	h := r.hashes[off]
	v, s, at := p.keys.find(h)
	if v == nil {
		return
	}
	prev := noNode
	x := *v
	for x != noNode && (p.nodes[x].r != r || p.nodes[x].off != uint32(off)) {
		prev, x = x, p.nodes[x].next
	}
	if x == noNode {
		return
	}
	next := p.nodes[x].next
	switch {
	case prev != noNode:
		p.nodes[prev].next = next
	case next != noNode:
		*v = next
	default:
		p.keys.delFound(h, s, at)
	}
	p.nodes[x] = keyNode{}
	p.freeNodes = append(p.freeNodes, x)
}

// emptyLocked says whether nothing is predicted.
func (p *Pending) emptyLocked() bool { return p.live == 0 }

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
// index knows them now) or removed (they are gone): a hole in each of w's
// ranges holding one, found by the range's set of its blocks (a probe per
// hash and range); a range confirmed whole leaves the table and w's list,
// so the ranges probed are those of w's requests still in prefill.
func (p *Pending) Confirm(w WorkerID, hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() || len(hashes) == 0 {
		return
	}
	n, ok := p.nums[w]
	if !ok {
		return // nothing is predicted on w
	}
	list := p.byNum[n]
	for k := 0; k < len(list); k++ {
		r := list[k]
		if r.set == nil {
			r.makeSet()
		}
		for _, h := range hashes {
			r.confirm(h, &p.live)
		}
		if r.live == 0 {
			// Confirmed whole (the common end: its prefill stored it):
			// out of the lookups and of the next events' scans. The last
			// of the list takes its place.
			last := len(list) == 1
			p.detachLocked(r)
			if last {
				return // w's number is free, its list empty
			}
			list = p.byNum[n]
			k--
		}
	}
}

// makeSet makes r's set of its blocks' positions by hash, for Confirm:
// open addressing over at least twice the blocks, each slot a position
// plus one (0 empty). It is made at r's first event, off the route
// decision's path, and dropped with r.
func (r *pendingReq) makeSet() {
	size := 1 << bits.Len(uint(2*len(r.hashes)-1))
	r.set, r.shift = make([]uint32, size), uint8(64-bits.Len(uint(size-1)))
	mask := size - 1
	for i, h := range r.hashes {
		x := int(hashOf(h) >> r.shift)
		for r.set[x] != 0 {
			x = (x + 1) & mask
		}
		r.set[x] = uint32(i + 1)
	}
}

// confirm makes a hole of every block of r whose hash is h, counting it
// off r's and *live.
func (r *pendingReq) confirm(h uint64, live *int) {
	mask := len(r.set) - 1
	for x := int(hashOf(h) >> r.shift); r.set[x] != 0; x = (x + 1) & mask {
		if i := int(r.set[x] - 1); r.hashes[i] == h && !r.hole(i) {
			if r.holes == nil {
				r.holes = make([]uint64, (len(r.hashes)+63)/64)
			}
			r.holes[i/64] |= 1 << (i % 64)
			r.live--
			*live--
		}
	}
}

// hole says whether block i of r was confirmed.
func (r *pendingReq) hole(i int) bool {
	return r.holes != nil && r.holes[i/64]&(1<<(i%64)) != 0
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

// RemoveRank forgets every prediction on one rank of an instance (its
// cache was cleared).
func (p *Pending) RemoveRank(w WorkerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.reqs {
		if r.w == w {
			p.releaseLocked(id)
		}
	}
}

// coversLocked appends to dst the ranges predicting block n of hashes
// (live there, not a hole). Each has a key among the blocks n-keyEvery+1
// to n, looked up at once (their misses overlap).
func (p *Pending) coversLocked(dst []cover, hashes []uint64, n int) []cover {
	lo := max(0, n-keyEvery+1)
	var vals [keyEvery]uint32
	var oks [keyEvery]bool
	p.keys.getAll(hashes[lo:n+1], vals[:], oks[:])
	for j := lo; j <= n; j++ {
		if !oks[j-lo] {
			continue
		}
		for x := vals[j-lo]; x != noNode; x = p.nodes[x].next {
			nd := &p.nodes[x]
			start := j - int(nd.off)
			if i := n - start; i < len(nd.r.hashes) && nd.r.hashes[i] == hashes[n] && !nd.r.hole(i) {
				dst = append(dst, cover{r: nd.r, start: start})
			}
		}
	}
	return dst
}

// runEnd is the first position from pos on (a block r predicts) that r
// does not predict: its end, a hole, or a block of another prefix. Hashes
// are chained, so r and the request agree up to a point and differ after
// it: the point is found by bisection, and the first hole before it in
// r's bitmap a word at a time.
func (r *pendingReq) runEnd(hashes []uint64, start, pos int) int {
	i := pos - start
	end := min(len(r.hashes), len(hashes)-start)
	end = i + sort.Search(end-i, func(k int) bool { return r.hashes[i+k] != hashes[start+i+k] })
	if r.holes != nil {
		end = min(end, r.nextHole(i))
	}
	return start + end
}

// nextHole is the first hole of r at or after block i (len(r.hashes) if
// none).
func (r *pendingReq) nextHole(i int) int {
	for w := i / 64; w < len(r.holes); w++ {
		word := r.holes[w]
		if w == i/64 {
			word &^= 1<<(i%64) - 1
		}
		if word != 0 {
			return min(len(r.hashes), w*64+bits.TrailingZeros64(word))
		}
	}
	return len(r.hashes)
}

// reachLocked is how far worker number num's predictions run from pos,
// which covers lists the ranges predicting (the union of its ranges:
// where one ends another may go on).
func (p *Pending) reachLocked(num uint32, hashes []uint64, pos int, covers []cover) int {
	for {
		best := pos
		for _, c := range covers {
			// A range ending where the best does cannot go further (the
			// requests of a burst on one prefix have one range each).
			if c.r.num == num && c.start+len(c.r.hashes) > best {
				best = max(best, c.r.runEnd(hashes, c.start, pos))
			}
		}
		if best == pos || best >= len(hashes) {
			return best
		}
		pos = best
		p.sweep = p.coversLocked(p.sweep[:0], hashes, pos)
		covers = p.sweep
	}
}

// Extend returns how far w's cached prefix of hashes reaches when the
// blocks predicted there count too: from the first from blocks (what the
// index says w holds), on while the next block is predicted on w.
func (p *Pending) Extend(w WorkerID, hashes []uint64, from int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	num, ok := p.nums[w]
	if !ok || from >= len(hashes) {
		return from
	}
	return p.reachLocked(num, hashes, from, p.coversLocked(p.covers[:0], hashes, from))
}

// ExtendAll is Extend for several workers at once: overlaps[i] is what
// the index says workers[i] holds, and becomes its predicted reach. Most
// workers stop where the index does at one of a few positions: each
// position's ranges are looked up once (the first eight positions; later
// ones each time).
func (p *Pending) ExtendAll(workers []WorkerID, hashes []uint64, overlaps []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() {
		return
	}
	// A position's ranges are covers[from:to], the distinct workers they
	// are on on[won:wto] (one or two nearly always, however many ranges).
	type memo struct{ pos, from, to, won, wto int }
	var seen [8]memo
	memos := seen[:0]
	p.covers, p.on = p.covers[:0], p.on[:0]
	m := memo{pos: -1}
	for i, w := range workers {
		n := overlaps[i]
		if n >= len(hashes) {
			continue
		}
		if n != m.pos {
			k := 0
			for k < len(memos) && memos[k].pos != n {
				k++
			}
			if k < len(memos) {
				m = memos[k]
			} else {
				from, won := len(p.covers), len(p.on)
				p.covers = p.coversLocked(p.covers, hashes, n)
				for _, c := range p.covers[from:] {
					if !slices.ContainsFunc(p.on[won:], func(o onWorker) bool { return o.num == c.r.num }) {
						p.on = append(p.on, onWorker{w: c.r.w, num: c.r.num})
					}
				}
				m = memo{pos: n, from: from, to: len(p.covers), won: won, wto: len(p.on)}
				if len(memos) < cap(memos) {
					memos = append(memos, m)
				}
			}
		}
		if m.won == m.wto {
			continue // nothing predicted here: most workers
		}
		for _, o := range p.on[m.won:m.wto] {
			if o.w == w {
				overlaps[i] = p.reachLocked(o.num, hashes, n, p.covers[m.from:m.to])
				break
			}
		}
	}
}

// onWorker is a worker and its number.
type onWorker struct {
	w   WorkerID
	num uint32
}

// Empty says whether nothing is predicted (a cheap check before Extend).
func (p *Pending) Empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.emptyLocked()
}

// Len is the number of requests with predictions.
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// AppendWorkersOn appends to dst the workers block at of hashes is
// predicted on, each once: with no block of a request in the index, the
// only workers its predictions can credit (ExtendAll extends a worker from
// where the index stops, the first block for those with none).
func (p *Pending) AppendWorkersOn(dst []WorkerID, hashes []uint64, at int) []WorkerID {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.emptyLocked() || at < 0 || at >= len(hashes) {
		return dst
	}
	from := len(dst)
	p.covers = p.coversLocked(p.covers[:0], hashes, at)
	for _, c := range p.covers {
		if !slices.Contains(dst[from:], c.r.w) {
			dst = append(dst, c.r.w)
		}
	}
	return dst
}
