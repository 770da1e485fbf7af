// Package index is the router's view of every worker's KV cache: which
// workers hold which blocks, keyed by sequence hash. A block's sequence hash
// chains its whole prefix (see pkg/kvhash), so a flat hash table answers
// "how many leading blocks of this request does each worker hold" by walking
// the request's hashes in order and narrowing the set of workers that still
// match: no tree is needed, and a lookup costs one table probe per block.
//
// The index is fed by KV events (stored, removed, cleared) in KV mode, or by
// the router's own decisions in approximate mode (see Approx). It is safe for
// concurrent use: lookups share a read lock, updates take the write lock.
package index

import (
	"math/bits"
	"slices"
	"sort"
	"sync"
)

// WorkerID names one KV cache: a worker instance and its data-parallel rank.
type WorkerID struct {
	Instance uint64
	DPRank   uint32
}

// Overlap is how many leading blocks of a request one worker holds, on
// any tier.
type Overlap struct {
	Worker WorkerID
	Blocks int
	// Lower is how many of those blocks it holds on each tier below GPU
	// (Lower[t-1] for tier t); the rest are on GPU.
	Lower [LowerTiers]int32
}

// EventResult says what Apply did with an event.
type EventResult int

const (
	// Applied means the event was new and in order.
	Applied EventResult = iota
	// Duplicate means the event id was at or below the worker's last one;
	// the event was dropped, so a replay or a redelivery changes nothing.
	Duplicate
	// Gap means events were missing before this one; it was applied, and
	// the worker's view may be incomplete until its next clear.
	Gap
)

// A holder value names one worker slot directly, or, tagged, indexes a
// sorted list of slots (a few holders) or a bitset of slots (many holders).
// Lists turn into bitsets past maxList holders and back below minSet, so
// that lookups intersect in O(workers/64) per block however many hold it.
//
// lowerTag, set beside either form, says that some holder of the hash
// holds it on a lower tier than GPU: the tier table (see tiers.go) names
// which. A lookup probes that table only for the hashes so marked, so an
// index without lower tiers pays nothing for them.
const (
	listTag  = 1 << 31
	setTag   = 1 << 30
	lowerTag = 1 << 29
	slotMask = lowerTag - 1
	maxList  = 32
	minSet   = 16
)

// worker is one cache's bookkeeping. Its blocks are not kept here: the
// holders table answers membership, which halves the memory per entry.
// Forgetting them all (the worker leaves or clears its cache) retires its
// slot instead: lookups skip the slot at once, and the table's entries
// naming it are reclaimed a shard at a time (see reclaimStepLocked), as
// a scan of the whole table under the write lock stalled every route
// decision for tens of milliseconds at 2M entries. A worker that clears
// its cache carries on in a new slot.
type worker struct {
	id        WorkerID
	slot      uint32
	blocks    int
	lastEvent uint64
	// lower counts its blocks held on each tier below GPU (see tiers.go).
	lower [LowerTiers]int
	// removes has bit t set once the worker has evicted a block from tier
	// t: a tier without removals is store-only, and its blocks age out
	// (see Index.SetTierTTL).
	removes uint8
}

// Index maps sequence hashes to the workers holding them.
type Index struct {
	mu      sync.RWMutex
	workers []*worker // dense slot -> worker; nil when free
	// ids is each slot's worker id, in one array: what a lookup reports
	// for up to every worker, without a pointer to follow per worker.
	ids   []WorkerID
	slots map[WorkerID]uint32
	free  []uint32
	// holders maps a sequence hash to its holder: a worker slot, or
	// listTag|i for lists[i] when several workers hold it.
	holders   table[uint32]
	lists     [][]uint32
	freeLists []uint32
	sets      [][]uint64
	freeSets  []uint32
	// setSlab is the slab new sets' words are cut from (see carveSet).
	setSlab []uint64
	entries int // (block, worker) pairs
	// lowerEntries counts the pairs held on each tier below GPU.
	lowerEntries [LowerTiers]int
	// dead is the bitset of retired slots whose entries are not all
	// reclaimed yet: lookups leave them out, and they are not reused.
	dead []uint64
	// reclaim is the pass reclaiming them, if one runs.
	reclaim reclaimPass
	// tiers is where the (block, worker) pairs held on a lower tier than
	// GPU say so (see tiers.go).
	tiers tierTable
	// places counts slot placements; placedAt is each slot's count when
	// its worker was placed there (see Grouped).
	places   uint64
	placedAt []uint64
	// maxRank is the highest data-parallel rank ever placed: the ranks a
	// Grouped answer asked for any rank of an instance looks up.
	maxRank uint32
}

