package index

// table maps sequence hashes to holder values: the index's one big map,
// which every lookup probes once per block of the request. A Go map costs
// two or three dependent cache misses per probe at millions of entries (its
// directory, a group's control word, then the slot), and a route decision
// walks a hundred blocks, so the lookup was memory latency: 3x slower at
// the median than one miss per probe, and its tail grew with whatever else
// ran on the machine. This is an open-addressing table with linear probing
// whose slots hold key and value together, so a probe is one cache line;
// it is cut into shards by the hash's top bits, so that growing rehashes
// one shard (a few thousand entries at 2M), never the whole table at once
// under the index's write lock.
//
// The zero key marks an empty slot; a hash that is zero is kept aside.
// V is the value kept with each key: the index keeps a holder (uint32),
// Pending a worker and a reference count; a slot of either is 16 bytes.
// It is not safe for concurrent use (its owner's lock guards it).
type table[V any] struct {
	shards  [tableShards]shard[V]
	n       int
	zero    V
	hasZero bool
	// touched keeps what touch read, so that the compiler keeps the reads.
	touched uint64
}

const (
	tableShardBits = 10
	tableShards    = 1 << tableShardBits
	// A shard doubles past 3/4 full: linear probing's probe sequences stay
	// short (2.5 slots for a hit on average at 3/4, 8.5 for a miss, in one
	// or two cache lines of four slots each).
	minShardSlots = 8
)

type shard[V any] struct {
	slots []tslot[V]
	n     int
	shift uint8 // 64 - log2(len(slots))
}

type tslot[V any] struct {
	key uint64
	val V
}

// hashOf spreads a key over 64 bits (Fibonacci hashing): sequence hashes are
// random already, but the replay's and tests' ids are small integers.
func hashOf(key uint64) uint64 { return key * 0x9e3779b97f4a7c15 }

func (t *table[V]) len() int { return t.n }

// get returns key's value.
func (t *table[V]) get(key uint64) (V, bool) {
	if p := t.ref(key); p != nil {
		return *p, true
	}
	var zero V
	return zero, false
}

// ref returns a pointer to key's value, to read or change in place, or
// nil if key is absent. It is valid until the next set or del.
func (t *table[V]) ref(key uint64) *V {
	if key == 0 {
		if !t.hasZero {
			return nil
		}
		return &t.zero
	}
	h := hashOf(key)
	s := &t.shards[h>>(64-tableShardBits)]
	if len(s.slots) == 0 {
		return nil
	}
	mask := uint64(len(s.slots) - 1)
	for i := (h << tableShardBits) >> s.shift; ; i = (i + 1) & mask {
		e := &s.slots[i]
		if e.key == key {
			return &e.val
		}
		if e.key == 0 {
			return nil
		}
	}
}

