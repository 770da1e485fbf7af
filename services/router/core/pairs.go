package core

import (
	"slices"
	"sync/atomic"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Pair routing: a model whose workers register the prefill and decode
// roles is served in pairs. A request's prompt is computed on a prefill
// worker (the prefill leg), whose KV the decode worker then pulls before
// it generates (the decode leg); or, when that is predicted slower, the
// whole request runs on one decode (or aggregated) worker, its prefill
// local. The decision prices both:
//
//	local  = KV's cost on the best decode or aggregated worker (its
//	         queue, the prompt it does not cache, the decodes beside it)
//	remote = KV's cost on the best prefill worker (its queue, the prompt
//	         it does not cache)
//	       + DecodeLeg's on the best decode worker (its queue, the last
//	         block, the decodes beside it, and the transfer of the blocks
//	         it does not cache)
//
// and --disaggregation auto takes the cheaper (a short uncached suffix or
// a busy prefill pool keeps the prefill local), always takes remote, off
// takes local. Each leg is chosen within its pool as the router's mode
// chooses (kv: the cheapest). A model with no prefill pool, or no decode
// worker, runs whole on its decode and aggregated workers; prefill
// workers are never given a whole request.
//
// Both legs are recorded: the decode leg in the core's load (as a leg:
// from the handoff it waits on its worker for admission until the
// worker's load report shows it decoding, see scheduler.Load.AddLeg) and
// predictions under the request's id; the prefill leg in a record of its
// own (legs), under the same id, on the prefill worker. The prefill leg
// ends when the request's prefill completes (the handoff reached the
// caller) or when it is freed, whichever comes first: a Free ends both
// legs.

// Disaggregation decisions, as the router counts them.
const (
	// DecisionRemotePrefill is a pair: prefill on a prefill worker.
	DecisionRemotePrefill = "remote_prefill"
	// DecisionLocalPrefill is a disaggregated model's request run whole
	// on one worker.
	DecisionLocalPrefill = "local_prefill"
)

// pools are the role groups of a disaggregated model's candidates, which
// resolveLocked orders aggregated, decode, prefill (each by instance id):
// [0, serve) serve whole requests, [agg, serve) are decode workers, which
// take decode legs, and [serve, n) are prefill workers, which take
// prefill legs.
type pools struct{ agg, serve int }

// poolOf is the group a role sorts into: aggregated 0, decode 1, prefill 2.
func poolOf(r commonv1.Role) int {
	switch r {
	case commonv1.Role_ROLE_DECODE:
		return 1
	case commonv1.Role_ROLE_PREFILL:
		return 2
	}
	return 0
}

// poolsOf groups cands (sorted by instance id) by role, keeping that order
// within each group, and returns the groups' bounds; nil, with cands as
// they are, when none registered the prefill or decode role.
func poolsOf(cands []candidate) *pools {
	if !slices.ContainsFunc(cands, func(c candidate) bool { return poolOf(c.in.GetRole()) != 0 }) {
		return nil
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return poolOf(a.in.GetRole()) - poolOf(b.in.GetRole()) })
	return countPools(cands)
}

// countPools are the bounds of cands, grouped by role.
func countPools(cands []candidate) *pools {
	p := &pools{}
	for _, c := range cands {
		switch poolOf(c.in.GetRole()) {
		case 0:
			p.agg++
			p.serve++
		case 1:
			p.serve++
		}
	}
	return p
}

// paired says whether a pair can be made: both a decode and a prefill
// worker among the n candidates.
func (p *pools) paired(n int) bool { return p.serve > p.agg && n > p.serve }

// each calls f with the bounds of each group: aggregated, decode and
// prefill workers, each sorted by instance id (the serving pool, its
// first two groups together, is not).
func (p *pools) each(n int, f func(from, to int)) {
	f(0, p.agg)
	f(p.agg, p.serve)
	f(p.serve, n)
}

// legs records the prefill legs of the pairs in flight: their load on the
// prefill workers and, in kv mode with events, the blocks predicted there.
type legs struct {
	load    *scheduler.Load
	pending *index.Pending // nil in approximate mode
	// seen is set once any pair was recorded: until then a free or a
	// prefill completion has no leg to end and skips looking.
	seen atomic.Bool
	// remote and local count the disaggregated decisions routed.
	remote, local atomic.Uint64
	// policies are the decode leg's policy by block size, serve the
	// serving pool's (serveCost) (guarded by Core.mu).
	policies map[int]*scheduler.Policy
	serve    *scheduler.Policy
}

// DisaggDecisions reports how many requests of disaggregated models this
// core routed with their prefill on a prefill worker (remote) and whole
// on one worker (local), since it started.
func (c *Core) DisaggDecisions() (remote, local uint64) {
	return c.legs.remote.Load(), c.legs.local.Load()
}

// link is the KV transfer's price at block size bs.
func (c *Core) link(bs int) scheduler.KVTransfer {
	if c.transferGbps <= 0 || c.bytesPerToken <= 0 {
		return scheduler.KVTransfer{}
	}
	// bits / (Gb/s) = ns; / 1e6 = ms.
	perBlock := float64(bs) * float64(c.bytesPerToken) * 8 / c.transferGbps / 1e6
	return scheduler.KVTransfer{LatencyMs: float64(c.transferRTT) / float64(time.Millisecond), MsPerBlock: perBlock}
}