// reclaimPass reclaims the entries of the slots retired when it started
// (mask): it cleans shard after shard, one per write (see
// reclaimStepLocked), and frees the slots when it has cleaned them all.
// Slots retired meanwhile wait for the next pass.
type reclaimPass struct {
	active bool
	mask   []uint64
	shard  int // next shard to clean; -1: the zero key first
	keys   []uint64
}

// New returns an empty index.
func New() *Index {
	return &Index{slots: map[WorkerID]uint32{}}
}

// slotLocked returns the worker's dense slot, creating it when asked.
func (x *Index) slotLocked(id WorkerID, create bool) (uint32, *worker) {
	if s, ok := x.slots[id]; ok {
		return s, x.workers[s]
	}
	if !create {
		return 0, nil
	}
	w := &worker{id: id}
	x.placeLocked(w)
	return w.slot, w
}

// placeLocked gives w a free slot (a reclaimed one, or a new one).
func (x *Index) placeLocked(w *worker) {
	var s uint32
	if n := len(x.free); n > 0 {
		s = x.free[n-1]
		x.free = x.free[:n-1]
		x.workers[s], x.ids[s] = w, w.id
	} else {
		s = uint32(len(x.workers))
		x.workers = append(x.workers, w)
		x.ids = append(x.ids, w.id)
	}
	w.slot = s
	x.slots[w.id] = s
	x.placedLocked(s, w)
	// What a Grouped answer from before this placement says of slot s
	// is not w's (see Grouped.Append).
	x.places++
	for len(x.placedAt) <= int(s) {
		x.placedAt = append(x.placedAt, 0)
	}
	x.placedAt[s] = x.places
	x.maxRank = max(x.maxRank, w.id.DPRank)
}

// retireLocked takes w out of its slot with every block it held, in O(1):
// the slot is dead until its entries are reclaimed. w has no slot after.
func (x *Index) retireLocked(w *worker) {
	s := w.slot
	x.workers[s], x.ids[s] = nil, WorkerID{}
	delete(x.slots, w.id)
	x.entries -= w.blocks
	w.blocks = 0
	for t := range w.lower {
		x.lowerEntries[t] -= w.lower[t]
		w.lower[t] = 0
	}
	x.dead = setBit(x.dead, s)
	if x.holders.len() <= reclaimAtOnce {
		// A small table is reclaimed at once: as cheap as a few steps.
		for x.reclaimStepLocked() {
		}
	}
}

// reclaimAtOnce is the table size (distinct hashes) up to which retired
// slots are reclaimed at once rather than a shard per write: about a
// shard's worth of a 2M-entry table's work per step. A variable for tests.
var reclaimAtOnce = 1 << 14

// unlock ends a write: it reclaims a step of retired slots' entries first,
// while there are some.
func (x *Index) unlock() {
	if x.reclaim.active || len(x.dead) > 0 {
		x.reclaimStepLocked()
	}
	x.sweepStepLocked()
	x.mu.Unlock()
}

// reclaimShards is how many of the table's shards a step cleans: about
// 2,000 entries at 2M, microseconds. A variable for tests.
var reclaimShards = 1

// reclaimStepLocked cleans reclaimShards shards of the table of the current pass's
// slots (starting a pass if slots wait and none runs), and frees those
// slots once every shard is clean. It reports whether work remains.
func (x *Index) reclaimStepLocked() bool {
	r := &x.reclaim
	if !r.active {
		if !anyBit(x.dead) {
			x.dead = x.dead[:0]
			return false
		}
		r.active, r.shard = true, -1
		r.mask = append(r.mask[:0], x.dead...)
	}
	r.keys = r.keys[:0]
	collect := func(h uint64, cur uint32) {
		if x.holdsAny(cur&^lowerTag, r.mask) {
			r.keys = append(r.keys, h)
		}
	}
	end := min(r.shard+reclaimShards, tableShards)
	for ; r.shard < end; r.shard++ {
		if r.shard < 0 {
			if x.holders.hasZero {
				collect(0, x.holders.zero)
			}
			continue
		}
		for _, e := range x.holders.shards[r.shard].slots {
			if e.key != 0 {
				collect(e.key, e.val)
			}
		}
	}
	// Dropped after the walk: dropping moves a shard's entries.
	var slots []uint32
	for _, h := range r.keys {
		cur, _ := x.holders.get(h)
		slots = x.slotsOf(cur&^lowerTag, slots[:0]) // a copy: dropping changes lists in place
		for _, s := range slots {
			if int(s/64) < len(r.mask) && r.mask[s/64]&(1<<(s%64)) != 0 {
				x.dropHolderLocked(s, h)
			}
		}
	}
	if r.shard < tableShards {
		return true
	}
	// Every entry is clean: the pass's slots are free.
	for wi, word := range r.mask {
		x.dead[wi] &^= word
		for word != 0 {
			x.free = append(x.free, uint32(wi*64+bits.TrailingZeros64(word)))
			word &= word - 1
		}
	}
	r.active = false
	return anyBit(x.dead)
}

