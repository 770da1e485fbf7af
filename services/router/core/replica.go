package core

import (
	"math"
	"slices"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Observer hears about the decisions a Core makes itself (not those it
// applies from other replicas).
type Observer interface {
	// Routed is a request routed to w, where it prefills prefillBlocks;
	// for a disaggregated pair w is the decode leg and prefill the
	// prefill leg (zero otherwise).
	// session is the request's session id, empty for none: it is now
	// bound to w. lora is its LoRA adapter, empty for none.
	Routed(id, namespace string, w index.WorkerID, prefillBlocks int, hashes []uint64, prefill Leg, session, lora string)
	PrefillDone(id string)
	Freed(id string)
}

// Leg is the prefill leg of a disaggregated request: its worker and the
// blocks it computes there. The zero Leg is none.
type Leg struct {
	Worker index.WorkerID
	Blocks int
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
			c.arrivals.add(at, c.arrivalWorkLocked(r), r.BlockHashes)
			c.unheard.heardRoute(at, c.now(), int(r.PrefillBlocks))
		}
		c.mu.Unlock()
		if live && r.SessionId != "" && ValidSessionID(r.SessionId) == nil {
			// Bound as of the decision, even when its request is over:
			// the binding outlives its turns.
			c.sessions.bind(r.SessionId, w, at)
		}
		if !live || r.RequestId == "" {
			return
		}
		hashes := slices.Clone(r.BlockHashes)
		// It takes its prompt's blocks of the worker's memory but those
		// running requests hold there (a decode leg too, which
		// prefills none of them).
		need := len(hashes) - c.load.SharedPrefix(w, hashes, c.indexedOn(w, hashes))
		var counted bool
		if r.PrefillInstanceId != 0 {
			counted = c.load.AddLeg(r.RequestId, w, need, hashes)
		} else {
			counted = c.load.AddNeed(r.RequestId, w, int(r.PrefillBlocks), need, hashes)
		}
		if !counted {
			return // this replica heard its free first
		}
		if r.LoraName != "" && ValidLoRAName(r.LoraName) == nil {
			// When its first token comes is the sender's prediction,
			// which this replica does not hear: from the decision on.
			c.loras.routed(r.RequestId, w, r.LoraName, at, at)
		}
		defer c.notify()
		if r.PrefillInstanceId != 0 {
			pw := index.WorkerID{Instance: r.PrefillInstanceId, DPRank: r.PrefillDpRank}
			c.recordPrefillLeg(r.RequestId, pw, int(r.PrefillLegBlocks), hashes, c.indexedOn(pw, hashes), at)
		}
		if c.approx != nil {
			c.approx.Predict(w, r.BlockHashes, at)
		}
		if c.pending != nil && c.comp.predicts {
			// Predicted where the sender routed it, beyond what this
			// replica's index confirms there.
			c.pending.AddShared(r.RequestId, w, hashes[c.indexedOn(w, hashes):], at)
		}
	case *routerv1.ReplicaEvent_PrefillComplete:
		c.prefillDone(k.PrefillComplete)
	case *routerv1.ReplicaEvent_Freed:
		c.free(k.Freed)
	}
}

// arrivalWorkLocked is the prefill time of the prompt of a request a peer
// routed, as the deciding router records its arrival: on the worker that
// computes the prompt, with that worker's timing model. That is the
// prefill leg's worker and blocks for a pair (the decode leg computes
// none of the prompt), the routed worker's own otherwise. A prefill
// worker this replica has no model of yet is priced with the routed
// worker's.
func (c *Core) arrivalWorkLocked(r *routerv1.ReplicaRouted) float64 {
	t, blocks := c.timingLocked(r.InstanceId), int(r.PrefillBlocks)
	if r.PrefillInstanceId != 0 {
		blocks = int(r.PrefillLegBlocks)
		if pt, ok := c.timing[r.PrefillInstanceId]; ok {
			t = pt
		}
	}
	return prefillMs(t, len(r.BlockHashes), blocks, c.blockSizeLocked(r.InstanceId))
}

// indexedOn is how many leading blocks of hashes the index confirms on w.
func (c *Core) indexedOn(w index.WorkerID, hashes []uint64) int {
	for _, x := range c.idx.Overlaps(hashes) {
		if x.Worker == w {
			return x.Blocks
		}
	}
	return 0
}

// RoutedEvent is the replica sync message of a routing decision: the
// request's worker, its prefill blocks, its block hashes (which the other
// replicas count as load and, in kv mode, as predicted blocks) and, for a
// disaggregated pair, its prefill leg.
func RoutedEvent(id string, w index.WorkerID, prefill int, hashes []uint64) *routerv1.ReplicaEvent {
	return PairRoutedEvent(id, w, prefill, hashes, Leg{})
}

// SessionRoutedEvent is RoutedEvent of a decision for a session, which
// binds the session to w on every replica.
func SessionRoutedEvent(id string, w index.WorkerID, prefill int, hashes []uint64, leg Leg, session string) *routerv1.ReplicaEvent {
	ev := PairRoutedEvent(id, w, prefill, hashes, leg)
	ev.GetRouted().SessionId = session
	return ev
}

