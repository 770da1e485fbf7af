package replay

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
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
	// PooledHost is Pooled for one LRU cache as large as all the engines'
	// GPU and host tiers together (Workers x (NumGPUBlocks +
	// NumHostBlocks) blocks), 0 without host tiers: a trace whose reuse
	// the host tiers serve has PooledHost near Reuse and Pooled well
	// below it.
	PooledHost float64
	// FloorTTFT are the p50, p90 and p99 of each request's TTFT alone on an
	// idle engine whose cache holds what the pooled cache held: the
	// prefill of its uncached tokens in MaxNumBatchedTokens chunks.
	FloorTTFT [3]time.Duration
	// Capacity is the compute bound on any router's sustainable rate.
	Capacity Capacity
	// requests are the trace's arrivals and the prefill each must do
	// itself, for Horizon.
	requests []horizonRequest
}

// ComputeBounds computes a trace's bounds for a cluster.
func ComputeBounds(trace []Request, cfg Config) Bounds {
	bs := cfg.Engine.BlockSize
	// How many requests' prompts hold each full block (capped at 2): a
	// block in one prompt only is private to that request (Capacity).
	holders := map[uint64]uint8{}
	var tokens []uint32
	var blocks []kvhash.Block
	for _, r := range trace {
		tokens = Tokens(r, cfg.TraceBlockSize, tokens)
		blocks = kvhash.Hashes(tokens, bs, blocks[:0])
		for _, b := range blocks {
			holders[b.Sequence] = min(holders[b.Sequence]+1, 2)
		}
	}
	seen := map[uint64]struct{}{}
	// With host tiers, a second cache as large as GPU and host together.
	var hostLRU *lru
	if cfg.Engine.NumHostBlocks > 0 {
		hostLRU = newLRU(cfg.engines() * (cfg.Engine.NumGPUBlocks + cfg.Engine.NumHostBlocks))
	}
	lru := newLRU(cfg.engines() * cfg.Engine.NumGPUBlocks)
	reuse, pooled, pooledHost, total := 0, 0, 0, 0
	var work traceWork
	var first, last time.Duration
	floors := make([]time.Duration, 0, len(trace))
	reqs := make([]horizonRequest, 0, len(trace))
	// In arrival order, as the engines see the requests (the replay
	// routes requests that arrive together in trace order): "earlier"
	// below is earlier in it.
	order := make([]int, len(trace))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(trace[a].Arrival, trace[b].Arrival) })
	for _, i := range order {
		r := trace[i]
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
		own := len(tokens) - seenPrefix*bs
		work.Uncached += int64(own)
		work.OwnSquares += float64(own) * float64(own)
		reqs = append(reqs, horizonRequest{arrival: r.Arrival, work: float64(own)})
		// The first output token comes with the last prefill step; each
		// further one takes a decode step (the replay's requests have no
		// stop tokens).
		work.Decode += int64(max(r.OutputLength-1, 0))
		shared := 0
		for shared < len(blocks) && holders[blocks[shared].Sequence] > 1 {
			shared++
		}
		work.HeldBlockSteps += privateBlockSteps(len(tokens), r.OutputLength, bs, len(blocks)-shared)
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
		if hostLRU != nil {
			n := 0
			for n < hittable && hostLRU.has(blocks[n].Sequence) {
				n++
			}
			for i := len(blocks) - 1; i >= 0; i-- {
				hostLRU.touch(blocks[i].Sequence)
			}
			pooledHost += n
		}
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
		Capacity: capacityBound(cfg.Engine.Timing(), cfg.Engine.MaxNumSeqs, cfg.engines(), cfg.Engine.NumGPUBlocks, work, last-first)}
	// Tokens to the least time they take (Horizon).
	for i := range reqs {
		reqs[i].work *= b.Capacity.PrefillMsPerToken
	}
	b.requests = reqs
	if total > 0 {
		b.Reuse = float64(reuse) / float64(total)
		b.Pooled = float64(pooled) / float64(total)
		b.PooledHost = float64(pooledHost) / float64(total)
	}
	return b
}

