package core

import (
	"fmt"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// modes are the routing modes as compositions, in one place: each names
// how it picks a worker once every candidate has its cost from
// scheduler.KV (which every mode reports), the cost terms and pickers of
// scheduler (whose compositions scheduler.Policy lists) or a picker of
// its own. A new mode is a line here (and in Modes, if the router's flag
// offers it).
var modes = map[Mode]chooser{
	// kv: scheduler.KV's choice (prefill, decode, queue wait, seed; argmin
	// or softmax), spread at temperature 0 across the replicas' decisions
	// not heard yet.
	ModeKV: byCost{spread: true},
	// least-loaded: scheduler.LeastLoaded over the candidates with their
	// caches hidden, at weight 1 and temperature 0: the same predicted
	// time, blind to caches.
	ModeLeastLoaded: blind{policy: &scheduler.LeastLoaded},
	// round-robin: the endpoint's next turn.
	ModeRoundRobin: roundRobin{},
	// random: a uniform draw.
	ModeRandom: pick{scheduler.Random{}},
	// direct: the instance the request names.
	ModeDirect: direct{},
}

// chooserOf is mode's chooser; a mode not listed chooses as scheduler.KV
// does, without the replicas' spread.
func chooserOf(m Mode) chooser {
	if ch, ok := modes[m]; ok {
		return ch
	}
	return byCost{}
}

// chooser picks the worker of decision d (its candidates' kv costs in
// d.scored, scheduler.KV's choice kv), under c.mu.
type chooser interface {
	choose(c *Core, d *decision, q query, req scheduler.Request, kv int, now time.Time) (int, error)
}

// byCost takes scheduler.KV's choice; with spread, at temperature 0 and
// when the decision is for real, moved by the peer replicas' decisions
// not heard yet (see replica.go).
type byCost struct{ spread bool }

func (b byCost) choose(c *Core, d *decision, q query, _ scheduler.Request, kv int, now time.Time) (int, error) {
	if b.spread && d.params.Temperature <= 0 && !q.dryRun {
		return c.spreadLocked(d, kv, now), nil
	}
	return kv, nil
}

// blind chooses with policy over copies of the candidates whose cached
// prefix is hidden, at overlap weight 1 and temperature 0.
type blind struct{ policy *scheduler.Policy }

func (b blind) choose(c *Core, d *decision, _ query, req scheduler.Request, _ int, _ time.Time) (int, error) {
	ll := make([]scheduler.Candidate, len(d.scored))
	for i, s := range d.scored {
		ll[i] = s
		ll[i].Overlap = 0
	}
	chosen, _ := b.policy.Select(ll, req, scheduler.Params{OverlapWeight: 1}, c.rng)
	return chosen, nil
}

// roundRobin takes the candidates' endpoint's next turn; a dry run
// (ExplainRoute) does not take it.
type roundRobin struct{}

func (roundRobin) choose(c *Core, d *decision, q query, _ scheduler.Request, _ int, _ time.Time) (int, error) {
	in := d.cands[0].in
	k := endpointKey{in.Namespace, in.Component, in.Endpoint}
	chosen := c.rr[k] % len(d.cands)
	if !q.dryRun {
		c.rr[k]++
	}
	return chosen, nil
}

// pick chooses with a scheduler picker.
type pick struct{ picker scheduler.Picker }

func (p pick) choose(c *Core, d *decision, _ query, _ scheduler.Request, _ int, _ time.Time) (int, error) {
	return p.picker.Pick(d.scored, d.params, c.rng), nil
}

// direct takes the instance the request names; ErrNoWorker if it does not
// serve the target.
type direct struct{}

func (direct) choose(_ *Core, d *decision, q query, _ scheduler.Request, _ int, _ time.Time) (int, error) {
	chosen := -1
	for i, cd := range d.cands {
		if cd.in.InstanceId == q.direct {
			chosen = i
		}
	}
	if chosen < 0 {
		return -1, fmt.Errorf("%w: direct mode: instance %x does not serve %s", ErrNoWorker, q.direct, targetString(q.target))
	}
	return chosen, nil
}