// set stores key's value.
func (t *table[V]) set(key uint64, val V) {
	if key == 0 {
		if !t.hasZero {
			t.n++
		}
		t.zero, t.hasZero = val, true
		return
	}
	h := hashOf(key)
	s := &t.shards[h>>(64-tableShardBits)]
	if (s.n+1)*4 > len(s.slots)*3 {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := (h << tableShardBits) >> s.shift; ; i = (i + 1) & mask {
		e := &s.slots[i]
		if e.key == key {
			e.val = val
			return
		}
		if e.key == 0 {
			*e = tslot[V]{key: key, val: val}
			s.n++
			t.n++
			return
		}
	}
}

// refOrAdd is ref, storing val first when the key is absent (added
// reports it): one probe where ref then set took two. It grows a shard
// only to add, as set does.
func (t *table[V]) refOrAdd(key uint64, val V) (p *V, added bool) {
	if key == 0 {
		if p := t.ref(0); p != nil {
			return p, false
		}
		t.set(0, val)
		return &t.zero, true
	}
	h := hashOf(key)
	s := &t.shards[h>>(64-tableShardBits)]
	if len(s.slots) > 0 {
		mask := uint64(len(s.slots) - 1)
		for i := (h << tableShardBits) >> s.shift; ; i = (i + 1) & mask {
			e := &s.slots[i]
			if e.key == key {
				return &e.val, false
			}
			if e.key == 0 {
				if (s.n+1)*4 > len(s.slots)*3 {
					break // full: set grows the shard first
				}
				*e = tslot[V]{key: key, val: val}
				s.n++
				t.n++
				return &e.val, true
			}
		}
	}
	t.set(key, val)
	return t.ref(key), true
}

// del removes key, if present. Later entries of its probe run move back
// into the hole (backward-shift deletion), so no tombstones build up.
func (t *table[V]) del(key uint64) {
	if key == 0 {
		if t.hasZero {
			t.n--
		}
		var zero V
		t.zero, t.hasZero = zero, false
		return
	}
	h := hashOf(key)
	s := &t.shards[h>>(64-tableShardBits)]
	if len(s.slots) == 0 {
		return
	}
	mask := uint64(len(s.slots) - 1)
	i := (h << tableShardBits) >> s.shift
	for ; s.slots[i].key != key; i = (i + 1) & mask {
		if s.slots[i].key == 0 {
			return
		}
	}
	t.delAt(s, i)
}

// find is ref with where it found the key, for delFound: a caller that
// reads a value and then drops it probes once. The zero key is found in
// no shard.
func (t *table[V]) find(key uint64) (*V, *shard[V], uint64) {
	if key == 0 {
		return t.ref(0), nil, 0
	}
	h := hashOf(key)
	s := &t.shards[h>>(64-tableShardBits)]
	if len(s.slots) == 0 {
		return nil, s, 0
	}
	mask := uint64(len(s.slots) - 1)
	for i := (h << tableShardBits) >> s.shift; ; i = (i + 1) & mask {
		e := &s.slots[i]
		if e.key == key {
			return &e.val, s, i
		}
		if e.key == 0 {
			return nil, s, 0
		}
	}
}

// delFound removes key, which find found at s, i; nothing may have
// changed the table since.
func (t *table[V]) delFound(key uint64, s *shard[V], i uint64) {
	if s == nil {
		t.del(key)
		return
	}
	t.delAt(s, i)
}

// delAt removes the key at slot i of shard s.
func (t *table[V]) delAt(s *shard[V], i uint64) {
	mask := uint64(len(s.slots) - 1)
	for j := (i + 1) & mask; s.slots[j].key != 0; j = (j + 1) & mask {
		home := (hashOf(s.slots[j].key) << tableShardBits) >> s.shift
		// The entry at j stays if its home lies cyclically in (i, j]:
		// moving it before its home would lose it.
		if (i <= j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
			continue
		}
		s.slots[i] = s.slots[j]
		i = j
	}
	s.slots[i] = tslot[V]{}
	s.n--
	t.n--
}

// grow doubles a shard and reinserts its entries.
func (s *shard[V]) grow() {
	old := s.slots
	size := max(2*len(old), minShardSlots)
	s.slots = make([]tslot[V], size)
	s.shift = uint8(64 - log2(size))
	mask := uint64(size - 1)
	for _, e := range old {
		if e.key == 0 {
			continue
		}
		i := (hashOf(e.key) << tableShardBits) >> s.shift
		for s.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = e
	}
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// each calls fn for every entry; fn must not change the table.
func (t *table[V]) each(fn func(key uint64, val V)) {
	if t.hasZero {
		fn(0, t.zero)
	}
	for si := range t.shards {
		for _, e := range t.shards[si].slots {
			if e.key != 0 {
				fn(e.key, e.val)
			}
		}
	}
}

// batch is how many keys getAll looks up at once, at most.
const batch = 64

// getAll is get for several keys (at most batch): vals[i], oks[i] are
// keys[i]'s. It loads every key's first slot before looking at any, so the
// cache misses of a table far larger than the caches overlap instead of
// coming one after the other: a lookup walks its request's blocks in
// order, and each of them is a miss.
func (t *table[V]) getAll(keys []uint64, vals []V, oks []bool) {
	var first [batch]uint64
	var at [batch]*tslot[V]
	var home [batch]uint64
	for j, key := range keys[:min(len(keys), batch)] {
		h := hashOf(key)
		s := &t.shards[h>>(64-tableShardBits)]
		if len(s.slots) == 0 || key == 0 {
			continue
		}
		i := (h << tableShardBits) >> s.shift
		e := &s.slots[i]
		at[j], first[j], home[j] = e, e.key, i
	}
	for j, key := range keys[:min(len(keys), batch)] {
		switch e := at[j]; {
		case e != nil && first[j] == key:
			vals[j], oks[j] = e.val, true
		case e != nil && first[j] == 0:
			// Linear probing keeps a key in the run that starts at its
			// home slot: an empty home means it is absent (most of a
			// request's new blocks).
			var zero V
			vals[j], oks[j] = zero, false
		case e != nil:
			// The probe goes on past the home slot it loaded.
			vals[j], oks[j] = t.probeAfter(key, home[j])
		default:
			vals[j], oks[j] = t.get(key)
		}
	}
}

// probeAfter is get for a key (not zero) whose home slot, at i in its
// shard, holds another key: it probes on from the slot after.
func (t *table[V]) probeAfter(key, i uint64) (V, bool) {
	s := &t.shards[hashOf(key)>>(64-tableShardBits)]
	mask := uint64(len(s.slots) - 1)
	for i = (i + 1) & mask; ; i = (i + 1) & mask {
		e := &s.slots[i]
		if e.key == key {
			return e.val, true
		}
		if e.key == 0 {
			var zero V
			return zero, false
		}
	}
}

// touch reads the first slot of each key's probe and nothing else: a loop
// that then reads or changes the keys one at a time (a probe whose misses
// the next cannot overlap, as it may move slots) finds their lines in the
// cache, and their misses overlap here. The iterations are independent, so
// the core runs many of them at once. It changes nothing in the table.
func (t *table[V]) touch(keys []uint64) {
	var acc uint64
	for _, key := range keys {
		h := hashOf(key)
		s := &t.shards[h>>(64-tableShardBits)]
		if len(s.slots) == 0 {
			continue
		}
		acc += s.slots[(h<<tableShardBits)>>s.shift].key
	}
	t.touched = acc
}
