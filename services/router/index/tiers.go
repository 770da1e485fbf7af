package index

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"time"
)

// Tier is where a worker holds a block: GPU memory, or a lower tier its
// engine offloads to and copies back from on a hit (host memory, disk, or
// a medium the publisher named and the router does not know).
//
// The index keeps one tier per (block, worker): a store on a tier moves a
// block the worker held on another (a block offloaded from GPU to host is
// one store on TierCPU, not a loss), and a removal from a tier drops the
// block only if the worker holds it there. A lookup reports, per worker,
// how many blocks of its cached prefix are on each lower tier (a prefix
// may run on GPU and then on host memory, as engines evict the tails of
// prefixes first); the prefix is what the worker holds on any tier.
type Tier uint8

// The tiers, fastest first. Their order is the wire's (KvMedium) less one
// for GPU, which unspecified means too.
const (
	TierGPU Tier = iota
	TierCPU
	TierDisk
	TierUnknown
)

// LowerTiers is how many tiers lie below GPU: Overlap.Lower's length.
const LowerTiers = 3

// String names the tier as the metrics do.
func (t Tier) String() string {
	switch t {
	case TierGPU:
		return "gpu"
	case TierCPU:
		return "cpu"
	case TierDisk:
		return "disk"
	default:
		return "unknown"
	}
}

// valid is t, or TierUnknown for a value out of range.
func (t Tier) valid() Tier {
	if t > TierUnknown {
		return TierUnknown
	}
	return t
}

// tierAt is tiers[i], GPU when tiers is nil or short.
func tierAt(tiers []Tier, i int) Tier {
	if i < len(tiers) {
		return tiers[i]
	}
	return TierGPU
}

// tierTable keeps the (block, worker) pairs held below GPU: the holders
// table marks their hashes with lowerTag, and this table maps each such
// hash to the slots holding it on a lower tier, with the tier and when
// the worker stored it there (seconds since the index's epoch, for the
// TTL of store-only tiers). A value is one entry inline (bit 31 clear:
// slot in bits 0-28, tier in 29-30, time in 32-63) or listTag|i for
// lists[i] when several slots hold the hash below GPU.
type tierTable struct {
	t         table[uint64]
	lists     []tierList
	freeLists []uint32
	// storeOnly[t-1] has bit s set when slot s's worker has never
	// evicted a block from tier t (see worker.removes), or may not have:
	// only such entries can age. Set when a worker is placed in the
	// slot, cleared at its first eviction from the tier.
	storeOnly [LowerTiers][]uint64
	// ttl, when positive, ages out the blocks of store-only tiers: a
	// worker's tier from which it has never evicted a block (see
	// worker.removes). Their entries count as absent once older.
	ttl   time.Duration
	now   func() time.Time
	epoch time.Time
	// sweep is the next shard of t that writes clean of aged entries.
	sweep int
}

type tierEntry struct {
	slot uint32
	tier Tier
	at   uint32
}

// tierList is the lower-tier entries of a hash that several slots hold
// below GPU, each slot at most once, with what a lookup reads instead of
// walking them: per tier, the bitset of the slots holding the hash there,
// and a bound on the entries' age. A prefix that a hundred workers share
// and hold on host memory is a list of a hundred entries at each of its
// blocks; a lookup counting them one by one spent more than its whole
// walk over the holders.
type tierList struct {
	entries []tierEntry
	// on[t-1] has bit s set when slot s holds the hash on tier t.
	on [LowerTiers][]uint64
	// oldest is no later than any entry's stamp (the earliest when last
	// computed): while it is younger than the TTL, no entry has aged.
	oldest uint32
}

// add appends e, whose slot the list does not have.
func (l *tierList) add(e tierEntry) {
	if len(l.entries) == 0 || e.at < l.oldest {
		l.oldest = e.at
	}
	l.entries = append(l.entries, e)
	l.on[e.tier-1] = setBit(l.on[e.tier-1], e.slot)
}

// drop removes the entry at j.
func (l *tierList) drop(j int) {
	e := l.entries[j]
	l.on[e.tier-1][e.slot/64] &^= 1 << (e.slot % 64)
	l.entries = append(l.entries[:j], l.entries[j+1:]...)
}

// reset empties the list, keeping its memory.
func (l *tierList) reset() {
	for _, e := range l.entries {
		l.on[e.tier-1][e.slot/64] &^= 1 << (e.slot % 64)
	}
	l.entries = l.entries[:0]
}

