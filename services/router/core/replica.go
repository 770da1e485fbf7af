package core

import (
	"math"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Observer hears about the decisions a Core makes itself (not those it
// applies from other replicas).
type Observer interface {
	Routed(id, namespace string, w index.WorkerID, prefillBlocks int, hashes []uint64)
	PrefillDone(id string)
	Freed(id string)
}

// ApplyReplica applies another replica's change: its load (and, in
// approximate mode, its predicted blocks) becomes part of this replica's
// view, so that N replicas route as one.
// at is when the change happened (predictions age from then, and how late
// it is heard measures the sync delay, see unheard).
func (c *Core) ApplyReplica(ev *routerv1.ReplicaEvent, at time.Time) {
	switch k := ev.GetKind().(type) {
	case *routerv1.ReplicaEvent_Routed:
		r := k.Routed
		w := index.WorkerID{Instance: r.InstanceId, DPRank: r.DpRank}
		c.mu.Lock()
		_, live := c.refs[r.InstanceId]
		if live {
			c.arrivals.add(at)
			c.unheard.heardRoute(at, c.now(), int(r.PrefillBlocks))
		}
		c.mu.Unlock()
		if !live || r.RequestId == "" {
			return
		}
		c.load.Add(r.RequestId, w, int(r.PrefillBlocks), r.BlockHashes)
		if c.approx != nil {
			c.approx.Predict(w, r.BlockHashes, at)
		}
		if c.pending != nil && c.mode == ModeKV {
			// Predicted where the sender routed it, beyond what this
			// replica's index confirms there.
			from := 0
			if o := c.idx.Overlaps(r.BlockHashes); len(o) > 0 {
				for _, x := range o {
					if x.Worker == w {
						from = x.Blocks
					}
				}
			}
			c.pending.Add(r.RequestId, w, r.BlockHashes[from:], at)
		}
	case *routerv1.ReplicaEvent_PrefillComplete:
		c.load.PrefillDone(k.PrefillComplete)
	case *routerv1.ReplicaEvent_Freed:
		c.free(k.Freed)
	}
}

// RoutedEvent is the replica sync message of a routing decision: the
// request's worker, its prefill blocks and its block hashes (which the
// other replicas count as load and, in kv mode, as predicted blocks).
func RoutedEvent(id string, w index.WorkerID, prefill int, hashes []uint64) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_Routed{Routed: &routerv1.ReplicaRouted{
		RequestId: id, InstanceId: w.Instance, DpRank: w.DPRank, PrefillBlocks: uint32(prefill), BlockHashes: hashes}}}
}

// PrefillDoneEvent is the replica sync message of a request's first token.
func PrefillDoneEvent(id string) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_PrefillComplete{PrefillComplete: id}}
}

// FreedEvent is the replica sync message of a request's end.
func FreedEvent(id string) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_Freed{Freed: id}}
}

// unheard is what a replica knows of the decisions its peers made that it
// has not heard yet: their routing rate, how late their sync messages
// arrive, and how much prefill their requests bring. Peers decide from the
// same state this replica sees, so in the sync delay they send their
// requests where it would send its own: to the cheapest worker. A replica
// that took that worker too would pile onto it (herding), where one router
// would have sent the next request elsewhere. See spread. The zero value
// is ready; it is guarded by Core.mu.
type unheard struct {
	// routes are the send times of the peers' recent routing decisions.
	routes arrivals
	// delayMs is the mean time from a peer's decision to this replica
	// hearing of it; prefillBlocks the mean blocks a peer's request had
	// to prefill. Both are moving averages over about rateWindow
	// decisions, 0 until one is heard.
	delayMs, prefillBlocks float64
	heard                  int
}

// heardRoute records a peer's decision made at at, heard at now.
func (u *unheard) heardRoute(at, now time.Time, prefillBlocks int) {
	u.routes.add(at)
	// A peer's clock ahead of this one's reads as no delay.
	d := max(float64(now.Sub(at))/float64(time.Millisecond), 0)
	// A mean over the decisions heard so far, then a moving one: the
	// first samples count fully, later ones 1/rateWindow.
	u.heard = min(u.heard+1, rateWindow)
	a := 1 / float64(u.heard)
	u.delayMs += a * (d - u.delayMs)
	u.prefillBlocks += a * (float64(prefillBlocks) - u.prefillBlocks)
}

// expected is how many peer decisions are expected to have been made and
// not heard of yet at now: the peers' rate times the sync delay.
func (u *unheard) expected(now time.Time) float64 {
	if u.delayMs <= 0 {
		return 0
	}
	return u.routes.perMs(now) * u.delayMs
}

// spreadLocked revisits an argmin decision (temperature 0) in view of the
// peers' decisions not heard yet. They went, in expectation, m = rate x
// delay requests of a peer request's mean prefill each, to the cheapest
// workers: filled like water from the lowest cost up, each adding its
// prefill time to the cost of the worker it lands on. After that filling
// every worker it reached costs the same (the water level), so the
// choice among them is indifferent in expectation, and the one that does
// not herd is to take each with the share of the water it holds, as the
// peers (running the same rule) do. A worker cheaper than the next by
// more than the water stays the only choice: near-ties spread, clear
// winners do not. Without peers, or with every peer decision heard at
// once, m is 0 and the decision is Select's: one router decides as
// before. d.near is the buffer of the workers reached.
func (c *Core) spreadLocked(d *decision, chosen int, now time.Time) int {
	m := c.unheard.expected(now)
	if m <= 0 || chosen < 0 {
		return chosen
	}
	best := d.scored[chosen]
	// The prefill time of a mean peer request, on the cheapest worker:
	// what one of them adds to the cost of the worker it took.
	tokens := int(c.unheard.prefillBlocks*float64(d.blockSize) + 0.5)
	if tokens <= 0 || !best.Timing.Valid() {
		return chosen
	}
	water := m * best.Timing.TTFTMs(0, tokens, best.Decoding, best.Usage, d.params.OverlapWeight)
	if !(water > 0) || math.IsInf(water, 0) {
		return chosen
	}
	top := best.Cost + water
	d.near = d.near[:0]
	for i := range d.scored {
		if d.scored[i].Cost < top {
			d.near = append(d.near, i)
		}
	}
	if len(d.near) < 2 {
		return chosen
	}
	// Cheapest first (insertion sort: near-ties are few, and this keeps
	// the decision free of allocation).
	for i := 1; i < len(d.near); i++ {
		for j := i; j > 0 && d.scored[d.near[j]].Cost < d.scored[d.near[j-1]].Cost; j-- {
			d.near[j], d.near[j-1] = d.near[j-1], d.near[j]
		}
	}
	k, level := waterLevel(d.scored, d.near, water)
	if k < 2 {
		return chosen
	}
	r := c.rng.Float64() * water
	for _, i := range d.near[:k] {
		if r -= level - d.scored[i].Cost; r < 0 {
			return i
		}
	}
	return d.near[k-1]
}

// waterLevel pours water onto the costs of the candidates near lists
// (cheapest first): the k cheapest hold it, each up to the level, which
// stays at or below the next one's cost. Each holds level - its cost, and
// those shares sum to water.
func waterLevel(scored []scheduler.Candidate, near []int, water float64) (k int, level float64) {
	sum := 0.0
	for k < len(near) {
		cost := scored[near[k]].Cost
		if k > 0 && cost >= level {
			break
		}
		sum += cost
		k++
		level = (water + sum) / float64(k)
	}
	return k, level
}
