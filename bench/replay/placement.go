package replay

import (
	"fmt"
	"io"
	"time"
)

// PlacementRound is one placement's figures in a placement search.
type PlacementRound struct {
	// Plan is each request's engine (0-based).
	Plan []int
	// Changed counts the requests placed elsewhere than the round before.
	Changed int
	// TTFT are the p50, p90 and p99; Over counts the requests whose TTFT
	// is over the search's threshold.
	TTFT    [3]time.Duration
	Over    int
	HitRate float64
}

// SearchPlacement measures what placement alone can do for the TTFT goal
// on a trace at cfg.RateScale: rounds of Rollout, the first from the
// placement the kv router made, each from the last's plan, with the goal's
// threshold (goalTTFTFloor times floorP90, the cached floor's p90). The
// first round returned is kv's own placement. It knows the trace's future,
// so it is a reference for routers, not one: a trace whose search stays
// above the goal is out of reach for placement as far as the search goes
// (not a proof), and one whose search meets it is in reach of some
// placement (a proof, by its plan).
func SearchPlacement(trace []Request, cfg Config, floorP90 time.Duration, rounds int, window time.Duration) ([]PlacementRound, error) {
	res, recs, err := RunRecorded(trace, cfg, "kv")
	if err != nil {
		return nil, err
	}
	plan := make([]int, len(trace))
	for _, r := range recs {
		plan[r.Request] = int(r.Worker) - 1
	}
	threshold := time.Duration(goalTTFTFloor * float64(floorP90))
	round := func(plan []int, changed int) (PlacementRound, error) {
		p, err := RunPlan(trace, cfg, plan)
		if err != nil {
			return PlacementRound{}, err
		}
		r := PlacementRound{Plan: plan, Changed: changed, TTFT: p.Percentiles(), HitRate: p.HitRate()}
		for _, t := range p.TTFT {
			if t > threshold {
				r.Over++
			}
		}
		return r, nil
	}
	first, err := round(plan, 0)
	if err != nil {
		return nil, err
	}
	if first.TTFT != res.TTFT {
		return nil, fmt.Errorf("replay: kv's placement replayed gives TTFT %v, the routed run %v", first.TTFT, res.TTFT)
	}
	out := []PlacementRound{first}
	for range rounds {
		r, err := Rollout(trace, cfg, plan, window, threshold)
		if err != nil {
			return nil, err
		}
		next, err := round(r.Plan, r.Changed)
		if err != nil {
			return nil, err
		}
		out = append(out, next)
		plan = r.Plan
	}
	return out, nil
}

// WritePlacementSearch prints a placement search's rounds.
func WritePlacementSearch(w io.Writer, trace string, requests int, rate float64, floorP90 time.Duration, pooled float64, window time.Duration, rounds []PlacementRound) error {
	allowed := requests - 1 - int(0.9*float64(requests-1))
	if _, err := fmt.Fprintf(w, "placement search of %s at x%g (offline, knows the trace's future: a reference, not a router): look-ahead %v, threshold %s ms (%g x the cached floor's p90 %s ms), at most %d of %d requests over it for the goal\n",
		trace, rate, window, ms(time.Duration(goalTTFTFloor*float64(floorP90))), goalTTFTFloor, ms(floorP90), allowed, requests); err != nil {
		return err
	}
	for i, r := range rounds {
		name := "kv's placement"
		if i > 0 {
			name = fmt.Sprintf("round %d (%d moved)", i, r.Changed)
		}
		ratio := float64(r.TTFT[1]) / float64(floorP90)
		pooledPct := 0.0
		if pooled > 0 {
			pooledPct = 100 * r.HitRate / pooled
		}
		if _, err := fmt.Fprintf(w, "  %s: TTFT p90 %s ms = %.3fx floor, %d over, hit rate %.3f (%.1f%% of pooled)\n",
			name, ms(r.TTFT[1]), ratio, r.Over, r.HitRate, pooledPct); err != nil {
			return err
		}
	}
	return nil
}