func anyBit(b []uint64) bool {
	for _, w := range b {
		if w != 0 {
			return true
		}
	}
	return false
}

// holdsAny reports whether a holder value includes a slot of mask.
func (x *Index) holdsAny(cur uint32, mask []uint64) bool {
	switch {
	case cur&listTag != 0:
		for _, s := range x.lists[cur&^listTag] {
			if int(s/64) < len(mask) && mask[s/64]&(1<<(s%64)) != 0 {
				return true
			}
		}
		return false
	case cur&setTag != 0:
		b := x.sets[cur&^setTag]
		for wi := range min(len(b), len(mask)) {
			if b[wi]&mask[wi] != 0 {
				return true
			}
		}
		return false
	default:
		return int(cur/64) < len(mask) && mask[cur/64]&(1<<(cur%64)) != 0
	}
}

// Apply runs one event of a worker, in the order of its event ids: an id at
// or below the last one applied is a duplicate and is dropped. Event id 0
// means "unnumbered" and is always applied.
func (x *Index) Apply(id WorkerID, eventID uint64, fn func(tx Tx)) EventResult {
	x.mu.Lock()
	defer x.unlock()
	_, w := x.slotLocked(id, true)
	res := Applied
	if eventID != 0 {
		switch {
		case eventID <= w.lastEvent:
			return Duplicate
		case w.lastEvent != 0 && eventID > w.lastEvent+1:
			res = Gap
		}
		w.lastEvent = eventID
	}
	fn(Tx{x: x, w: w})
	return res
}

// Tx is the view of one worker inside Apply.
type Tx struct {
	x *Index
	w *worker
}

// Store records that the worker holds these blocks on GPU.
func (t Tx) Store(hashes []uint64) { t.StoreOn(hashes, TierGPU) }

// StoreOn records that the worker holds these blocks on tier; a block it
// held on another tier moves there.
func (t Tx) StoreOn(hashes []uint64, tier Tier) {
	tier = tier.valid()
	for _, h := range hashes {
		t.x.addLocked(t.w.slot, t.w, h, tier)
	}
}

// Remove records that the worker no longer holds these blocks, on
// whatever tier it held them.
func (t Tx) Remove(hashes []uint64) {
	for _, h := range hashes {
		t.x.removeLocked(t.w.slot, t.w, h, TierGPU, true)
	}
}

// RemoveFrom records that the worker evicted these blocks from tier: a
// block it holds on another tier stays.
func (t Tx) RemoveFrom(hashes []uint64, tier Tier) {
	tier = tier.valid()
	t.w.removes |= 1 << tier
	t.x.evictedLocked(t.w.slot, tier)
	for _, h := range hashes {
		t.x.removeLocked(t.w.slot, t.w, h, tier, false)
	}
}

// Clear drops every block of the worker, in O(1): its slot retires (see
// worker) and it goes on in a new one.
func (t Tx) Clear() {
	if t.w.blocks == 0 {
		return
	}
	t.x.retireLocked(t.w)
	t.x.placeLocked(t.w)
}

// holdsSlot is holds for a lookup's walk: a plain slot first, and a
// list (at most maxList slots) scanned without a closure.
func (x *Index) holdsSlot(cur, s uint32) bool {
	switch {
	case cur&(listTag|setTag) == 0:
		return cur == s
	case cur&listTag != 0:
		for _, v := range x.lists[cur&^listTag] {
			if v >= s {
				return v == s
			}
		}
		return false
	default:
		b := x.sets[cur&^setTag]
		return int(s/64) < len(b) && b[s/64]&(1<<(s%64)) != 0
	}
}