// PairRoutedEvent is RoutedEvent of a decision with a prefill leg (the
// zero Leg: none): w is then the decode leg's worker.
func PairRoutedEvent(id string, w index.WorkerID, prefill int, hashes []uint64, leg Leg) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_Routed{Routed: &routerv1.ReplicaRouted{
		RequestId: id, InstanceId: w.Instance, DpRank: w.DPRank, PrefillBlocks: uint32(prefill), BlockHashes: hashes,
		PrefillInstanceId: leg.Worker.Instance, PrefillDpRank: leg.Worker.DPRank, PrefillLegBlocks: uint32(leg.Blocks)}}}
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
// would have sent the next request elsewhere. See spreadLocked. The zero value
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
	u.routes.add(at, 0, nil) // only their rate counts here
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
// peers' decisions not heard yet. They made, in expectation, m = rate x
// delay of them, from the state this replica sees. Their requests' own
// prefixes are anywhere, so what herds is the load-driven part: a mean peer
// request caching nothing goes to the workers where it costs least. Poured
// like water from the lowest such cost up (each adding its own time on the
// worker it takes), m of them reach a few workers. If this request's
// choice is not among them (its cached prefix is elsewhere), nothing
// herds there and it stands. If it is, the same water poured onto this
// request's own costs of the reached workers levels those it reaches: they
// cost the same in expectation, so the choice among them is indifferent,
// and the one that does not herd takes each with its share of the water,
// as a peer running the same rule does. A worker cheaper than the next by
// more than the water stays the only choice: near-ties spread, clear
// winners do not. Without peers, or with every peer decision heard at
// once, m is 0 and the decision is Select's: one router decides as before.
// d.near and d.costs are the decision's buffers.
func (c *Core) spreadLocked(d *decision, chosen int, now time.Time) int {
	m := c.unheard.expected(now)
	if m <= 0 || chosen < 0 {
		return chosen
	}
	tokens := int(c.unheard.prefillBlocks*float64(d.blockSize) + 0.5)
	if tokens <= 0 {
		return chosen
	}
	// Where the peers' unheard requests went: a mean peer request's cost
	// on each worker, caching nothing (a peer's own prefixes are
	// anywhere, its load-driven choices are where the load is lowest).
	n, weight := len(d.scored), d.params.OverlapWeight
	d.costs = slices.Grow(d.costs[:0], 2*n)[:2*n]
	mine, cold := d.costs[:n], d.costs[n:]
	coldBest := 0
	for i := range d.scored {
		s := &d.scored[i]
		mine[i] = s.Cost
		cold[i] = s.TTFTMs(tokens, float64(tokens)*float64(tokens), weight)
		if cold[i] < cold[coldBest] {
			coldBest = i
		}
	}
	// What one of them adds to the cost of the worker it took: its own
	// time there.
	cb := &d.scored[coldBest]
	water := m * cb.Timing.TTFTMs(0, tokens, cb.Decoding, cb.Usage, weight)
	if !(water > 0) || math.IsInf(water, 0) {
		return chosen
	}
	d.near = nearest(d.near[:0], cold, nil, cold[coldBest]+water)
	k, _ := waterLevel(cold, d.near, water)
	reached := d.near[:k]
	if !slices.Contains(reached, chosen) {
		// This request's choice is not where the others went (its
		// cached prefix is elsewhere): nothing herds there.
		return chosen
	}
	// Among the workers they reached, those near this request's best.
	d.near = nearest(d.near[:0], mine, reached, mine[chosen]+water)
	k, level := waterLevel(mine, d.near, water)
	if k < 2 {
		return chosen
	}
	r := c.rng.Float64() * water
	for _, i := range d.near[:k] {
		if r -= level - mine[i]; r < 0 {
			return i
		}
	}
	return d.near[k-1]
}

// nearest appends to out the candidates (of among, or all when nil) that
// cost less than top, cheapest first. It sorts by insertion: near-ties
// are few, and this keeps the decision free of allocation. among may
// alias out's array: it is read before out's entries are written.
func nearest(out []int, cost []float64, among []int, top float64) []int {
	if among == nil {
		for i, x := range cost {
			if x < top {
				out = append(out, i)
			}
		}
	} else {
		for _, i := range among {
			if cost[i] < top {
				out = append(out, i)
			}
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && cost[out[j]] < cost[out[j-1]]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// waterLevel pours water onto the costs of the candidates near lists
// (cheapest first): the k cheapest hold it, each up to the level, which
// stays at or below the next one's cost. Each holds level - its cost, and
// those shares sum to water.
func waterLevel(cost []float64, near []int, water float64) (k int, level float64) {
	sum := 0.0
	for k < len(near) {
		x := cost[near[k]]
		if k > 0 && x >= level {
			break
		}
		sum += x
		k++
		level = (water + sum) / float64(k)
	}
	return k, level
}