// has reports whether slot s holds the hash on tier t.
func (l *tierList) has(t Tier, s uint32) bool {
	on := l.on[t-1]
	return int(s/64) < len(on) && on[s/64]&(1<<(s%64)) != 0
}

func (e tierEntry) pack() uint64 {
	return uint64(e.slot) | uint64(e.tier)<<29 | uint64(e.at)<<32
}

func unpack(v uint64) tierEntry {
	return tierEntry{slot: uint32(v) & slotMask, tier: Tier(v>>29) & 3, at: uint32(v >> 32)}
}

// SetTierTTL ages out the blocks of store-only tiers after ttl (0: never)
// on the clock now (nil: the wall clock). Some sources publish the blocks
// they store on a lower tier and never their evictions (LMCache's offload
// events): without an age their blocks would stay in the index for ever.
// A worker's tier counts as store-only until it evicts a block from it.
func (x *Index) SetTierTTL(ttl time.Duration, now func() time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	x.tiers.ttl, x.tiers.now = ttl, now
	if x.tiers.epoch.IsZero() {
		x.tiers.epoch = now()
	}
}

// stamp is the time now, as tier entries keep it.
func (tt *tierTable) stamp() uint32 {
	if tt.now == nil {
		return 0
	}
	return uint32(max(tt.now().Sub(tt.epoch)/time.Second, 0))
}

// aged reports whether entry e counts as absent: it is older than the TTL
// at now (a stamp) and its tier is store-only for the worker in its slot.
// The entry's own age is compared first: a lookup meets mostly young
// entries, whose workers it then need not read.
func (x *Index) aged(e tierEntry, now uint32) bool {
	if !x.tiers.old(e.at, now) {
		return false
	}
	w := x.workers[e.slot]
	return w != nil && w.removes&(1<<e.tier) == 0
}

// old reports whether an entry stamped at is older than the TTL at now
// (never without a TTL).
func (tt *tierTable) old(at, now uint32) bool {
	return tt.ttl > 0 && time.Duration(now-min(at, now))*time.Second > tt.ttl
}

// mayAge reports whether an entry of l whose slot is in next could have
// aged at now: none when its oldest stamp is young, or when none of
// those slots holds it on a store-only tier. A lookup counts l by its
// bitsets when none can, and entry by entry otherwise.
func (x *Index) mayAge(l *tierList, next []uint64, now uint32) bool {
	tt := &x.tiers
	if !tt.old(l.oldest, now) {
		return false
	}
	for t := range LowerTiers {
		on, so := l.on[t], tt.storeOnly[t]
		for wi := range min(len(on), len(next), len(so)) {
			if on[wi]&next[wi]&so[wi] != 0 {
				return true
			}
		}
	}
	return false
}

// placedLocked marks slot s's tiers store-only as its worker w has them
// (every tier of a new worker's).
func (x *Index) placedLocked(s uint32, w *worker) {
	for t := range LowerTiers {
		if w.removes&(1<<(t+1)) == 0 {
			x.tiers.storeOnly[t] = setBit(x.tiers.storeOnly[t], s)
		} else if int(s/64) < len(x.tiers.storeOnly[t]) {
			x.tiers.storeOnly[t][s/64] &^= 1 << (s % 64)
		}
	}
}

// evictedLocked records that slot s's worker evicted a block from tier
// (not GPU): the tier is no longer store-only there.
func (x *Index) evictedLocked(s uint32, tier Tier) {
	if tier == TierGPU {
		return
	}
	if so := x.tiers.storeOnly[tier-1]; int(s/64) < len(so) {
		so[s/64] &^= 1 << (s % 64)
	}
}

// entriesOf lists the lower-tier entries of a tier table value.
func (tt *tierTable) entriesOf(v uint64, one *[1]tierEntry) []tierEntry {
	if v&listTag != 0 {
		return tt.lists[uint32(v)&^listTag].entries
	}
	one[0] = unpack(v)
	return one[:]
}

// tierOfLocked is the tier slot s holds h on, raw being h's holder value.
func (x *Index) tierOfLocked(raw uint32, s uint32, h uint64) Tier {
	if raw&lowerTag == 0 {
		return TierGPU
	}
	v, ok := x.tiers.t.get(h)
	if !ok {
		return TierGPU
	}
	var one [1]tierEntry
	for _, e := range x.tiers.entriesOf(v, &one) {
		if e.slot == s {
			return e.tier
		}
	}
	return TierGPU
}