// holds reports whether a holder value includes slot s.
func (x *Index) holds(cur, s uint32) bool {
	switch {
	case cur&listTag != 0:
		l := x.lists[cur&^listTag]
		i := sort.Search(len(l), func(i int) bool { return l[i] >= s })
		return i < len(l) && l[i] == s
	case cur&setTag != 0:
		b := x.sets[cur&^setTag]
		return int(s/64) < len(b) && b[s/64]&(1<<(s%64)) != 0
	default:
		return cur == s
	}
}

// Store is Apply with one unnumbered store.
func (x *Index) Store(id WorkerID, hashes []uint64) {
	x.Apply(id, 0, func(tx Tx) { tx.Store(hashes) })
}

// Remove drops blocks of a worker; a worker the index does not know is
// left unknown.
func (x *Index) Remove(id WorkerID, hashes []uint64) {
	x.mu.Lock()
	defer x.unlock()
	_, w := x.slotLocked(id, false)
	if w == nil {
		return
	}
	Tx{x: x, w: w}.Remove(hashes)
}

// RemoveWorker forgets a worker and every block it held: it left the
// registry, so its cache is gone.
func (x *Index) RemoveWorker(id WorkerID) {
	x.mu.Lock()
	defer x.unlock()
	_, w := x.slotLocked(id, false)
	if w == nil {
		return
	}
	if w.blocks > 0 {
		x.retireLocked(w) // in O(1); see worker
		return
	}
	// No entry names the slot: free at once.
	x.workers[w.slot], x.ids[w.slot] = nil, WorkerID{}
	delete(x.slots, id)
	x.free = append(x.free, w.slot)
}

// RemoveInstance forgets every data-parallel rank of an instance.
func (x *Index) RemoveInstance(instance uint64) {
	for _, id := range x.Workers() {
		if id.Instance == instance {
			x.RemoveWorker(id)
		}
	}
}

// addLocked records that slot s (worker w) holds h on tier.
func (x *Index) addLocked(s uint32, w *worker, h uint64, tier Tier) {
	raw, ok := x.holders.get(h)
	flag, cur := raw&lowerTag, raw&^lowerTag
	if ok && x.holds(cur, s) {
		x.setTierLocked(s, w, h, raw, tier)
		return
	}
	w.blocks++
	x.entries++
	switch {
	case !ok:
		x.holders.set(h, s)
	case cur&listTag != 0:
		i := cur &^ listTag
		l := insertSorted(x.lists[i], s)
		if len(l) > maxList {
			x.holders.set(h, flag|setTag|x.newSet(l))
			x.lists[i] = l[:0]
			x.freeLists = append(x.freeLists, i)
			break
		}
		x.lists[i] = l
	case cur&setTag != 0:
		i := cur &^ setTag
		b := x.sets[i]
		if int(s/64) >= cap(b) {
			// A worker in a slot past the set's room: the set moves to
			// the slab's end, where the other sets of its prefix move as
			// the worker stores them.
			b = append(x.carveSet(max((len(x.workers)+63)/64, int(s/64)+1)), b...)
		}
		x.sets[i] = setBit(b, s)
	default:
		a, b := cur, s
		if b < a {
			a, b = b, a
		}
		x.holders.set(h, flag|listTag|x.newList(a, b))
	}
	if tier != TierGPU {
		raw, _ = x.holders.get(h)
		x.setTierLocked(s, w, h, raw, tier)
	}
}

func insertSorted(l []uint32, s uint32) []uint32 {
	i := len(l)
	for i > 0 && l[i-1] > s {
		i--
	}
	l = append(l, 0)
	copy(l[i+1:], l[i:])
	l[i] = s
	return l
}

func setBit(b []uint64, s uint32) []uint64 {
	for int(s/64) >= len(b) {
		b = append(b, 0)
	}
	b[s/64] |= 1 << (s % 64)
	return b
}

func (x *Index) newList(a, b uint32) uint32 {
	if n := len(x.freeLists); n > 0 {
		i := x.freeLists[n-1]
		x.freeLists = x.freeLists[:n-1]
		x.lists[i] = append(x.lists[i][:0], a, b)
		return i
	}
	x.lists = append(x.lists, []uint32{a, b})
	return uint32(len(x.lists) - 1)
}

