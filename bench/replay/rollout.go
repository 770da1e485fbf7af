package replay

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// Rollout improves a plan by looking ahead, offline: it is what a router
// that knew the future could do, to measure how far placement alone can
// take a trace's TTFT tail (no online router can do it: it reads the
// trace's later arrivals).
//
// It decides the requests in arrival order on the true engines, as Run
// would run them. For each request it tries every engine: the engine is
// cloned (simengine.Clone), the request added, and the clone run on the base
// plan's later arrivals for that engine within window, until each of
// those, the request and the engine's requests still waiting for their
// first token has its first token (or is past the threshold). A request
// counts as a miss when its TTFT is over threshold and its chain floor
// (the least any placement gives it, ChainFloor) is not. The request goes
// where it adds the fewest misses, compared with the same clone without
// it; among equals to the base plan's engine, then to the least added time
// to first token (each request's capped at twice the threshold). Engines
// do not interact under a plan, so only the engine a request joins
// changes.
//
// Decisions change the requests after them, which the base plan placed
// for another state: running Rollout again with its own plan as the base
// (policy iteration) goes on improving it. Each decision simulates every
// engine twice over the window, so a run does the engine steps of about
// 2 x requests x window / the trace's span full replays, plus two engine
// clones per request and engine (most of the time when caches are large:
// sessions at x6, 4000 requests on 8 x 131072 blocks, takes about 4
// minutes a round).
func Rollout(trace []Request, cfg Config, base []int, window, threshold time.Duration) (RolloutResult, error) {
	if err := cfg.Validate(); err != nil {
		return RolloutResult{}, err
	}
	if len(base) != len(trace) {
		return RolloutResult{}, fmt.Errorf("replay: plan of %d requests for a trace of %d", len(base), len(trace))
	}
	if window < 0 || threshold <= 0 {
		return RolloutResult{}, errors.New("replay: rollout window must not be negative and its threshold must be positive")
	}
	n := len(trace)
	ro := &roller{trace: trace, cfg: cfg, threshold: threshold, ahead: window, arr: make([]time.Duration, n)}
	for i := range trace {
		ro.arr[i] = time.Duration(float64(trace[i].Arrival) / cfg.RateScale)
	}
	ro.free = make([]bool, n)
	for i, f := range chainFloors(trace, cfg) {
		ro.free[i] = f > threshold
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ro.arr[a], ro.arr[b]) })
	ro.base = make([][]int, cfg.Workers)
	for _, q := range order {
		w := base[q]
		if w < 0 || w >= cfg.Workers {
			return RolloutResult{}, fmt.Errorf("replay: plan puts request %d on engine %d of %d", q, w, cfg.Workers)
		}
		ro.base[w] = append(ro.base[w], q)
	}
	ro.next = make([]int, cfg.Workers)
	live := make([]*liveEngine, cfg.Workers)
	for w := range live {
		e, err := simengine.New(cfg.Engine)
		if err != nil {
			return RolloutResult{}, err
		}
		live[w] = &liveEngine{e: e, waiting: map[int]time.Duration{}, ttft: map[int]time.Duration{}, overhead: simengine.RequestOverhead(cfg.Engine.SpeedupRatio)}
	}
	res := RolloutResult{Plan: make([]int, n), TTFT: make([]time.Duration, n)}
	decided := make([]bool, n)
	for _, r := range order {
		for w := range live {
			for ro.next[w] < len(ro.base[w]) && decided[ro.base[w][ro.next[w]]] {
				ro.next[w]++
			}
		}
		best, bestMiss, bestAdded := -1, 0, time.Duration(0)
		for w := range live {
			miss1, t1 := ro.window(live[w].clone(), w, r, true)
			miss0, t0 := ro.window(live[w].clone(), w, r, false)
			miss, added := miss1-miss0, t1-t0
			var better bool
			switch {
			case best < 0:
				better = true
			case miss != bestMiss:
				better = miss < bestMiss
			case w == base[r]:
				better = true
			case best == base[r]:
				better = false
			default:
				better = added < bestAdded
			}
			if better {
				best, bestMiss, bestAdded = w, miss, added
			}
		}
		res.Plan[r] = best
		if best != base[r] {
			res.Changed++
		}
		decided[r] = true
		ro.tokens = live[best].add(trace, cfg, r, ro.arr[r], ro.tokens)
	}
	for i := range res.TTFT {
		res.TTFT[i] = -1
	}
	for _, l := range live {
		l.advance(time.Duration(1<<62 - 1))
		for q, t := range l.ttft {
			res.TTFT[q] = t
		}
	}
	return res, nil
}