// setTierLocked makes slot s (worker w, which holds h) hold h on tier,
// raw being h's holder value.
func (x *Index) setTierLocked(s uint32, w *worker, h uint64, raw uint32, tier Tier) {
	if raw&lowerTag != 0 {
		old := x.tierOfLocked(raw, s, h)
		if old == tier {
			if tier != TierGPU {
				x.restampLocked(s, h) // stored again: young again
			}
			return
		}
		if old != TierGPU {
			if !x.dropTierLocked(s, h) {
				x.holders.set(h, raw&^lowerTag)
				raw &^= lowerTag
			}
		}
	}
	if tier == TierGPU {
		return
	}
	e := tierEntry{slot: s, tier: tier, at: x.tiers.stamp()}
	v, ok := x.tiers.t.get(h)
	switch {
	case !ok:
		x.tiers.t.set(h, e.pack())
	case v&listTag != 0:
		x.tiers.lists[uint32(v)&^listTag].add(e)
	default:
		x.tiers.t.set(h, listTag|uint64(x.newTierList(unpack(v), e)))
	}
	x.holders.set(h, raw|lowerTag)
	w.lower[tier-1]++
	x.lowerEntries[tier-1]++
}

func (x *Index) newTierList(a, b tierEntry) uint32 {
	tt := &x.tiers
	var i uint32
	if n := len(tt.freeLists); n > 0 {
		i = tt.freeLists[n-1]
		tt.freeLists = tt.freeLists[:n-1]
	} else {
		i = uint32(len(tt.lists))
		tt.lists = append(tt.lists, tierList{})
	}
	l := &tt.lists[i]
	l.add(a)
	l.add(b)
	return i
}

// restampLocked makes slot s's lower-tier entry of h young.
func (x *Index) restampLocked(s uint32, h uint64) {
	p := x.tiers.t.ref(h)
	if p == nil {
		return
	}
	now := x.tiers.stamp()
	if *p&listTag == 0 {
		e := unpack(*p)
		e.at = now
		*p = e.pack()
		return
	}
	l := &x.tiers.lists[uint32(*p)&^listTag]
	l.oldest = now
	for i := range l.entries {
		if l.entries[i].slot == s {
			l.entries[i].at = now
		}
		l.oldest = min(l.oldest, l.entries[i].at)
	}
}

// dropTierLocked drops slot s's lower-tier entry of h, if it has one (the
// live worker in the slot counts it no more), and reports whether another
// slot still holds h below GPU.
func (x *Index) dropTierLocked(s uint32, h uint64) bool {
	tt := &x.tiers
	v, ok := tt.t.get(h)
	if !ok {
		return false
	}
	var gone tierEntry
	found := false
	if v&listTag == 0 {
		if e := unpack(v); e.slot == s {
			gone, found = e, true
			tt.t.del(h)
		}
	} else {
		i := uint32(v) &^ listTag
		l := &tt.lists[i]
		for j, e := range l.entries {
			if e.slot == s {
				gone, found = e, true
				l.drop(j)
				break
			}
		}
		if len(l.entries) == 1 {
			tt.t.set(h, l.entries[0].pack())
			l.reset()
			tt.freeLists = append(tt.freeLists, i)
		}
	}
	if found {
		if w := x.workers[s]; w != nil && !deadSlot(x.dead, s) {
			w.lower[gone.tier-1]--
			x.lowerEntries[gone.tier-1]--
		}
	}
	_, left := tt.t.get(h)
	return left
}

func deadSlot(dead []uint64, s uint32) bool {
	return int(s/64) < len(dead) && dead[s/64]&(1<<(s%64)) != 0
}

// lowerCounts counts, per slot, the blocks of a lookup's prefix held on
// each lower tier; pooled, as a lookup that meets a lower tier needs one
// as long as the worker list. A slot's count on a tier is c's plus its
// bit-sliced counter in planes: a block that many walking slots hold
// below GPU adds one to each of them with a few word operations (add), not
// an increment per slot; c takes the entry-by-entry counts and what
// overflows the planes.
type lowerCounts struct {
	c   [][LowerTiers]int32
	now uint32
	// planes[(t*countPlanes+p)*words+wi] bit b is bit p of the counter
	// of slot wi*64+b on tier t+1; top[t] of tier t's planes may be
	// non-zero.
	planes []uint64
	words  int
	top    [LowerTiers]int
	// snap is one word's counters on each tier, snap[t][b] slot
	// wi*64+b's (see snapWord), for the slots of a word that leave the
	// walk at once: read from the planes one by one, a bit per plane,
	// they cost more than the increments the planes save.
	snap [LowerTiers][64]uint8
}