func (x *Index) newSet(slots []uint32) uint32 {
	var b []uint64
	var i uint32
	if n := len(x.freeSets); n > 0 {
		i = x.freeSets[n-1]
		x.freeSets = x.freeSets[:n-1]
		b = x.sets[i][:0]
	} else {
		i = uint32(len(x.sets))
		x.sets = append(x.sets, nil)
		b = x.carveSet(max((len(x.workers)+63)/64, int(slots[len(slots)-1]/64)+1))
	}
	for _, s := range slots {
		b = setBit(b, s)
	}
	x.sets[i] = b
	return i
}

// carveSet returns an empty bitset with room for n words, cut from the
// current slab of set words. The blocks of a shared prefix become sets
// together (the event storing them on the worker past maxList holders), so
// their words sit side by side, a few sets a cache line, where a separate
// allocation each scattered them among the index's other small objects: a
// lookup intersecting a prefix's sets reads a line per few blocks, not one
// or two per block. A set needing more room later is cut again (addLocked).
func (x *Index) carveSet(n int) []uint64 {
	if cap(x.setSlab)-len(x.setSlab) < n {
		x.setSlab = make([]uint64, 0, max(setSlabWords, n))
	}
	l := len(x.setSlab)
	x.setSlab = x.setSlab[:l+n]
	return x.setSlab[l : l : l+n]
}

// setSlabWords is the size of a slab of set words (4 KiB).
const setSlabWords = 512

// removeLocked records that slot s (worker w) no longer holds h on tier
// (on any tier, with any).
func (x *Index) removeLocked(s uint32, w *worker, h uint64, tier Tier, any bool) {
	raw, ok := x.holders.get(h)
	if !ok || !x.holds(raw&^lowerTag, s) {
		return
	}
	if !any && x.tierOfLocked(raw, s, h) != tier {
		return
	}
	w.blocks--
	x.entries--
	x.dropHolderLocked(s, h)
}

// dropHolderLocked removes slot s from h's holders; the caller keeps the
// worker's own set and the entry count.
func (x *Index) dropHolderLocked(s uint32, h uint64) {
	raw, ok := x.holders.get(h)
	if !ok {
		return
	}
	flag, cur := raw&lowerTag, raw&^lowerTag
	if flag != 0 {
		// Its tier goes with it; the flag stays while another slot holds
		// h on a lower tier.
		if !x.dropTierLocked(s, h) {
			flag = 0
			x.holders.set(h, cur)
		}
	}
	switch {
	case cur&listTag != 0:
		i := cur &^ listTag
		l := x.lists[i]
		for j, v := range l {
			if v == s {
				l = append(l[:j], l[j+1:]...)
				break
			}
		}
		if len(l) == 1 {
			x.holders.set(h, flag|l[0])
			x.lists[i] = l[:0]
			x.freeLists = append(x.freeLists, i)
			return
		}
		x.lists[i] = l
	case cur&setTag != 0:
		i := cur &^ setTag
		b := x.sets[i]
		if int(s/64) < len(b) {
			b[s/64] &^= 1 << (s % 64)
		}
		n := 0
		for _, word := range b {
			n += bits.OnesCount64(word)
		}
		if n >= minSet {
			return
		}
		l := make([]uint32, 0, maxList)
		for wi, word := range b {
			for word != 0 {
				l = append(l, uint32(wi*64+bits.TrailingZeros64(word)))
				word &= word - 1
			}
		}
		x.sets[i] = b[:0]
		x.freeSets = append(x.freeSets, i)
		if len(x.freeLists) > 0 {
			li := x.freeLists[len(x.freeLists)-1]
			x.freeLists = x.freeLists[:len(x.freeLists)-1]
			x.lists[li] = l
			x.holders.set(h, flag|listTag|li)
		} else {
			x.lists = append(x.lists, l)
			x.holders.set(h, flag|listTag|uint32(len(x.lists)-1))
		}
	default:
		if cur == s {
			x.holders.del(h)
		}
	}
}

// firstBatch is the size of a lookup's first batch of blocks (see
// AppendOverlaps).
const firstBatch = 16

// Overlaps returns, for every worker holding at least the first block, how
// many leading blocks of hashes it holds. Workers holding none are absent.
func (x *Index) Overlaps(hashes []uint64) []Overlap {
	return x.AppendOverlaps(nil, hashes)
}

// AppendOverlaps is Overlaps appending to dst, for callers that reuse it.
func (x *Index) AppendOverlaps(dst []Overlap, hashes []uint64) []Overlap {
	if len(hashes) == 0 {
		return dst
	}
	x.mu.RLock()
	var lc *lowerCounts
	dst = x.appendOverlapsLocked(dst, hashes, &lc, nil)
	x.mu.RUnlock()
	if lc != nil {
		countsPool.Put(lc)
	}
	return dst
}

