package index

import (
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
// as long as the worker list.
type lowerCounts struct {
	c   [][LowerTiers]int32
	now uint32
}

var countsPool = sync.Pool{New: func() any { return new(lowerCounts) }}

func (lc *lowerCounts) of(s int) [LowerTiers]int32 {
	if lc == nil {
		return [LowerTiers]int32{}
	}
	return lc.c[s]
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
					for w := on[wi] & next[wi]; w != 0; w &= w - 1 {
						lc.c[wi*64+bits.TrailingZeros64(w)][t]++
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
		(*lc).c = append((*lc).c[:0], make([][LowerTiers]int32, len(x.workers))...)
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