// countPlanes is the bits of a slot's bit-sliced counter: a slot's count
// reaching 1<<countPlanes moves to c.
const countPlanes = 8

var countsPool = sync.Pool{New: func() any { return new(lowerCounts) }}

// reset makes lc count for words words of slots, n slots, from zero: it
// clears only the planes its last lookup used.
func (lc *lowerCounts) reset(n, words int) {
	lc.c = append(lc.c[:0], make([][LowerTiers]int32, n)...)
	if lc.words != words || len(lc.planes) != LowerTiers*countPlanes*words {
		lc.planes, lc.words = make([]uint64, LowerTiers*countPlanes*words), words
	} else {
		for t, top := range lc.top {
			from := t * countPlanes * words
			clear(lc.planes[from : from+top*words])
		}
	}
	lc.top = [LowerTiers]int{}
}

// add adds one to the counters on tier t of the slots in word wi that x
// holds: a ripple carry through the planes.
func (lc *lowerCounts) add(t, wi int, x uint64) {
	i := t*countPlanes*lc.words + wi
	p := 0
	for ; x != 0; p++ {
		if p == countPlanes {
			// Past the top plane: each of these slots counted another
			// 1<<countPlanes.
			for ; x != 0; x &= x - 1 {
				lc.c[wi*64+bits.TrailingZeros64(x)][t] += 1 << countPlanes
			}
			break
		}
		carry := lc.planes[i] & x
		lc.planes[i] ^= x
		x = carry
		i += lc.words
	}
	lc.top[t] = max(lc.top[t], p)
}

// snapWord sets snap to the counters of word wi's slots (zero on the
// tiers not in use), for those slots only, until the next add.
func (lc *lowerCounts) snapWord(wi int) {
	for t, top := range lc.top {
		row := &lc.snap[t]
		if top == 0 {
			*row = [64]uint8{}
			continue
		}
		var pw [countPlanes]uint64
		for p := range top {
			pw[p] = lc.planes[(t*countPlanes+p)*lc.words+wi]
		}
		for k := range 8 {
			// Row p of an 8x8 bit matrix is plane p's bits of slots
			// 8k..8k+7; its transpose has a row per slot, its count,
			// whose bytes in memory order are the slots'.
			var x uint64
			for p := range top {
				x |= (pw[p] >> (8 * k) & 0xff) << (8 * p)
			}
			binary.LittleEndian.PutUint64(row[8*k:], transpose8(x))
		}
	}
}

// transpose8 transposes the 8x8 bit matrix x whose row i is byte i
// (column j its bit j): bit 8i+j moves to 8j+i (Hacker's Delight, 7-3).
func transpose8(x uint64) uint64 {
	t := (x ^ (x >> 7)) & 0x00AA00AA00AA00AA
	x ^= t ^ (t << 7)
	t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCC
	x ^= t ^ (t << 14)
	t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0
	return x ^ t ^ (t << 28)
}

// ofSnapped is of for slot wi*64+b of the word snapWord last read.
func (lc *lowerCounts) ofSnapped(wi, b int) [LowerTiers]int32 {
	out := lc.c[wi*64+b]
	b &= 63
	out[0] += int32(lc.snap[0][b])
	out[1] += int32(lc.snap[1][b])
	out[2] += int32(lc.snap[2][b])
	return out
}

// of is slot s's counts.
func (lc *lowerCounts) of(s int) [LowerTiers]int32 {
	if lc == nil {
		return [LowerTiers]int32{}
	}
	out := lc.c[s]
	wi, b := s/64, uint(s%64)
	for t, top := range lc.top {
		i := t*countPlanes*lc.words + wi
		var n int32
		for p := range top {
			n |= int32(lc.planes[i+p*lc.words]>>b&1) << p
		}
		out[t] += n
	}
	return out
}