// appendOverlapsLocked is AppendOverlaps under the read lock; *lc counts
// the lower tiers' blocks once a block held below GPU is met. With g, it
// is Lookup's walk: the workers leaving at a depth in numbers are kept in
// g as a group (see Grouped), and g counts every depth's leavers.
func (x *Index) appendOverlapsLocked(dst []Overlap, hashes []uint64, lc **lowerCounts, g *Grouped) []Overlap {
	// A request whose first block nobody holds ends at depth 0, in the
	// first batch (a probe of that block alone first was a round trip to
	// memory before the batch's).
	//
	// active is the bitset of slots holding every block so far; at each
	// block, the slots that fall out are reported with the depth reached.
	words := (len(x.workers) + 63) / 64
	var buf [2 * 32]uint64
	var active, next []uint64
	switch {
	case words <= 32:
		active, next = buf[:words], buf[32:32+words]
	case g != nil:
		// A Grouped keeps its walk's bitsets for the next lookup.
		g.scratch = slices.Grow(g.scratch[:0], 2*words)[:2*words]
		active, next = g.scratch[:words], g.scratch[words:]
	default:
		active, next = make([]uint64, words), make([]uint64, words)
	}
	// count is how many slots active holds: each block's intersection
	// counts its result, so that those falling out are looked for only at
	// the depths some do (a bitset's scan per block was most of a walk
	// over a prompt thousands of workers share).
	count := 0
	for i := range active {
		active[i] = ^uint64(0)
		if i < len(x.dead) {
			active[i] = ^x.dead[i] // retired slots hold nothing
		}
		count += bits.OnesCount64(active[i])
	}
	// Blocks are looked up in batches whose misses overlap; a batch is
	// one round trip to memory, whatever its size up to what the core
	// keeps in flight. They double from firstBatch, so that a request
	// matched for d blocks takes about log2(d/firstBatch) round trips
	// and looks up at most twice the blocks it needed (or firstBatch).
	var vals [batch]uint32
	var oks [batch]bool
	from, to, size := 0, 0, firstBatch
	for depth := range hashes {
		if depth == to {
			from, to = depth, min(depth+size, len(hashes))
			x.holders.getAll(hashes[from:to], vals[:], oks[:])
			x.touchTiers(hashes[from:to], vals[:], oks[:])
			size = min(2*size, batch)
		}
		live, one := 0, 0
		if v := vals[depth-from]; oks[depth-from] {
			live, one = x.intersect(next, active, v&^lowerTag)
			if v&lowerTag != 0 {
				// Aged entries leave next.
				*lc = x.countLower(*lc, next, hashes[depth])
				live, one = countWords(next)
			}
		} else {
			clearWords(next)
		}
		if gone := count - live; gone > 0 && depth > 0 && (g == nil || !g.leave(depth, active, next, gone)) {
			for wi := range active {
				if w := active[wi] &^ next[wi]; w != 0 {
					dst = x.appendLeavers(dst, wi, w, depth, *lc)
				}
			}
		}
		active, next, count = next, active, live
		switch live {
		case 0:
			return dst
		case 1:
			// One worker left (a conversation past its shared system
			// prompt, most of a deep match): follow it alone, a compare
			// per block instead of a bitset's intersection and scan.
			s := uint32(one)
			lower := (*lc).of(one)
			for depth++; depth < len(hashes); depth++ {
				if depth == to {
					from, to = depth, min(depth+size, len(hashes))
					x.holders.getAll(hashes[from:to], vals[:], oks[:])
					x.touchTiers(hashes[from:to], vals[:], oks[:])
					size = min(2*size, batch)
				}
				v := vals[depth-from]
				if !oks[depth-from] || !x.holdsSlot(v&^lowerTag, s) {
					break
				}
				if v&lowerTag != 0 {
					t, aged := x.slotTier(lc, s, hashes[depth])
					if aged {
						break
					}
					if t != TierGPU {
						lower[t-1]++
					}
				}
			}
			if g != nil {
				g.level(depth, 1)
			}
			return append(dst, Overlap{Worker: x.ids[s], Blocks: depth, Lower: lower})
		}
	}
	if g != nil {
		g.level(len(hashes), count)
	}
	for wi, word := range active {
		if word != 0 {
			dst = x.appendLeavers(dst, wi, word, len(hashes), *lc)
		}
	}
	return dst
}

