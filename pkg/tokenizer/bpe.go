package tokenizer

import (
	"math"
	"strings"
	"sync/atomic"
)

// byteToRune is GPT-2's bytes_to_unicode table: printable bytes map to
// themselves, the others to U+0100 and up, so every byte has a visible
// symbol.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b map[rune]byte) {
	r2b = make(map[rune]byte, 256)
	n := 0
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// fromByteLevel maps a byte-level token back to its raw bytes. A token with
// characters outside the byte-level alphabet is kept as it is, like Hugging
// Face's ByteLevel decoder does.
func fromByteLevel(tok string) string {
	var b strings.Builder
	b.Grow(len(tok))
	for _, r := range tok {
		c, ok := runeToByte[r]
		if !ok {
			return tok
		}
		b.WriteByte(c)
	}
	return b.String()
}

const noMerge = math.MaxUint64

// pairRank returns rank<<32 | merged id for the pair (a, b), or noMerge.
func (t *Tokenizer) pairRank(a, b uint32) uint64 {
	if v, ok := t.merges[uint64(a)<<32|uint64(b)]; ok {
		return v
	}
	return noMerge
}

// naiveMax is the word length (in symbols) up to which merging scans for
// the best pair; longer words use a heap, as Hugging Face does.
const naiveMax = 48

// bpe appends the ids of one pre-token.
func (t *Tokenizer) bpe(dst []uint32, word string, sc *scratch) []uint32 {
	if len(word) == 1 {
		return append(dst, t.byteID[word[0]])
	}
	if t.ignoreMerges {
		if id, ok := t.rawVocab[word]; ok {
			return append(dst, id)
		}
	}
	var slot *atomic.Pointer[cacheEntry]
	if len(word) <= maxCachedWord {
		slot = t.cache.slot(word)
		if e := slot.Load(); e != nil && e.word == word {
			return append(dst, e.ids...)
		}
	}
	ids := sc.ids[:0]
	for i := 0; i < len(word); i++ {
		ids = append(ids, t.byteID[word[i]])
	}
	if len(ids) <= naiveMax {
		ids = t.mergeScan(ids, sc)
	} else {
		ids = t.mergeHeap(ids, sc)
	}
	sc.ids = ids
	if slot != nil {
		slot.Store(&cacheEntry{word: strings.Clone(word), ids: append([]uint32(nil), ids...)})
	}
	return append(dst, ids...)
}

// mergeScan repeatedly merges the lowest-ranked adjacent pair, leftmost
// first. It is quadratic but fastest for the short words of most text.
func (t *Tokenizer) mergeScan(ids []uint32, sc *scratch) []uint32 {
	ranks := sc.ranks[:0]
	for i := 0; i+1 < len(ids); i++ {
		ranks = append(ranks, t.pairRank(ids[i], ids[i+1]))
	}
	for {
		best, bi := uint64(noMerge), -1
		for i, r := range ranks {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		ids[bi] = uint32(best)
		ids = append(ids[:bi+1], ids[bi+2:]...)
		ranks = append(ranks[:bi], ranks[bi+1:]...)
		if bi > 0 {
			ranks[bi-1] = t.pairRank(ids[bi-1], ids[bi])
		}
		if bi < len(ranks) {
			ranks[bi] = t.pairRank(ids[bi], ids[bi+1])
		}
	}
	sc.ranks = ranks
	return ids
}

type symbol struct {
	id         uint32
	prev, next int32
	dead       bool
}

type mergeItem struct {
	rank  uint32
	pos   int32
	merge uint32
}

func (a mergeItem) less(b mergeItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// mergeHeap is Hugging Face's Word::merge_all: a priority queue of pairs
// ordered by (rank, position), skipping entries made stale by earlier
// merges. It gives the same result as mergeScan in O(n log n).
func (t *Tokenizer) mergeHeap(ids []uint32, sc *scratch) []uint32 {
	syms := sc.syms[:0]
	for i, id := range ids {
		syms = append(syms, symbol{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	push := func(it mergeItem) {
		h = append(h, it)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !h[i].less(h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() mergeItem {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(h) && h[l].less(h[m]) {
				m = l
			}
			if r < len(h) && h[r].less(h[m]) {
				m = r
			}
			if m == i {
				break
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
		return top
	}
	for i := 0; i+1 < len(syms); i++ {
		if v := t.pairRank(syms[i].id, syms[i+1].id); v != noMerge {
			push(mergeItem{rank: uint32(v >> 32), pos: int32(i), merge: uint32(v)})
		}
	}
	for len(h) > 0 {
		top := pop()
		cur := &syms[top.pos]
		if cur.dead || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := &syms[nextPos]
		if v := t.pairRank(cur.id, right.id); v == noMerge || uint32(v>>32) != top.rank || uint32(v) != top.merge {
			continue
		}
		cur.id = top.merge
		cur.next = right.next
		right.dead = true
		if cur.next >= 0 {
			syms[cur.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if v := t.pairRank(syms[cur.prev].id, cur.id); v != noMerge {
				push(mergeItem{rank: uint32(v >> 32), pos: cur.prev, merge: uint32(v)})
			}
		}
		if cur.next >= 0 {
			if v := t.pairRank(cur.id, syms[cur.next].id); v != noMerge {
				push(mergeItem{rank: uint32(v >> 32), pos: top.pos, merge: uint32(v)})
			}
		}
	}
	ids = ids[:0]
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	sc.syms, sc.heap = syms, h
	return ids
}