// countLower is a lookup's step at a hash marked lowerTag: of the slots in
// next (those holding every block so far, this one included), those
// holding h below GPU count it on their tier, and those whose entry has
// aged leave next (the block counts as absent). lc is made on first use.
func (x *Index) countLower(lc *lowerCounts, next []uint64, h uint64) *lowerCounts {
	v, ok := x.tiers.t.get(h)
	if !ok {
		return lc
	}
	x.needCounts(&lc)
	if v&listTag != 0 {
		if l := &x.tiers.lists[uint32(v)&^listTag]; !x.mayAge(l, next, lc.now) {
			// No entry of a slot in next has aged: count the slots of
			// next on each tier by the list's bitsets.
			for t := range LowerTiers {
				on := l.on[t]
				for wi := range min(len(on), len(next)) {
					if w := on[wi] & next[wi]; w != 0 {
						lc.add(t, wi, w)
					}
				}
			}
			return lc
		}
	}
	var one [1]tierEntry
	for _, e := range x.tiers.entriesOf(v, &one) {
		s := e.slot
		if int(s/64) >= len(next) || next[s/64]&(1<<(s%64)) == 0 {
			continue
		}
		if x.aged(e, lc.now) {
			next[s/64] &^= 1 << (s % 64)
			continue
		}
		lc.c[s][e.tier-1]++
	}
	return lc
}

// slotTier is the tier slot s holds h on, for a lookup following one
// worker, and whether that entry has aged (the block counts as absent).
func (x *Index) slotTier(lc **lowerCounts, s uint32, h uint64) (Tier, bool) {
	v, ok := x.tiers.t.get(h)
	if !ok {
		return TierGPU, false
	}
	if v&listTag != 0 {
		// The list's bitsets say the tier; its entry is read only when
		// it may have aged.
		l := &x.tiers.lists[uint32(v)&^listTag]
		t := TierCPU
		for ; t <= TierUnknown && !l.has(t, s); t++ {
		}
		if t > TierUnknown {
			return TierGPU, false
		}
		x.needCounts(lc)
		if !x.tiers.old(l.oldest, (*lc).now) {
			return t, false
		}
	}
	var one [1]tierEntry
	for _, e := range x.tiers.entriesOf(v, &one) {
		if e.slot != s {
			continue
		}
		x.needCounts(lc)
		return e.tier, x.aged(e, (*lc).now)
	}
	return TierGPU, false
}

// needCounts makes *lc, a lookup's counts, on first use.
func (x *Index) needCounts(lc **lowerCounts) {
	if *lc == nil {
		*lc = countsPool.Get().(*lowerCounts)
		(*lc).reset(len(x.workers), (len(x.workers)+63)/64)
		(*lc).now = x.tiers.stamp()
	}
}

// sweepStepLocked drops, from one shard of the tier table, the entries
// that have aged (see SetTierTTL), with the blocks they name: a write's
// share of keeping store-only tiers' memory bounded.
func (x *Index) sweepStepLocked() {
	tt := &x.tiers
	if tt.ttl <= 0 || tt.t.len() == 0 {
		return
	}
	now := tt.stamp()
	type drop struct {
		s uint32
		h uint64
	}
	var drops []drop
	var one [1]tierEntry
	for _, sl := range tt.t.shards[tt.sweep].slots {
		if sl.key == 0 {
			continue
		}
		for _, e := range tt.entriesOf(sl.val, &one) {
			if !deadSlot(x.dead, e.slot) && x.aged(e, now) {
				drops = append(drops, drop{e.slot, sl.key})
			}
		}
	}
	tt.sweep = (tt.sweep + 1) % tableShards
	for _, d := range drops {
		w := x.workers[d.s]
		x.removeLocked(d.s, w, d.h, TierGPU, true)
	}
}

// TierStats counts the (block, worker) pairs held on each tier below GPU,
// in Tier order less one.
func (x *Index) TierStats() [LowerTiers]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.lowerEntries
}

// LowerBlocks reports how many blocks a worker holds on each tier below
// GPU.
func (x *Index) LowerBlocks(id WorkerID) [LowerTiers]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, w := x.slotLocked(id, false)
	if w == nil {
		return [LowerTiers]int{}
	}
	return w.lower
}

// touchTiers loads the tier table's first slot of every key of a lookup's
// batch marked lowerTag, so that the probes the walk makes of them one by
// one (countLower, slotTier) find their lines in the cache: their misses
// overlap here, as the holders' do in getAll. Nothing without tiers.
func (x *Index) touchTiers(keys []uint64, vals []uint32, oks []bool) {
	if x.tiers.t.len() == 0 {
		return
	}
	var marked [batch]uint64
	n := 0
	for i, k := range keys {
		if oks[i] && vals[i]&lowerTag != 0 {
			marked[n] = k
			n++
		}
	}
	if n > 0 {
		x.tiers.t.touch(marked[:n])
	}
}
