package replay

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// A plan replay runs the trace's engines with no router: a fixed
// assignment (a plan) names each request's engine. It answers "what would
// this placement give" for offline searches over placements, which no
// online router can make: the router's decisions depend on the engines'
// state, a plan's do not.
//
// With a plan, engines do not interact (nothing is fed back to a router),
// so each engine is simulated alone on the requests planned for it, and a
// change to the plan needs only the engines it touches simulated again
// (PlanEngine). The engine sees exactly what it sees in Run: the same
// requests (ids, prompts, output lengths, seeds) at the same virtual
// times, arrivals at a time before the end of a step at that time, and a
// step started at once by an arrival at an idle engine. So the plan Run's
// kv mode made (RequestRecord.Worker) gives back Run's TTFTs and hit rate
// exactly (TestPlanReproducesRun).

// PlanEngineResult is what one engine did with the requests planned for
// it.
type PlanEngineResult struct {
	// Requests are the trace positions planned for the engine, in the order
	// it received them; TTFT and E2E are theirs, -1 for a request the
	// engine refused.
	Requests  []int
	TTFT, E2E []time.Duration
	// Hit and Queried are the engine's prefix hit and queried blocks.
	Hit, Queried uint64
}

// PlanEngine simulates one engine on the trace requests reqs (positions in
// trace, any order): each arrives at its timestamp divided by the rate
// scale, and the engine steps while it has work.
func PlanEngine(trace []Request, cfg Config, reqs []int) (PlanEngineResult, error) {
	e, err := simengine.New(cfg.Engine)
	if err != nil {
		return PlanEngineResult{}, err
	}
	arrival := func(n int) time.Duration { return time.Duration(float64(trace[n].Arrival) / cfg.RateScale) }
	order := slices.Clone(reqs)
	// Run routes requests that arrive together in trace order.
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(arrival(a), arrival(b)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	res := PlanEngineResult{Requests: order, TTFT: make([]time.Duration, len(order)), E2E: make([]time.Duration, len(order))}
	at := make(map[string]int, len(order)) // request id -> position in order
	var tokens []uint32
	var now, stepEnd time.Duration
	busy := false
	var step simengine.StepResult
	start := func() {
		step = e.Step()
		busy, stepEnd = true, now+step.Duration
	}
	for next := 0; next < len(order) || busy; {
		// An arrival at the time a step ends comes first, as in Run (all
		// arrivals are scheduled before any step).
		if next < len(order) && (!busy || arrival(order[next]) <= stepEnd) {
			n := order[next]
			now = arrival(n)
			res.TTFT[next], res.E2E[next] = -1, -1
			id := strconv.Itoa(n)
			tokens = Tokens(trace[n], cfg.TraceBlockSize, tokens)
			if err := e.Add(simengine.Request{ID: id, Prompt: slices.Clone(tokens), MaxTokens: trace[n].OutputLength, Seed: uint64(n + 1)}); err == nil {
				at[id] = next
				if !busy {
					start()
				}
			}
			next++
			continue
		}
		now, busy = stepEnd, false
		for _, o := range step.Outputs {
			i, ok := at[o.RequestID]
			if !ok {
				continue
			}
			if res.TTFT[i] < 0 && len(o.Tokens) > 0 {
				res.TTFT[i] = now - arrival(order[i]) + simengine.RequestOverhead(cfg.Engine.SpeedupRatio)
			}
			if o.Finish != simengine.FinishNone {
				res.E2E[i] = now - arrival(order[i]) + simengine.RequestOverhead(cfg.Engine.SpeedupRatio)
				delete(at, o.RequestID)
			}
		}
		if !e.Idle() {
			start()
		}
	}
	st := e.Stats()
	res.Hit, res.Queried = st.PrefixHitBlocks, st.PrefixQueriedBlocks
	return res, nil
}

// PlanResult is a plan's replay.
type PlanResult struct {
	// TTFT and E2E are per trace request, -1 where refused.
	TTFT, E2E []time.Duration
	// Engines are the engines' own results.
	Engines []PlanEngineResult
}

// HitRate is the fraction of queried prompt blocks the engines' caches
// held, as Result.HitRate.
func (p PlanResult) HitRate() float64 {
	var hit, queried uint64
	for _, e := range p.Engines {
		hit += e.Hit
		queried += e.Queried
	}
	if queried == 0 {
		return 0
	}
	return float64(hit) / float64(queried)
}

// Percentiles are the p50, p90 and p99 of the served requests' TTFTs, as
// Result.TTFT.
func (p PlanResult) Percentiles() [3]time.Duration {
	d := make([]time.Duration, 0, len(p.TTFT))
	for _, x := range p.TTFT {
		if x >= 0 {
			d = append(d, x)
		}
	}
	return percentiles(d)
}

// Set puts an engine's result (of the requests planned for engine w) into
// the per-request figures.
func (p *PlanResult) Set(w int, r PlanEngineResult) {
	p.Engines[w] = r
	for i, n := range r.Requests {
		p.TTFT[n], p.E2E[n] = r.TTFT[i], r.E2E[i]
	}
}

// RunPlan replays trace with request n on engine plan[n] (0-based), no
// router.
func RunPlan(trace []Request, cfg Config, plan []int) (PlanResult, error) {
	if err := cfg.Validate(); err != nil {
		return PlanResult{}, err
	}
	if len(plan) != len(trace) {
		return PlanResult{}, fmt.Errorf("replay: plan of %d requests for a trace of %d", len(plan), len(trace))
	}
	per := make([][]int, cfg.Workers)
	for n, w := range plan {
		if w < 0 || w >= cfg.Workers {
			return PlanResult{}, fmt.Errorf("replay: plan puts request %d on engine %d of %d", n, w, cfg.Workers)
		}
		per[w] = append(per[w], n)
	}
	p := PlanResult{TTFT: make([]time.Duration, len(trace)), E2E: make([]time.Duration, len(trace)), Engines: make([]PlanEngineResult, cfg.Workers)}
	for w := range per {
		r, err := PlanEngine(trace, cfg, per[w])
		if err != nil {
			return PlanResult{}, err
		}
		p.Set(w, r)
	}
	return p, nil
}