// decodeLeg is scheduler.DecodeLeg over the link at block size bs, made
// once per block size (under c.mu).
func (c *Core) decodeLeg(bs int) *scheduler.Policy {
	if p, ok := c.legs.policies[bs]; ok {
		return p
	}
	if c.legs.policies == nil {
		c.legs.policies = map[int]*scheduler.Policy{}
	}
	p := scheduler.DecodeLeg(c.link(bs))
	c.legs.policies[bs] = &p
	return &p
}

// serveCost is the mode's cost with the wait for a running slot
// (scheduler.WithSlotWait), for a disaggregated model's serving pool,
// whose slots the decode legs fill (made once, under c.mu).
func (c *Core) serveCost() *scheduler.Policy {
	if c.legs.serve == nil {
		p := scheduler.WithSlotWait(c.comp.cost)
		c.legs.serve = &p
	}
	return c.legs.serve
}

// choosePair picks d's worker(s) for a disaggregated model, under c.mu:
// d.chosen is the decode (or whole-request) worker, d.prefill the prefill
// worker or -1. d.scored's costs are left as each worker's for the leg it
// would serve in the decision made.
func (c *Core) choosePair(d *decision, pl *pools) error {
	n := len(d.scored)
	cands, scored := d.cands, d.scored
	defer func() { d.cands, d.scored = cands, scored }()
	// within chooses among candidates [from, to) as the mode does, given
	// the policy's choice there.
	within := func(from, to, best int) (int, error) {
		d.cands, d.scored = cands[from:to], scored[from:to]
		i, err := c.comp.choose.choose(c, d, best)
		d.cands, d.scored = cands, scored
		return from + i, err
	}
	if pl.serve == 0 {
		return ErrNoWorker
	}
	serve := scored[:pl.serve]
	best, _ := c.serveCost().Select(serve, d.req, d.params, c.rng)
	local, err := within(0, pl.serve, best)
	if err != nil {
		return err
	}
	d.chosen, d.prefill, d.disagg = local, -1, DecisionLocalPrefill
	if !pl.paired(n) || !c.pairing.pairs || c.comp.named {
		return nil
	}
	// The prefill leg: the mode's cost over the prefill pool.
	pre := scored[pl.serve:]
	best, _ = c.comp.cost.Select(pre, d.req, d.params, c.rng)
	p, err := within(pl.serve, n, best)
	if err != nil {
		return err
	}
	// The decode leg, over the decode pool, with the decode workers'
	// whole-request costs kept to be put back if the pair loses.
	dec := scored[pl.agg:pl.serve]
	d.pairCosts = slices.Grow(d.pairCosts[:0], len(dec))[:len(dec)]
	for i := range dec {
		d.pairCosts[i] = dec[i].Cost
	}
	best, _ = c.decodeLeg(d.blockSize).Select(dec, d.req, d.params, c.rng)
	dd, err := within(pl.agg, pl.serve, best)
	if err != nil {
		return err
	}
	d.priced, d.pairPrefill = dd, p
	d.localCost, d.remoteCost = scored[local].Cost, scored[p].Cost+scored[dd].Cost
	if local >= pl.agg {
		d.localCost = d.pairCosts[local-pl.agg]
	}
	if c.pairing.always || d.remoteCost < d.localCost {
		d.chosen, d.prefill, d.disagg = dd, p, DecisionRemotePrefill
		return nil
	}
	for i := range dec {
		dec[i].Cost = d.pairCosts[i]
	}
	return nil
}

// recordPrefillLeg records the prefill leg of a pair routed (or heard of
// from a replica) at at: its load on w, the prefill blocks it computes,
// and its predicted blocks past from, which the index confirms.
func (c *Core) recordPrefillLeg(id string, w index.WorkerID, blocks int, hashes []uint64, from int, at time.Time) {
	c.legs.seen.Store(true)
	c.legs.load.AddShared(id, w, blocks, hashes)
	if c.approx != nil {
		c.approx.Predict(w, hashes, at)
	}
	if c.legs.pending != nil && c.comp.predicts {
		c.legs.pending.AddShared(id, w, hashes[min(from, len(hashes)):], at)
	}
}

// endPrefillLeg ends a request's prefill leg, if it has one: at its
// prefill's completion (computed: its blocks stay predicted until the
// worker's events store them) or at its free (cancelled: they go).
func (c *Core) endPrefillLeg(id string, computed bool) {
	if !c.legs.seen.Load() {
		return
	}
	if found, _ := c.legs.load.Drop(id); !found || c.legs.pending == nil {
		return
	}
	if computed {
		c.legs.pending.Done(id, c.now())
	} else {
		c.legs.pending.Release(id)
	}
}

// prefillTarget is the RouteResponse's prefill leg of decision d.
func prefillTarget(d *decision) *routerv1.PrefillTarget {
	in := d.cands[d.prefill].in
	return &routerv1.PrefillTarget{InstanceId: in.InstanceId, DpRank: d.scored[d.prefill].Worker.DPRank, Transport: in.Transport,
		Endpoint:      &routerv1.Endpoint{Namespace: in.Namespace, Component: in.Component, Endpoint: in.Endpoint},
		OverlapBlocks: uint32(d.scored[d.prefill].Overlap)}
}