// RolloutResult is a Rollout's plan and the TTFT each request gets by it
// (-1: refused), which RunPlan of the plan gives too.
type RolloutResult struct {
	Plan []int
	TTFT []time.Duration
	// Changed counts the requests placed elsewhere than by the base plan.
	Changed int
}

// liveEngine is one engine of a plan built in arrival order.
type liveEngine struct {
	e       *simengine.Engine
	busy    bool
	stepEnd time.Duration
	step    simengine.StepResult
	// waiting maps the requests before their first token to their
	// arrival; ttft has those that got it.
	waiting map[int]time.Duration
	ttft    map[int]time.Duration
	// overhead is each request's serving overhead, which delays its
	// first token outside the engine's steps.
	overhead time.Duration
}

// clone copies the engine and its requests' waits; the copy records first
// tokens of its own.
func (l *liveEngine) clone() *liveEngine {
	c := &liveEngine{e: l.e.Clone(), busy: l.busy, stepEnd: l.stepEnd, step: l.step, overhead: l.overhead,
		waiting: make(map[int]time.Duration, len(l.waiting)), ttft: map[int]time.Duration{}}
	for k, v := range l.waiting {
		c.waiting[k] = v
	}
	return c
}

func (l *liveEngine) start(now time.Duration) {
	l.step = l.e.Step()
	l.busy, l.stepEnd = true, now+l.step.Duration
}

// advance ends the steps that end before to: an arrival at the end of a
// step comes first, as in Run.
func (l *liveEngine) advance(to time.Duration) {
	for l.busy && l.stepEnd < to {
		now := l.stepEnd
		l.busy = false
		for _, o := range l.step.Outputs {
			n, err := strconv.Atoi(o.RequestID)
			if err != nil || len(o.Tokens) == 0 {
				continue
			}
			if a, ok := l.waiting[n]; ok {
				l.ttft[n] = now - a + l.overhead
				delete(l.waiting, n)
			}
		}
		if !l.e.Idle() {
			l.start(now)
		}
	}
}

// add gives the engine request n at its arrival, as Run does.
func (l *liveEngine) add(trace []Request, cfg Config, n int, at time.Duration, tokens []uint32) []uint32 {
	l.advance(at)
	tokens = Tokens(trace[n], cfg.TraceBlockSize, tokens)
	if err := l.e.Add(simengine.Request{ID: strconv.Itoa(n), Prompt: slices.Clone(tokens), MaxTokens: trace[n].OutputLength, Seed: uint64(n + 1)}); err != nil {
		return tokens
	}
	l.waiting[n] = at
	if !l.busy {
		l.start(at)
	}
	return tokens
}

// roller is a Rollout's state.
type roller struct {
	trace            []Request
	cfg              Config
	arr              []time.Duration
	threshold, ahead time.Duration
	// free marks the requests that miss wherever they go.
	free []bool
	// base[w] lists the base plan's requests on w in arrival order, next[w]
	// the first of them not decided yet.
	base   [][]int
	next   []int
	tokens []uint32
}

// window runs l, a clone of engine w, from request r's arrival, with r or
// without it, and the base plan's undecided arrivals on w within the
// window; it returns the misses among them and the requests already
// waiting, and the sum of their TTFTs, each capped at twice the threshold.
func (ro *roller) window(l *liveEngine, w, r int, withR bool) (misses int, sum time.Duration) {
	a := ro.arr[r]
	track := make(map[int]time.Duration, len(l.waiting)+8)
	for q, at := range l.waiting {
		track[q] = at
	}
	if withR {
		ro.tokens = l.add(ro.trace, ro.cfg, r, a, ro.tokens)
		track[r] = a
	}
	last := a
	for _, q := range ro.base[w][ro.next[w]:] {
		if ro.arr[q] > a+ro.ahead {
			break
		}
		if q == r {
			continue
		}
		ro.tokens = l.add(ro.trace, ro.cfg, q, ro.arr[q], ro.tokens)
		track[q], last = ro.arr[q], ro.arr[q]
	}
	capped := 2 * ro.threshold
	l.advance(last + capped + 1)
	for q := range track {
		t, ok := l.ttft[q]
		if !ok {
			t = capped
		}
		if t > ro.threshold && !ro.free[q] {
			misses++
		}
		sum += min(t, capped)
	}
	return misses, sum
}
