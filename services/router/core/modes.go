package core

import (
	"fmt"
	"strings"

	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// A routing decision is made of small parts:
//
//   - cost terms (scheduler.Term, one file each in services/router/scheduler):
//     each adds its part of a worker's predicted time to every candidate's
//     cost, from the request and the worker's state;
//   - a cost policy (scheduler.Policy, listed in scheduler/policy.go): the
//     terms a mode sums, in order, and the picker that names the cheapest
//     (or samples);
//   - a chooser (below, one type each): takes the policy's choice or makes
//     its own from the core's state (a round-robin turn, the peer
//     replicas' decisions, the instance the request names).
//
// modes lists every routing mode as such a composition, and pairings every
// --disaggregation setting, in one place. A new cost term is a file in
// scheduler and a line in the composition of policy.go that sums it; a new
// way to choose is a chooser here and the line of the mode that uses it; a
// new mode is its name (a Mode constant) and a line below, in the order
// help texts list them (Modes).
var modes = []listedMode{
	// kv: scheduler.KV's choice (prefill, decode, queue wait, seed; argmin
	// or softmax), spread at temperature 0 across the replicas' decisions
	// not heard yet. Routed prefixes count as predicted on their worker
	// until its KV events confirm them.
	{ModeKV, composition{cost: &scheduler.KV, choose: byCost{spread: true}, predicts: true}},
	// round-robin: the endpoint's next turn.
	{ModeRoundRobin, composition{cost: &scheduler.KV, choose: roundRobin{}}},
	// random: a uniform draw.
	{ModeRandom, composition{cost: &scheduler.KV, choose: pick{picker: scheduler.Random{}, what: "random: a uniform draw"}}},
	// least-loaded: scheduler.LeastLoaded over the candidates with their
	// caches hidden, at weight 1 and temperature 0: the same predicted
	// time, blind to caches.
	{ModeLeastLoaded, composition{cost: &scheduler.KV, choose: blind{policy: &scheduler.LeastLoaded}}},
	// direct: the instance the request names (which then computes its
	// prompt too: a disaggregated model is not paired).
	{ModeDirect, composition{cost: &scheduler.KV, choose: direct{}, named: true}},
}

// listedMode is a line of modes.
type listedMode struct {
	mode Mode
	comp composition
}

// listedModes are the modes of modes, in its order.
func listedModes() []Mode {
	out := make([]Mode, len(modes))
	for i, m := range modes {
		out[i] = m.mode
	}
	return out
}

// pairings are the --disaggregation settings, in one place: whether a
// model with prefill and decode pools may run a request's prefill on a
// prefill worker, and when it does (see pairs.go). Each leg is chosen in
// its pool by the mode's composition.
var pairings = map[Disaggregation]pairing{
	// auto: the pair when it is predicted cheaper than the request run
	// whole on one worker.
	DisaggAuto: {pairs: true},
	// always: the pair whenever both pools have a live worker.
	DisaggAlways: {pairs: true, always: true},
	// off: the whole request on a decode or aggregated worker.
	DisaggOff: {},
}

// pairing is a --disaggregation setting: pairs says a request may be split
// into a prefill and a decode leg, always that it is whenever it can be,
// without comparing costs.
type pairing struct{ pairs, always bool }

// pairingOf is d's pairing; the zero value (and any value Validate
// refuses) reads as auto.
func pairingOf(d Disaggregation) pairing {
	if p, ok := pairings[d]; ok {
		return p
	}
	return pairings[DisaggAuto]
}

// composition is how a routing mode decides: cost prices every candidate
// (every mode reports those costs), then choose picks the worker.
type composition struct {
	// cost sums a worker's predicted time for the request; its picker's
	// choice is given to choose.
	cost *scheduler.Policy
	// choose picks the worker.
	choose chooser
	// named says the request names its worker (instance_id), which is
	// then required, and which computes the prompt too.
	named bool
	// predicts says the blocks of a routed request count as predicted on
	// its worker until the worker's KV events confirm them (with events:
	// approximate mode predicts every decision's blocks in its index).
	predicts bool
}

// compositionOf is m's composition; a mode not listed chooses as
// scheduler.KV does, without the replicas' spread or predictions.
func compositionOf(m Mode) composition {
	for _, l := range modes {
		if l.mode == m {
			return l.comp
		}
	}
	return composition{cost: &scheduler.KV, choose: byCost{}}
}

// chooser picks the worker of decision d, under c.mu, once the mode's cost
// has priced every candidate (d.scored) and its picker chose best. d holds
// the request (d.q), the scheduler's view of it (d.req) and the decision's
// time (d.now). A disaggregated model's decision calls it once per pool,
// with d's candidates narrowed to that pool.
type chooser interface {
	// choose returns an index of d.scored; an error (ErrNoWorker) when
	// none fits.
	choose(c *Core, d *decision, best int) (int, error)
	// why says in words why d.chosen was chosen (ExplainRoute's reason).
	why(c *Core, d *decision) string
}

// byCost takes the cost policy's choice; with spread, at temperature 0 and
// when the decision is for real, moved by the peer replicas' decisions
// not heard yet (see replica.go). A backlog's request then goes to the
// slot that others would value least (leaveEarliest).
type byCost struct{ spread bool }

func (b byCost) choose(c *Core, d *decision, best int) (int, error) {
	if b.spread && d.params.Temperature <= 0 && !d.q.dryRun {
		best = c.spreadLocked(d, best, d.now)
	}
	return c.leaveEarliest(d, best), nil
}

func (byCost) why(c *Core, d *decision) string {
	ch := d.scored[d.chosen]
	prefix := "kv"
	if c.approximate {
		prefix = "kv (approximate: caches predicted from past decisions)"
	}
	if d.params.Temperature > 0 {
		best := ch.Cost
		for _, s := range d.scored {
			best = min(best, s.Cost)
		}
		return fmt.Sprintf("%s: sampled by softmax over costs at temperature %g; cost %.4g against the lowest %.4g; %s",
			prefix, d.params.Temperature, ch.Cost, best, cachedReason(d))
	}
	var b strings.Builder
	if d.leftEarliest {
		fmt.Fprintf(&b, "%s: a backlog's request, on the worker it fits on within --queue-ttft-threshold where the next request is predicted latest (cost %.4g); %s, with %d prefill and %d decode blocks queued",
			prefix, ch.Cost, cachedReason(d), ch.PrefillBlocks, ch.DecodeBlocks)
		return b.String()
	}
	if d.keptWithin {
		fmt.Fprintf(&b, "%s: let go into room held back for it, on the cheapest worker it fits on within --queue-ttft-threshold (cost %.4g); %s, with %d prefill and %d decode blocks queued",
			prefix, ch.Cost, cachedReason(d), ch.PrefillBlocks, ch.DecodeBlocks)
		return b.String()
	}
	fmt.Fprintf(&b, "%s: lowest cost %.4g; %s, with %d prefill and %d decode blocks queued", prefix, ch.Cost, cachedReason(d), ch.PrefillBlocks, ch.DecodeBlocks)
	ties, next := tiesAndRunnerUp(d.scored, d.chosen)
	switch {
	case ties > 0:
		fmt.Fprintf(&b, "; tied with %d other worker(s), broken at random", ties)
	case next >= 0:
		fmt.Fprintf(&b, "; next best %s at cost %.4g", workerName(d.scored[next].Worker), d.scored[next].Cost)
	}
	return b.String()
}

// blind chooses with policy over copies of the candidates whose cached
// prefix is hidden, at overlap weight 1 and temperature 0.
type blind struct{ policy *scheduler.Policy }

func (b blind) choose(c *Core, d *decision, _ int) (int, error) {
	// The copies go in the decision's buffer, kept with it in
	// decisionPool: none is allocated per decision.
	d.hidden = append(d.hidden[:0], d.scored...)
	for i := range d.hidden {
		d.hidden[i].Overlap = 0
	}
	chosen, _ := b.policy.Select(d.hidden, d.req, scheduler.Params{OverlapWeight: 1}, c.rng)
	return chosen, nil
}

func (blind) why(_ *Core, d *decision) string {
	ch := d.scored[d.chosen]
	return fmt.Sprintf("least-loaded: fewest queued blocks (%d prefill + %d decode) among %d workers; %s",
		ch.PrefillBlocks, ch.DecodeBlocks, len(d.scored), cachedReason(d))
}

// roundRobin takes the candidates' endpoint's next turn; a dry run
// (ExplainRoute) does not take it.
type roundRobin struct{}

func (roundRobin) choose(c *Core, d *decision, _ int) (int, error) {
	in := d.cands[0].in
	k := endpointKey{in.Namespace, in.Component, in.Endpoint}
	chosen := c.rr[k] % len(d.cands)
	if !d.q.dryRun {
		c.rr[k]++
	}
	return chosen, nil
}

func (roundRobin) why(_ *Core, d *decision) string {
	return fmt.Sprintf("round-robin: the endpoint's next turn among %d workers (costs shown for comparison only)", len(d.scored))
}

// pick chooses with a scheduler picker, blind to the costs; what names
// the draw in its reason.
type pick struct {
	picker scheduler.Picker
	what   string
}

func (p pick) choose(c *Core, d *decision, _ int) (int, error) {
	return p.picker.Pick(d.scored, d.params, c.rng), nil
}

func (p pick) why(_ *Core, d *decision) string {
	return fmt.Sprintf("%s among %d workers (costs shown for comparison only)", p.what, len(d.scored))
}

// direct takes the instance the request names (of its ranks, the
// cheapest); ErrNoWorker if it does not serve the target.
type direct struct{}

func (direct) choose(_ *Core, d *decision, _ int) (int, error) {
	chosen := -1
	for i, cd := range d.cands {
		if cd.in.InstanceId == d.q.direct && (chosen < 0 || cd.rank == 0 || d.scored[i].Cost < d.scored[chosen].Cost) {
			chosen = i
		}
	}
	if chosen < 0 {
		return -1, fmt.Errorf("%w: direct mode: instance %x does not serve %s", ErrNoWorker, d.q.direct, targetString(d.q.target))
	}
	return chosen, nil
}

func (direct) why(_ *Core, d *decision) string {
	return fmt.Sprintf("direct: the request named instance %x%s; %s", d.scored[d.chosen].Worker.Instance, rankReason(d), cachedReason(d))
}

// cachedReason says how much of d's request its chosen worker caches.
func cachedReason(d *decision) string {
	return fmt.Sprintf("it caches %d of the request's %d blocks", d.scored[d.chosen].Overlap, len(d.hashes))
}
