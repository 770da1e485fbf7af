package index

import "math/bits"

// Grouped is what Lookup answers: AppendOverlaps's overlaps, except that
// the workers leaving the request's prefix at one depth in numbers (a
// system prompt thousands of workers cache, and nothing of the request
// after it) are kept as a bitset of their slots, not as an Overlap each.
// A route decision over thousands of workers reads the lengths the
// overlaps have, the workers caching the most, and the overlaps of the
// few workers it prices; making and scanning an Overlap for every holder
// of a shared prompt was most of its time.
//
// A depth's leavers form a group when they outnumber the words of the
// bitset that holds them (one per 64 slots): the bitset is then at least
// four times smaller than their Overlaps (four words each), and a worker's
// membership is one bit, where a list must be searched.
type Grouped struct {
	// Overlaps lists the workers of every depth not kept as a group, and
	// every worker of the longest overlap (a group there is listed), by
	// Blocks ascending.
	Overlaps []Overlap
	// Levels lists every length some worker caches, ascending, with how
	// many workers cache it (those listed and those in a group alike).
	Levels []Level
	// GroupAll makes every depth's leavers below the longest a group,
	// however few: the answers are the same, only fewer are listed. For
	// the tests of callers, which then read every overlap through Append
	// or Blocks.
	GroupAll bool

	x      *Index
	groups []group
	// words holds the groups' bitsets, nwords each, back to back.
	words  []uint64
	nwords int
	// scratch is the walk's two bitsets (see appendOverlapsLocked).
	scratch []uint64
	lc      *lowerCounts
	// stamp is the index's placement count at the lookup: a slot placed
	// since holds another worker than the one the bitsets saw there.
	stamp uint64
}

// Level is one length of a lookup's overlaps and how many workers have it.
type Level struct {
	Blocks  int
	Workers int
}

// group is the workers leaving at one depth: their slots' bits are
// words[off:off+nwords].
type group struct {
	blocks int
	off    int
}

// Lookup is AppendOverlaps into g (reused across lookups): the same
// overlaps, with the large groups of workers leaving at one depth below
// the longest kept as bitsets (see Grouped).
func (x *Index) Lookup(g *Grouped, hashes []uint64) {
	g.Release()
	g.x = x
	g.Overlaps, g.Levels, g.groups, g.words = g.Overlaps[:0], g.Levels[:0], g.groups[:0], g.words[:0]
	if len(hashes) == 0 {
		return
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	g.stamp = x.places
	g.nwords = (len(x.workers) + 63) / 64
	g.Overlaps = x.appendOverlapsLocked(g.Overlaps, hashes, &g.lc, g)
	// The longest overlap is listed whole: its workers are the ones a
	// decision prices first, every one.
	if n := len(g.groups); n > 0 && g.groups[n-1].blocks == g.Levels[len(g.Levels)-1].Blocks {
		last := g.groups[n-1]
		for wi, word := range g.words[last.off : last.off+g.nwords] {
			for word != 0 {
				s := wi*64 + bits.TrailingZeros64(word)
				g.Overlaps = append(g.Overlaps, Overlap{Worker: x.ids[s], Blocks: last.blocks, Lower: g.lc.of(s)})
				word &= word - 1
			}
		}
		g.groups, g.words = g.groups[:n-1], g.words[:last.off]
	}
}

// leave records the n workers leaving at depth (in active, not in next):
// as a group when they are many, and then it reports true (the caller
// lists them otherwise).
func (g *Grouped) leave(depth int, active, next []uint64, n int) bool {
	g.level(depth, n)
	if n == 0 || n <= len(active) && !g.GroupAll {
		return false
	}
	off := len(g.words)
	for wi := range active {
		g.words = append(g.words, active[wi]&^next[wi])
	}
	g.groups = append(g.groups, group{blocks: depth, off: off})
	return true
}

// level records that n workers cache blocks blocks.
func (g *Grouped) level(blocks, n int) {
	if n > 0 {
		g.Levels = append(g.Levels, Level{Blocks: blocks, Workers: n})
	}
}

// Grouped reports whether some workers are kept in groups, not listed.
func (g *Grouped) Grouped() bool { return len(g.groups) > 0 }

// Append appends the overlaps of the workers ids that a group holds (those
// listed in Overlaps are not repeated), or, with anyRank, of every rank of
// their instances. A worker placed in its slot after the lookup (it
// cleared its cache, or is new) is in no group: it is answered as it was
// after that change, before it stored anything again.
func (g *Grouped) Append(dst []Overlap, ids []WorkerID, anyRank bool) []Overlap {
	if len(g.groups) == 0 {
		return dst
	}
	x := g.x
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, id := range ids {
		if !anyRank {
			dst = g.appendLocked(dst, id)
			continue
		}
		for r := uint32(0); r <= x.maxRank; r++ {
			dst = g.appendLocked(dst, WorkerID{Instance: id.Instance, DPRank: r})
		}
	}
	return dst
}

// Blocks is the most blocks a group holds of id (of any rank of its
// instance with anyRank), 0 when none does.
func (g *Grouped) Blocks(id WorkerID, anyRank bool) int {
	if len(g.groups) == 0 {
		return 0
	}
	x := g.x
	x.mu.RLock()
	defer x.mu.RUnlock()
	var buf [1]Overlap
	if !anyRank {
		if o := g.appendLocked(buf[:0], id); len(o) > 0 {
			return o[0].Blocks
		}
		return 0
	}
	blocks := 0
	for r := uint32(0); r <= x.maxRank; r++ {
		if o := g.appendLocked(buf[:0], WorkerID{Instance: id.Instance, DPRank: r}); len(o) > 0 {
			blocks = max(blocks, o[0].Blocks)
		}
	}
	return blocks
}

// appendLocked appends id's overlap if a group holds it.
func (g *Grouped) appendLocked(dst []Overlap, id WorkerID) []Overlap {
	x := g.x
	s, ok := x.slots[id]
	if !ok || x.placedAt[s] > g.stamp || int(s/64) >= g.nwords {
		return dst
	}
	for _, gr := range g.groups {
		if g.words[gr.off+int(s/64)]&(1<<(s%64)) != 0 {
			return append(dst, Overlap{Worker: id, Blocks: gr.blocks, Lower: g.lc.of(int(s))})
		}
	}
	return dst
}

// Release gives back what the lookup holds beyond g's own buffers; g can
// be looked up into again.
func (g *Grouped) Release() {
	if g.lc != nil {
		countsPool.Put(g.lc)
		g.lc = nil
	}
	g.x, g.groups = nil, g.groups[:0]
}
