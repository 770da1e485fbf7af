package replay

import (
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/mocker/engine"
)

// Bounds are what no router can beat on a trace, to judge hit rates and
// latencies against.
type Bounds struct {
	// Reuse is the hit rate of one infinitely large cache: the fraction
	// of prompt blocks (at the engines' block size) that appeared in an
	// earlier request.
	Reuse float64
	// Pooled is the hit rate of one LRU cache as large as all the engines
	// together (Workers x NumGPUBlocks blocks), fed the trace in arrival
	// order, each request matching its longest cached prefix and then
	// touching all its blocks, last first (so tails go before heads). A router cannot do better without knowing
	// the future: the engines' caches, summed, are this cache split up.
	Pooled float64
	// FloorTTFT are the p50, p90 and p99 of each request's TTFT alone on an
	// idle engine whose cache holds what the pooled cache held: the
	// prefill of its uncached tokens in MaxNumBatchedTokens chunks.
	FloorTTFT [3]time.Duration
}

// ComputeBounds computes a trace's bounds for a cluster.
func ComputeBounds(trace []Request, cfg Config) Bounds {
	bs := cfg.Engine.BlockSize
	seen := map[uint64]struct{}{}
	lru := newLRU(cfg.Workers * cfg.Engine.NumGPUBlocks)
	var tokens []uint32
	var blocks []kvhash.Block
	reuse, pooled, total := 0, 0, 0
	floors := make([]time.Duration, 0, len(trace))
	for _, r := range trace {
		tokens = Tokens(r, cfg.TraceBlockSize, tokens)
		blocks = kvhash.Hashes(tokens, bs, blocks[:0])
		// As the engines count hits, a block can hit only if a token
		// follows it: the last prompt token is always computed, for the
		// logits of the first new one, so a prompt of whole blocks never
		// hits its last block.
		hittable := (len(tokens) - 1) / bs
		prefix := 0
		for prefix < hittable && lru.has(blocks[prefix].Sequence) {
			prefix++
		}
		for i, b := range blocks {
			if _, ok := seen[b.Sequence]; ok && i < hittable {
				reuse++
			}
			seen[b.Sequence] = struct{}{}
		}
		// Last block first, as the engines release a request's blocks, so
		// that a prefix's tail is evicted before its head.
		for i := len(blocks) - 1; i >= 0; i-- {
			lru.touch(blocks[i].Sequence)
		}
		pooled += prefix
		total += len(blocks)
		// As the engine does, a fully cached prompt still computes its
		// last block.
		uncached := len(tokens) - prefix*bs
		if uncached < 1 {
			uncached = min(bs, len(tokens))
		}
		floors = append(floors, prefillTime(uncached, cfg.Engine))
	}
	b := Bounds{FloorTTFT: percentiles(floors)}
	if total > 0 {
		b.Reuse = float64(reuse) / float64(total)
		b.Pooled = float64(pooled) / float64(total)
	}
	return b
}

// prefillTime is how long an idle engine takes to prefill n tokens, in
// chunks of its token budget per step.
func prefillTime(n int, ec engine.Config) time.Duration {
	var d time.Duration
	for n > 0 {
		c := min(n, ec.MaxNumBatchedTokens)
		d += engine.PrefillTime(c, ec.SpeedupRatio)
		n -= c
	}
	return d
}

// ReuseBound is ComputeBounds' Reuse.
func ReuseBound(trace []Request, cfg Config) float64 {
	c := cfg
	c.Workers, c.Engine.NumGPUBlocks = 1, 1
	return ComputeBounds(trace, c).Reuse
}

// lru is a set of block hashes of bounded size that forgets the least
// recently touched first: a map into an intrusive doubly linked list over
// a slice, so that a million blocks cost no allocation per touch.
type lru struct {
	cap   int
	slot  map[uint64]int32
	nodes []lruNode
	head  int32 // most recent; -1 when empty
	tail  int32 // least recent
}

type lruNode struct {
	hash       uint64
	prev, next int32
}

func newLRU(capacity int) *lru {
	return &lru{cap: max(capacity, 1), slot: map[uint64]int32{}, head: -1, tail: -1}
}

func (l *lru) has(h uint64) bool {
	_, ok := l.slot[h]
	return ok
}

func (l *lru) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *lru) pushFront(i int32) {
	n := &l.nodes[i]
	n.prev, n.next = -1, l.head
	if l.head >= 0 {
		l.nodes[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}

// touch makes h the most recent, adding it (and evicting the least recent
// when full) if absent.
func (l *lru) touch(h uint64) {
	if i, ok := l.slot[h]; ok {
		l.unlink(i)
		l.pushFront(i)
		return
	}
	var i int32
	if len(l.nodes) < l.cap {
		i = int32(len(l.nodes))
		l.nodes = append(l.nodes, lruNode{})
	} else {
		i = l.tail
		l.unlink(i)
		delete(l.slot, l.nodes[i].hash)
	}
	l.nodes[i].hash = h
	l.slot[h] = i
	l.pushFront(i)
}
