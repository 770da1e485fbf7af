package replay

import (
	"cmp"
	"slices"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// ChainFloor is a lower bound on each request's time to first token at
// cfg.RateScale that no router beats, with as many idle engines as it likes
// and no other request in their way: its p50, p90 and p99.
//
// The cached floor (Bounds.FloorTTFT) lets each request find cached all
// that the pooled cache would hold when it arrives, including the prompt
// of a request that arrived a moment before and is still being computed.
// An engine cannot do that: a block can be reused only once a request has
// computed it, and a prompt is computed in order from its first uncached
// block. So a request that reuses its first i blocks starts when the last
// of them exists (or at its arrival) and then computes the rest; it may
// also compute more itself to start sooner, and the bound takes the best
// of these. When turns of a conversation arrive faster than each one's
// prefill (a fan-out of tool calls), every turn waits for the one before:
// the floor is out of reach for any router.
//
// When each block can exist is itself bounded from below: the earliest any
// request holding it could have computed it, at the cheapest prefill rate
// per token the timing model allows (cheapestPrefill: a prefill step alone,
// or a chunk in a step that decodes too and so lasts at least the least
// decode step), from the best of its
// starting points. A later arrival never computes a block sooner than an
// earlier one holding the same prefix could (it has the same blocks to
// start from, later), so one pass in arrival order finds them. Cache
// capacity is not counted (an infinite cache only lowers the bound), nor
// the decode steps that share an engine's steps.
func ChainFloor(trace []Request, cfg Config) [3]time.Duration {
	return percentiles(chainFloors(trace, cfg))
}

// chainFloors is ChainFloor per request, in trace order. It walks the
// trace in arrival order (stable, as ComputeBounds does): the one pass
// needs every earlier arrival's blocks before a request's.
func chainFloors(trace []Request, cfg Config) []time.Duration {
	bs := cfg.Engine.BlockSize
	// A chunk beside decoding requests takes at least the least decode
	// step besides its tokens.
	m := cfg.Engine.Timing()
	_, perTokenMs := cheapestPrefill(m, cheapestDecode(m))
	perBlock := time.Duration(perTokenMs * float64(bs) * float64(time.Millisecond))
	exists := map[uint64]time.Duration{} // block -> the earliest it can exist
	var tokens []uint32
	var blocks []kvhash.Block
	lbs := make([]time.Duration, len(trace))
	order := make([]int, len(trace))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(trace[a].Arrival, trace[b].Arrival) })
	for _, n := range order {
		r := trace[n]
		at := time.Duration(float64(r.Arrival) / cfg.RateScale)
		tokens = Tokens(r, cfg.TraceBlockSize, tokens)
		blocks = kvhash.Hashes(tokens, bs, blocks[:0])
		// As in ComputeBounds: the last prompt token is always computed.
		hittable := (len(tokens) - 1) / bs
		// Starting from i reused blocks (those that exist, in order):
		// the first token comes prefill(rest) after start(i), and block
		// p >= i (of those nobody computed yet) exists at the earliest
		// start(i) + (p+1-i) blocks at the cheapest rate.
		best := prefillTime(len(tokens), cfg.Engine)
		startLess := at // min over i of start(i) - i blocks' cheapest time
		start := at
		known := 0
		for i := 1; i <= hittable; i++ {
			e, ok := exists[blocks[i-1].Sequence]
			if !ok {
				break
			}
			known = i
			start = max(start, e)
			best = min(best, start-at+prefillTime(len(tokens)-i*bs, cfg.Engine))
			startLess = min(startLess, start-time.Duration(i)*perBlock)
		}
		lbs[n] = best
		for p := known; p < len(blocks); p++ {
			e := startLess + time.Duration(p+1)*perBlock
			if old, ok := exists[blocks[p].Sequence]; !ok || e < old {
				exists[blocks[p].Sequence] = e
			}
		}
	}
	return lbs
}