// snapLeavers is how many slots of a word leaving a walk at once have
// their lower-tier counters read by one snapWord rather than one by one.
const snapLeavers = 8

// appendLeavers appends the overlaps of word wi's slots in w, which hold
// blocks blocks of the request, with their counts of them per lower tier.
func (x *Index) appendLeavers(dst []Overlap, wi int, w uint64, blocks int, lc *lowerCounts) []Overlap {
	if lc != nil && bits.OnesCount64(w) >= snapLeavers {
		lc.snapWord(wi)
		for ; w != 0; w &= w - 1 {
			b := bits.TrailingZeros64(w)
			dst = append(dst, Overlap{Worker: x.ids[wi*64+b], Blocks: blocks, Lower: lc.ofSnapped(wi, b)})
		}
		return dst
	}
	for ; w != 0; w &= w - 1 {
		s := wi*64 + bits.TrailingZeros64(w)
		dst = append(dst, Overlap{Worker: x.ids[s], Blocks: blocks, Lower: lc.of(s)})
	}
	return dst
}

// intersect writes active ∩ holders(cur) into next, and returns how many
// slots that is and one of them (the last, in slot order).
func (x *Index) intersect(next, active []uint64, cur uint32) (live, one int) {
	switch {
	case cur&listTag != 0:
		clearWords(next)
		for _, s := range x.lists[cur&^listTag] {
			if active[s/64]&(1<<(s%64)) != 0 {
				next[s/64] |= 1 << (s % 64)
				live, one = live+1, int(s)
			}
		}
	case cur&setTag != 0:
		b := x.sets[cur&^setTag]
		n := min(len(b), len(next))
		for wi := range n {
			w := active[wi] & b[wi]
			next[wi] = w
			if w != 0 {
				live += bits.OnesCount64(w)
				one = wi*64 + 63 - bits.LeadingZeros64(w)
			}
		}
		clearWords(next[n:])
	default:
		clearWords(next)
		if active[cur/64]&(1<<(cur%64)) != 0 {
			next[cur/64] |= 1 << (cur % 64)
			live, one = 1, int(cur)
		}
	}
	return live, one
}

// countWords returns how many slots b holds and one of them (the last).
func countWords(b []uint64) (live, one int) {
	for wi, w := range b {
		if w != 0 {
			live += bits.OnesCount64(w)
			one = wi*64 + 63 - bits.LeadingZeros64(w)
		}
	}
	return live, one
}

// clearWords zeroes a lookup's bitset: a word or two at a hundred
// workers, where clear's call to memclr cost more than the stores, once
// per block of every lookup.
func clearWords(b []uint64) {
	for i := 0; i < len(b); i++ {
		b[i] = 0
	}
}

// Workers lists the workers the index knows.
func (x *Index) Workers() []WorkerID {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]WorkerID, 0, len(x.slots))
	for id := range x.slots {
		out = append(out, id)
	}
	return out
}

// Blocks reports how many blocks a worker holds.
func (x *Index) Blocks(id WorkerID) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, w := x.slotLocked(id, false)
	if w == nil {
		return 0
	}
	return w.blocks
}

// Holds reports whether a worker holds a block.
func (x *Index) Holds(id WorkerID, h uint64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s, w := x.slotLocked(id, false)
	if w == nil {
		return false
	}
	cur, ok := x.holders.get(h)
	return ok && x.holds(cur&^lowerTag, s)
}

// Stats describes the index's size.
type Stats struct {
	// Blocks is the number of distinct sequence hashes held by anyone. In
	// a large index it also counts, until they are reclaimed (see worker),
	// hashes that only a worker that has left or cleared its cache held.
	Blocks int
	// Entries is the number of (block, worker) pairs.
	Entries int
	// Workers is the number of workers known.
	Workers int
}

// Stats reports the index's size.
func (x *Index) Stats() Stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return Stats{Blocks: x.holders.len(), Entries: x.entries, Workers: len(x.slots)}
}

// WorkerDump is one worker's blocks, for snapshots.
type WorkerDump struct {
	ID        WorkerID
	LastEvent uint64
	Hashes    []uint64
	// Tiers is each hash's tier, in the same order; nil when every one is
	// on GPU.
	Tiers []Tier
}

