package replay

import (
	"math"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
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
	// Capacity is the compute bound on any router's sustainable rate.
	Capacity Capacity
}

// ComputeBounds computes a trace's bounds for a cluster.
func ComputeBounds(trace []Request, cfg Config) Bounds {
	bs := cfg.Engine.BlockSize
	seen := map[uint64]struct{}{}
	lru := newLRU(cfg.Workers * cfg.Engine.NumGPUBlocks)
	var tokens []uint32
	var blocks []kvhash.Block
	reuse, pooled, total := 0, 0, 0
	var uncachedAll, decodeAll int64
	var first, last time.Duration
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
		// The infinite cache's prefix, for the capacity bound: what any
		// engine could have cached from earlier requests.
		seenPrefix := 0
		for seenPrefix < hittable {
			if _, ok := seen[blocks[seenPrefix].Sequence]; !ok {
				break
			}
			seenPrefix++
		}
		uncachedAll += int64(len(tokens) - seenPrefix*bs)
		// The first output token comes with the last prefill step; each
		// further one takes a decode step (the replay's requests have no
		// stop tokens).
		decodeAll += int64(max(r.OutputLength-1, 0))
		if len(floors) == 0 {
			first, last = r.Arrival, r.Arrival
		}
		first, last = min(first, r.Arrival), max(last, r.Arrival)
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
	b := Bounds{FloorTTFT: percentiles(floors),
		Capacity: capacityBound(cfg.Engine.Timing(), cfg.Engine.MaxNumSeqs, cfg.Workers, uncachedAll, decodeAll, last-first)}
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

// Capacity is a compute bound on goodput: the highest rate scale at which
// the trace's work, done as cheaply as the engines' published timing model
// allows (the model the mocker runs by and the router reads), keeps every
// engine at most fully busy. Above it no router can keep up: work arrives
// faster than the cluster can do it, and queues grow for as long as the
// trace lasts. It is optimistic for the router in every assumption, so
// that it is an upper bound whatever the router does:
//   - only the prompt tokens an infinite cache could not have served
//     are computed (the reuse bound's misses, at least the pooled
//     bound's: no eviction, so no router's placement can hit more), and
//     no request is ever preempted and recomputed;
//   - every prefill step computes the chunk size with the cheapest time
//     per token (PrefillMs(t)/t is least at sqrt(per-batch/quadratic)
//     tokens, within the step budget), as if decode tokens took none of
//     the budget;
//   - every decode step carries a full batch (min(max_num_seqs, token
//     budget) requests) at the KV usage where a step is cheapest (the
//     model's minimum over usage 0..1, however few blocks that is);
//   - the work is balanced perfectly over the workers and spread
//     evenly over the trace's arrival span (no burst is harder than the
//     average).
//
// Per engine, the work offered per second at rate scale s is then
// s x (PrefillWork + DecodeWork) / (Workers x Span), and Rate is the s
// at which that is 1. A finite trace can still meet a TTFT SLO somewhat
// above Rate, by leaving a backlog of (s/Rate - 1) x Span/s per engine
// at its last arrival; on a trace long against the SLO that is no room.
type Capacity struct {
	// UncachedTokens are the prompt tokens an infinite cache misses (at
	// least one per request: its last prompt token gives the first
	// output token's logits); DecodeTokens, the output tokens after each
	// request's first.
	UncachedTokens, DecodeTokens int64
	// PrefillChunk is the step size with the cheapest prefill per token,
	// PrefillMsPerToken that cost.
	PrefillChunk      int
	PrefillMsPerToken float64
	// DecodeBatch requests share each decode step of DecodeMsPerStep.
	DecodeBatch     int
	DecodeMsPerStep float64
	// PrefillWork and DecodeWork are the engine time, summed over all
	// engines, those tokens take at these costs.
	PrefillWork, DecodeWork time.Duration
	// Workers share the work; Span is the time from the trace's first
	// arrival to its last (at rate scale 1).
	Workers int
	Span    time.Duration
	// Rate is the capacity bound's rate scale; +Inf for a trace whose
	// requests all arrive at once (no rate to speak of) or that has no
	// work.
	Rate float64
}

// Busy is the fraction of each engine's time the trace's work needs at a
// rate scale, at the bound's costs: above 1, no router can keep up.
func (c Capacity) Busy(rate float64) float64 {
	if c.Rate <= 0 || math.IsInf(c.Rate, 1) {
		return 0
	}
	return rate / c.Rate
}

// capacityBound computes Capacity for a cluster of workers engines that
// run m, with at most maxSeqs requests in a step.
func capacityBound(m timingmodel.Model, maxSeqs, workers int, uncached, decode int64, span time.Duration) Capacity {
	c := Capacity{UncachedTokens: uncached, DecodeTokens: decode, Workers: workers, Span: span,
		DecodeBatch: max(min(maxSeqs, m.MaxBatchedTokens), 1)}
	c.PrefillChunk, c.PrefillMsPerToken = cheapestPrefill(m)
	c.DecodeMsPerStep = cheapestDecode(m)
	c.PrefillWork = timingmodel.Duration(float64(uncached) * c.PrefillMsPerToken)
	c.DecodeWork = timingmodel.Duration(float64(decode) / float64(c.DecodeBatch) * c.DecodeMsPerStep)
	work := c.PrefillWork + c.DecodeWork
	if work <= 0 || span <= 0 {
		c.Rate = math.Inf(1)
		return c
	}
	c.Rate = float64(workers) * float64(span) / float64(work)
	return c
}

// cheapestPrefill is the step size in 1..MaxBatchedTokens with the least
// prefill time per token, and that time in ms. PrefillMs(t)/t is
// quadratic*t + per-token + per-batch/t: convex in t, least at
// sqrt(per-batch/quadratic), so the best integer is next to it (or the
// budget, when the quadratic term is zero or the optimum is beyond it).
func cheapestPrefill(m timingmodel.Model) (int, float64) {
	budget := max(m.MaxBatchedTokens, 1)
	candidates := []int{1, budget}
	if m.PrefillQuadratic > 0 {
		opt := math.Sqrt(m.PrefillPerBatch / m.PrefillQuadratic)
		for _, t := range []float64{math.Floor(opt), math.Ceil(opt)} {
			if t >= 1 && t <= float64(budget) {
				candidates = append(candidates, int(t))
			}
		}
	}
	best, bestMs := 0, math.Inf(1)
	for _, t := range candidates {
		if ms := m.PrefillMs(float64(t)) / float64(t); ms < bestMs {
			best, bestMs = t, ms
		}
	}
	return best, bestMs
}

// cheapestDecode is the least decode step time in ms over KV usage 0..1:
// at an end, or at the vertex of a convex quadratic, never below the
// model's minimum step.
func cheapestDecode(m timingmodel.Model) float64 {
	best := min(m.DecodeMs(0), m.DecodeMs(1))
	if m.DecodeQuadratic > 0 {
		if u := -m.DecodeLinear / (2 * m.DecodeQuadratic); u > 0 && u < 1 {
			best = min(best, m.DecodeMs(u))
		}
	}
	return best
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