// prefillTime is how long an idle engine takes to prefill n tokens, in
// chunks of its token budget per step, up to the first token: the steps,
// each a prefill step alone, and the request's overhead once.
func prefillTime(n int, ec simengine.Config) time.Duration {
	if n <= 0 {
		return 0
	}
	d := simengine.RequestOverhead(ec.SpeedupRatio)
	for n > 0 {
		c := min(n, ec.MaxNumBatchedTokens)
		d += simengine.PrefillTime(c, ec.SpeedupRatio) - simengine.RequestOverhead(ec.SpeedupRatio)
		n -= c
	}
	return d
}

// Capacity is a compute bound on goodput: the highest rate scale at which
// the trace's work, done as cheaply as the engines' published timing model
// allows (the model the mocker runs by and the router reads), keeps every
// engine at most fully busy. Above it no router can keep up: work arrives
// faster than the cluster can do it, and queues grow for as long as the
// trace lasts.
//
// The work W is a lower bound on the engine time of every run that serves
// the whole trace, whatever the routing. A step computes p new prompt
// tokens and has d decoding requests, each of which makes one token; it
// takes Prefill(p) when d = 0, and Decode(u) + Piggyback(p) when d > 0
// (Piggyback is Prefill without its per-step constant: timingmodel's
// StepMs), u being the fraction of the engine's N KV blocks held by its
// running requests (distinct blocks: a block shared by several counts
// once). Then:
//
//  1. Prefill. A step's prefill is its constant (alone) and per-token
//     parts, Prefill(p) - quadratic p^2 >= c p with c = per-token +
//     constant / budget (p <= budget), and beside decodes per-token p,
//     plus its attention: quadratic x the sum of (a+n)^2 - a^2 over its
//     chunks, n tokens of a sequence after its a before
//     (timingmodel.Attention). PrefillMsPerToken is the smaller of the
//     two per-token costs when the trace has decode tokens (else no step
//     decodes, and it is c). Summed over the steps of all engines, p adds
//     up to at least the prompt tokens an infinite cache misses
//     (UncachedTokens: a block an earlier request held may hit, nothing
//     else can; a recomputed token only adds to p); and a request's
//     chunks add up to at least the square of the tokens it computes
//     (the sum telescopes to (a0+m)^2 - a0^2 >= m^2 for m tokens after a
//     cached prefix a0), so at least the square of those it misses in an
//     infinite cache: AttentionWork is quadratic x that sum.
//  2. Decode. Decode(u) >= a + b u on 0..1 with a, b >= 0: the chord of a
//     concave quadratic, the tangent at 0 of a convex one (the max with
//     DecodeMin only raises the left side), or b = 0 and a the model's
//     least step at any usage. With d <= B = min(max_num_seqs, budget),
//     a >= (a/B) d; and N u >= the sum, over the step's decoding requests
//     r, of a set of blocks private(r) that r holds, if these sets are
//     disjoint. So each decoding request's token costs at least a/B plus
//     b/N per block of private(r), and summing over tokens instead of
//     steps, the decode time of a run is at least
//     a/B x DecodeTokens + b/N x HeldBlockSteps (DecodeWork), where
//     HeldBlockSteps adds |private(r)| over each request's decode steps.
//     That sum does not depend on the rate or on how requests batch.
//  3. private(r). A request with prompt length P has F = P/bs full prompt
//     blocks; while it makes its (k+1)th token (k = 1 .. output-1) it holds
//     ceil((P+k)/bs) blocks. Its unique blocks are the full prompt blocks
//     no other request's prompt has (they are a suffix of its F: the block
//     hash chains its prefix), U of them. private(r) is those U blocks
//     and, when U >= 1, its blocks past the F full ones (the partial prompt
//     tail and its answer, ceil((P+k)/bs) - F). Disjointness: another
//     request can hold one of r's unique blocks only by a prefix match on
//     its hash, which its prompt would then have; it can hold one of r's
//     later blocks (allocated by r) only by matching r's whole chain up to
//     it, so r's last full block would not be unique. Both sets of r count
//     for no other request.
//
// Per engine, the work offered per second at rate scale s is then
// s x W / (Workers x Span), and Rate is the s at which that is 1: the
// best case of perfect balance, work spread evenly over the arrival span,
// and no request rejected. Rate bounds the rate a cluster can sustain; a
// finite trace can still meet a TTFT SLO somewhat above it, because work
// can run on after the last arrival: the decode of the last requests, and
// a backlog of (s/Rate - 1) x Span/s per engine, that no first token waits
// for. (kv on the shipped low-reuse trace meets 2 s at x11.3 against a
// bound of x11.2; its engines were busy 1274 s there against W = 887 s, so
// 45% of a span's time after the last arrival.)
//
// One case is outside the argument: a request preempted after its first
// token recomputes, and the step that ends the recompute makes its next
// token as a prefill, so if that step has no decoding request at all its
// token pays no decode term. Each such token can lower the time below W by
// at most a/B + b x |private(r)|/N (about 14 ms with the default model for
// a request holding half an engine's blocks, against the minutes of engine
// time a trace takes); it needs a preemption (the engine's free and
// evictable blocks ran short) and then a step whose every scheduled
// request is in prefill, so it is rare.
type Capacity struct {
	// UncachedTokens are the prompt tokens an infinite cache misses (at
	// least one per request: its last prompt token gives the first
	// output token's logits); DecodeTokens, the output tokens after each
	// request's first.
	UncachedTokens, DecodeTokens int64
	// HeldBlockSteps adds up, over every request's decode steps, the KV
	// blocks private to it that it holds (see above).
	HeldBlockSteps int64
	// KVBlocks is the blocks of each engine (N above).
	KVBlocks int
	// PrefillChunk is the step size with the cheapest prefill per token,
	// PrefillMsPerToken that cost.
	PrefillChunk      int
	PrefillMsPerToken float64
	// DecodeBatch requests share each decode step, which costs at least
	// DecodeMsPerStep plus DecodeMsPerUsage per unit of KV usage (the
	// fraction of the engine's blocks in use).
	DecodeBatch                       int
	DecodeMsPerStep, DecodeMsPerUsage float64
	// AttentionWork is the prefill's attention term of those tokens,
	// request by request (point 1).
	AttentionWork time.Duration
	// PrefillWork and DecodeWork are the engine time, summed over all
	// engines, those tokens take at these costs (PrefillWork's includes
	// AttentionWork); HeldWork is the part of
	// DecodeWork that the blocks held cost (DecodeMsPerUsage x
	// HeldBlockSteps / KVBlocks).
	PrefillWork, DecodeWork, HeldWork time.Duration
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

// traceWork is what a trace asks of the engines, for the capacity bound.
type traceWork struct {
	// Uncached prompt tokens, decode tokens, and held private block-steps
	// (Capacity's UncachedTokens, DecodeTokens and HeldBlockSteps).
	Uncached, Decode, HeldBlockSteps int64
	// OwnSquares adds up, over the requests, the square of the prompt
	// tokens an infinite cache misses of each (Capacity's AttentionWork).
	OwnSquares float64
}

// capacityBound computes Capacity for a cluster of workers engines of
// kvBlocks blocks that run m, with at most maxSeqs requests in a step.
func capacityBound(m timingmodel.Model, maxSeqs, workers, kvBlocks int, w traceWork, span time.Duration) Capacity {
	c := Capacity{UncachedTokens: w.Uncached, DecodeTokens: w.Decode, HeldBlockSteps: w.HeldBlockSteps, KVBlocks: kvBlocks,
		Workers: workers, Span: span, DecodeBatch: max(min(maxSeqs, m.MaxBatchedTokens), 1)}
	// With decode tokens to make, prompt tokens can ride in decode steps,
	// whose own time DecodeWork counts (point 1).
	beside := -1.0
	if w.Decode > 0 {
		beside = 0
	}
	c.PrefillChunk, c.PrefillMsPerToken = cheapestPrefill(m, beside)
	c.AttentionWork = timingmodel.Duration(m.PrefillQuadratic * w.OwnSquares)
	c.PrefillWork = timingmodel.Duration(float64(w.Uncached)*c.PrefillMsPerToken) + c.AttentionWork
	// Two valid lower bounds on the decode time: the cheapest step for
	// every token, or the line a + b u; the larger one holds.
	steps := float64(w.Decode) / float64(c.DecodeBatch)
	c.DecodeMsPerStep = cheapestDecode(m)
	c.DecodeWork = timingmodel.Duration(steps * c.DecodeMsPerStep)
	if a, b := decodeLine(m); b > 0 && kvBlocks > 0 {
		held := timingmodel.Duration(b * float64(w.HeldBlockSteps) / float64(kvBlocks))
		if d := timingmodel.Duration(steps*a) + held; d > c.DecodeWork {
			c.DecodeMsPerStep, c.DecodeMsPerUsage, c.DecodeWork, c.HeldWork = a, b, d, held
		}
	}
	work := c.PrefillWork + c.DecodeWork
	if work <= 0 || span <= 0 {
		c.Rate = math.Inf(1)
		return c
	}
	c.Rate = float64(workers) * float64(span) / float64(work)
	return c
}

// decodeLine is a line a + b u at or below the model's decode step time on
// usage 0..1, with a, b >= 0, or b = 0 when there is none with b > 0 this
// way. Decode(u) = max(DecodeMin, q(u)) >= q(u) with q quadratic: a
// concave q lies above its chord from u = 0 to 1, a convex one above its
// tangent at 0.
func decodeLine(m timingmodel.Model) (a, b float64) {
	q := func(u float64) float64 { return m.DecodeQuadratic*u*u + m.DecodeLinear*u + m.DecodeBase }
	a, b = q(0), q(1)-q(0)
	if m.DecodeQuadratic > 0 {
		b = m.DecodeLinear
	}
	if a < 0 || !(b > 0) {
		return 0, 0
	}
	return a, b
}

// privateBlockSteps adds up the blocks private to a request (Capacity,
// point 3) over its decode steps: prompt tokens, output tokens, tokens
// per block, and its unique full prompt blocks. While it makes its
// (k+1)th token it holds ceil((prompt+k)/bs) blocks, prompt/bs of them
// full prompt blocks.
func privateBlockSteps(prompt, output, bs, unique int) int64 {
	steps := int64(max(output-1, 0))
	if steps == 0 || unique <= 0 {
		return 0
	}
	full := int64(prompt / bs)
	later := ceilSum(int64(prompt)+steps, int64(bs)) - ceilSum(int64(prompt), int64(bs)) - full*steps
	return int64(unique)*steps + later
}

// ceilSum is the sum of ceil(m/bs) for m = 1..n: bs values of m round up
// to each i = 1..n/bs, and the n%bs left to n/bs + 1.
func ceilSum(n, bs int64) int64 {
	q, r := n/bs, n%bs
	return bs*q*(q+1)/2 + r*(q+1)
}

// cheapestPrefill is the step size in 1..MaxBatchedTokens with the least
// prefill time per token apart from attention (which Capacity counts per
// request, AttentionWork), and that time in ms, over two kinds of step: a
// prefill step alone, (StepConstant + PrefillPerToken t)/t, and, when
// beside >= 0, a chunk of t prompt tokens in a step that decodes too,
// (beside + PrefillPerToken t)/t, beside being what such a step costs
// apart from its prompt tokens (the bound counts: 0 where the decode step
// is counted on its own). Both fall with t, or stay level: the whole
// budget, or one token a step when every size costs the same (the first
// kept).
func cheapestPrefill(m timingmodel.Model, beside float64) (int, float64) {
	budget := max(m.MaxBatchedTokens, 1)
	best, bestMs := 0, math.Inf(1)
	try := func(constant float64) {
		for _, t := range []int{1, budget} {
			if ms := (constant + m.PrefillPerToken*float64(t)) / float64(t); ms < bestMs {
				best, bestMs = t, ms
			}
		}
	}
	try(m.StepConstant())
	if beside >= 0 {
		try(beside)
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

// SplitCapacity is Capacity for a cluster split into a prefill pool of
// Prefill engines and a decode pool of Decode engines (the disaggregated
// modes): the trace's work done as cheaply as the model allows, each pool
// doing its own part, and the highest rate scale at which neither pool is
// more than fully busy.
//
//   - The prefill pool's engines never decode (a prefill leg ends with the
//     step that makes its first token), so every step there is a prefill
//     step alone: Prefill(t) >= c t, c the least Prefill(t)/t over
//     1 <= t <= budget (PrefillMsPerToken; Capacity's point 1 without the
//     steps that decode). It computes the prompts an infinite cache
//     misses, or fewer when some run on the decode pool.
//   - The decode pool makes every output token: Capacity's DecodeWork
//     (point 2 holds per pool: a decode engine has N blocks, B requests a
//     step at most). A prompt prefilled there (its prefill local) costs at
//     least Capacity's PrefillMsPerToken per token, the prompt riding in
//     the decode steps.
//
// Always is the bound with every prompt on the prefill pool, as
// disagg-always runs: min(Prefill x Span / (UncachedTokens x c), Decode x
// Span / DecodeWork). Auto lets a share of the prompts (LocalShare) run
// on the decode pool, as --disaggregation auto may: the share that
// balances the two pools, when the decode pool has time to spare; it is
// at least Always. Neither counts the objectives: the inter-token gaps
// that a prompt in a decode step causes bound the local share long
// before this does.
type SplitCapacity struct {
	Prefill, Decode int
	// PrefillChunk is the prefill-only step size with the least time per
	// token, PrefillMsPerToken that time, PrefillWork the prefill pool's
	// time for every uncached prompt token at it.
	PrefillChunk      int
	PrefillMsPerToken float64
	PrefillWork       time.Duration
	// Always and Auto are the two bounds' rate scales (+Inf when the
	// trace has no span or no work), LocalShare the share of the uncached
	// prompt tokens on the decode pool at Auto.
	Always, Auto, LocalShare float64
}

// Split is the bound for a cluster of prefill + decode engines of model m,
// from c's work (c.Workers is not used).
func (c Capacity) Split(m timingmodel.Model, prefill, decode int) SplitCapacity {
	s := SplitCapacity{Prefill: prefill, Decode: decode, Always: math.Inf(1), Auto: math.Inf(1)}
	s.PrefillChunk, s.PrefillMsPerToken = cheapestPrefill(m, -1)
	s.PrefillWork = timingmodel.Duration(float64(c.UncachedTokens)*s.PrefillMsPerToken) + c.AttentionWork
	span := c.Span.Seconds()
	if span <= 0 || prefill < 0 || decode <= 0 {
		if decode <= 0 {
			s.Always, s.Auto = 0, 0
		}
		return s
	}
	// Each pool's rate: its engines' time over span at rate 1, over the
	// work it is given (+Inf for none).
	rate := func(engines int, work float64) float64 {
		if work <= 0 {
			return math.Inf(1)
		}
		return float64(engines) * span / work
	}
	wp, wd := s.PrefillWork.Seconds(), c.DecodeWork.Seconds()
	if prefill > 0 {
		s.Always = min(rate(prefill, wp), rate(decode, wd))
	} else {
		s.Always = 0
	}
	// A share f of the prompt tokens on the decode pool at Capacity's
	// cost per token, their attention left on the prefill pool: a
	// relaxation (a prompt run locally takes its attention along, which
	// costs the same on either pool), so the rate it allows bounds every
	// assignment of whole prompts. The prefill pool's rate rises with f,
	// the decode pool's falls; the best f is where they meet,
	// (D wp - P wd) / (D wt + P wl), wt and wl being every prompt token's
	// time on the prefill pool and on the decode pool apart from
	// attention, wp the prefill pool's work with it; clamped to 0..1.
	wt := wp - c.AttentionWork.Seconds()
	wl := float64(c.UncachedTokens) * c.PrefillMsPerToken / 1e3
	f := 1.0
	if den := float64(decode)*wt + float64(prefill)*wl; den > 0 && prefill > 0 {
		f = min(max((float64(decode)*wp-float64(prefill)*wd)/den, 0), 1)
	}
	s.LocalShare = f
	s.Auto = min(rate(decode, f*wl+wd), rate(prefill, wp-f*wt))
	if prefill == 0 {
		// Every prompt on the decode pool, with its attention.
		s.Auto = rate(decode, wl+c.AttentionWork.Seconds()+wd)
	}
	s.Auto = max(s.Auto, s.Always)
	return s
}