// Dump copies every worker's blocks and last event id.
//
// It walks the table a few shards at a time, each under the read lock of
// its own: a walk of a 2M-entry index takes tens of milliseconds, and held
// at once it stalled every route decision behind the first KV event that
// came meanwhile (a writer waiting on the lock holds new readers back).
// Events applied during the walk may show in part. Each worker's last
// event id is read before the walk, so a replay from it (what a restored
// router does with the stream) applies every such event again, in order,
// and a block ends as the last event touching it left it, whatever the
// walk caught. Workers that join during the walk are left to the replay;
// one that leaves keeps what was dumped before it left.
func (x *Index) Dump() []WorkerDump {
	x.mu.RLock()
	// start is the workers as the walk began: a slot counts for them only
	// while it still holds the same worker.
	start := slices.Clone(x.workers)
	out := make([]WorkerDump, 0, len(x.slots))
	for _, w := range start {
		if w != nil {
			out = append(out, WorkerDump{ID: w.id, LastEvent: w.lastEvent, Hashes: make([]uint64, 0, w.blocks)})
		}
	}
	bySlot := make([]*WorkerDump, len(start))
	n := 0
	for s, w := range start {
		if w != nil {
			bySlot[s] = &out[n]
			n++
		}
	}
	var one [1]uint32
	add := func(h uint64, raw uint32) {
		for _, s := range x.slotsOf(raw&^lowerTag, one[:0]) {
			if int(s) < len(start) && start[s] != nil && x.workers[s] == start[s] {
				d := bySlot[s]
				if t := x.tierOfLocked(raw, s, h); t != TierGPU || d.Tiers != nil {
					if d.Tiers == nil {
						d.Tiers = make([]Tier, len(d.Hashes), cap(d.Hashes))
					}
					d.Tiers = append(d.Tiers, t)
				}
				d.Hashes = append(d.Hashes, h)
			}
		}
	}
	if x.holders.hasZero {
		add(0, x.holders.zero)
	}
	x.mu.RUnlock()
	for si := 0; si < tableShards; si += dumpShards {
		if dumpHook != nil {
			dumpHook()
		}
		x.mu.RLock()
		for i := si; i < si+dumpShards; i++ {
			for _, e := range x.holders.shards[i].slots {
				if e.key != 0 {
					add(e.key, e.val)
				}
			}
		}
		x.mu.RUnlock()
	}
	return out
}

// dumpShards is how many of the table's shards Dump walks per hold of the
// read lock: about 20,000 slots at 2M entries, tens of microseconds.
const dumpShards = 4

// dumpHook, when set (by tests), runs before each of Dump's steps.
var dumpHook func()

// slotsOf lists the slots of a holder value.
func (x *Index) slotsOf(cur uint32, dst []uint32) []uint32 {
	switch {
	case cur&listTag != 0:
		return append(dst, x.lists[cur&^listTag]...)
	case cur&setTag != 0:
		for wi, word := range x.sets[cur&^setTag] {
			for word != 0 {
				dst = append(dst, uint32(wi*64+bits.TrailingZeros64(word)))
				word &= word - 1
			}
		}
		return dst
	default:
		return append(dst, cur)
	}
}

// Restore adds dumped workers' blocks and last event ids, so that replaying
// events the dump already covers changes nothing.
func (x *Index) Restore(dumps []WorkerDump) {
	x.mu.Lock()
	defer x.unlock()
	for _, d := range dumps {
		s, w := x.slotLocked(d.ID, true)
		for i, h := range d.Hashes {
			x.addLocked(s, w, h, tierAt(d.Tiers, i))
		}
		w.lastEvent = max(w.lastEvent, d.LastEvent)
	}
}

// Reset makes a worker's blocks exactly hashes, current to event lastEvent:
// a rebuild from the worker's own state (GetKvState), after which events
// up to lastEvent are duplicates. tiers is each hash's tier (nil: all GPU).
func (x *Index) Reset(id WorkerID, lastEvent uint64, hashes []uint64, tiers []Tier) {
	x.mu.Lock()
	defer x.unlock()
	_, w := x.slotLocked(id, true)
	tx := Tx{x: x, w: w}
	tx.Clear()
	s := w.slot
	for i, h := range hashes {
		x.addLocked(s, w, h, tierAt(tiers, i).valid())
	}
	w.lastEvent = lastEvent
}

// LastEvent is the last event id applied for a worker; 0 when unknown.
func (x *Index) LastEvent(id WorkerID) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s, ok := x.slots[id]; ok {
		return x.workers[s].lastEvent
	}
	return 0
}
