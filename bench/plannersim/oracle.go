package plannersim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// An oracle policy sizes the pool as the planner could at best: it reads
// the rate to come (the trace's own, or a predictor's forecast, to tell
// what the forecast costs), sizes by one engine's capacity (the one fixed
// pools were measured to hold, or the planner's model's, to tell what the
// model's error costs), starts engines one start-up ahead of the rate
// that needs them and drains them as soon as no rate within a start-up
// and an interval needs them, with no other margin. Its attainment and
// engine-seconds are the floor the planner's are measured against; the
// variants split the planner's gap to it into forecast, capacity and the
// planner's margins.
//
// The policies, by name:
//   - oracle: the trace's rates, the measured capacity;
//   - oracle-model-capacity: the trace's rates, the capacity the planner's
//     run (the first predictor's) judged at the same decision;
//   - forecast-<predictor>: the predictor's forecast from the intervals
//     observed, the measured capacity;
//   - forecast-<predictor>-model-capacity: that forecast, the capacity the
//     planner's run with that predictor judged at the same decision.
const (
	OracleExact         = "oracle"
	OracleModelCapacity = "oracle-model-capacity"
	forecastPrefix      = "forecast-"
	modelCapacitySuffix = "-model-capacity"
)

// OraclePolicies lists the oracle policies for the predictors named.
func OraclePolicies(predictors []string) []string {
	out := []string{OracleExact, OracleModelCapacity}
	for _, p := range predictors {
		out = append(out, forecastPrefix+p, forecastPrefix+p+modelCapacitySuffix)
	}
	return out
}

// Measured is what fixed pools of every size from Smallest to Largest
// held of a trace's judged windows.
type Measured struct {
	// Smallest and Largest are the pool sizes run: Smallest the fewest
	// engines the quietest window could be held with (an engine taken to
	// hold at most twice the capacity the model gives it with no prompt
	// token cached), Largest the first that held every window (or
	// MaxReplicas).
	Smallest, Largest int
	// Rates is each window's arrival rate (requests per second), by the
	// window's index.
	Rates []float64
	// Met is, for each window with requests (by index), whether the pool
	// of Smallest+i engines held it (Met[w][i]); Clean whether that pool
	// held the window before it too (or judged none there), so that its
	// queues entered the window as that pool's steady state leaves them,
	// not with the backlog of a window it was too small for. Only a clean
	// window tells what that pool holds at the window's rate. A run
	// stopped for its backlog (Config.GiveUp) held none of the windows
	// from the one it stopped in, and those after it do not tell until the
	// pool runs again, from the next window whose rate it held before
	// (whose first window, its caches empty, does not tell either).
	Met, Clean map[int][]bool
	// Capacity is the most requests per second an engine may be sized
	// for with fixed pools holding at least share of the windows: with
	// each window given ceil(rate / Capacity) engines, at least share of
	// the windows were held by the fixed pool of that size; the largest
	// such capacity below which every smaller one holds share too.
	Capacity float64
	// Runs is the fixed pools' runs, Smallest first (a pool's runs
	// again after it gave up, in time order).
	Runs []Result
}

// need is the engines window w is sized for at capacity c: at least one.
func (m Measured) need(w int, c float64) int {
	return max(int(math.Ceil(m.Rates[w]/c-1e-9)), 1)
}

// held is whether a fixed pool of n engines held window w, and whether
// that tells (clean): pools smaller than Smallest are taken to hold none,
// pools larger than Largest as Largest did.
func (m Measured) held(w, n int) (held, clean bool) {
	if n < m.Smallest {
		return false, true
	}
	i := min(n, m.Largest) - m.Smallest
	return m.Met[w][i], m.Clean[w][i]
}

// share is the share of the judged windows the fixed pools held with
// each window sized at capacity c, of those whose pool tells.
func (m Measured) share(c float64) float64 {
	held, told := 0, 0
	for w := range m.Met {
		if h, clean := m.held(w, m.need(w, c)); clean {
			told++
			if h {
				held++
			}
		}
	}
	if told == 0 {
		return 0
	}
	return float64(held) / float64(told)
}

// giveUp is the requests waiting an engine at which Measure's fixed pools
// stop: at several req/s an engine such a backlog is tens of seconds of
// queue, every first token past any TTFT objective of a second or less
// for a minute or more, so the pool has lost its windows until the rate
// falls; and a pool that small for the rate would only grow the queue,
// slowly to simulate, for nothing the measure uses.
const giveUp = 50

// windowRates is the trace's arrivals per second in each window.
func windowRates(trace []replay.Request, window time.Duration) []float64 {
	if len(trace) == 0 {
		return nil
	}
	rates := make([]float64, int(trace[len(trace)-1].Arrival/window)+1)
	for _, r := range trace {
		rates[int(r.Arrival/window)]++
	}
	for i := range rates {
		rates[i] /= window.Seconds()
	}
	return rates
}

// Measure runs fixed pools of every size from the fewest engines any
// window could be held with up to the first pool that holds every window
// (at most cfg.Planner.MaxReplicas), and finds the capacity at which
// they hold share of the windows (Measured.Capacity).
func Measure(trace []replay.Request, cfg Config, share float64) (Measured, error) {
	m := Measured{Rates: windowRates(trace, cfg.Window), Met: map[int][]bool{}, Clean: map[int][]bool{}}
	if len(trace) == 0 {
		return m, fmt.Errorf("planner-sim: no requests to measure a capacity on")
	}
	_, _, _, capRPS := Static(trace, cfg, 0, 0)
	lowest := math.Inf(1)
	counted := map[int]bool{}
	for _, r := range trace {
		counted[int(r.Arrival/cfg.Window)] = true
	}
	for w := range counted {
		lowest = min(lowest, m.Rates[w])
	}
	m.Smallest = max(int(lowest/(2*capRPS)), 1)
	if !(capRPS > 0) {
		m.Smallest = 1
	}
	cfg.GiveUp = giveUp
	judged := map[int]bool{}
	for n := m.Smallest; ; n++ {
		i := n - m.Smallest
		for w := range m.Rates {
			m.Met[w], m.Clean[w] = append(m.Met[w], false), append(m.Clean[w], false)
		}
		// The pool runs from the trace's start; where it gives up, it
		// starts again, empty, at the next window whose rate is no
		// higher than one it held: each window it serves is judged from
		// a steady state at its size, not from a backlog it cannot clear.
		all, from, heldRate := true, 0, 0.0
		for {
			first, _ := slices.BinarySearchFunc(trace, time.Duration(from)*cfg.Window, func(r replay.Request, t time.Duration) int { return cmp.Compare(r.Arrival, t) })
			res, err := Run(trace[first:], cfg, fmt.Sprintf("fixed-%d", n), n)
			if err != nil {
				return m, err
			}
			m.Runs = append(m.Runs, res)
			stop := math.MaxInt
			if res.GaveUp > 0 {
				stop, all = int(res.GaveUp/cfg.Window), false
			}
			met := map[int]bool{}
			for _, win := range res.Timeline {
				w := int(win.Start / cfg.Window)
				met[w], judged[w] = win.Met && w < stop, true
				all = all && win.Met
			}
			for w := range met {
				// A restarted pool's first window finds its caches empty:
				// it does not tell.
				before, ok := met[w-1]
				m.Met[w][i], m.Clean[w][i] = met[w], (before || !ok) && w <= stop && (w > from || from == 0)
				if met[w] && m.Clean[w][i] {
					heldRate = max(heldRate, m.Rates[w])
				}
			}
			if res.GaveUp == 0 {
				break
			}
			from = -1
			for w := stop + 1; w < len(m.Rates); w++ {
				if m.Rates[w] > 0 && m.Rates[w] <= heldRate {
					from = w
					break
				}
			}
			if from < 0 {
				break
			}
		}
		m.Largest = n
		if all || n >= cfg.Planner.MaxReplicas {
			break
		}
	}
	for w := range m.Rates {
		if !judged[w] {
			delete(m.Met, w) // no requests served in any run: nothing to judge
			delete(m.Clean, w)
		}
	}
	// The capacities at which some window's engines change: each window's
	// rate over each pool size run. Ascending, the first at which the
	// share falls below share ends the search.
	var cands []float64
	for w := range m.Met {
		for n := 1; n <= m.Largest; n++ {
			cands = append(cands, m.Rates[w]/float64(n))
		}
	}
	slices.Sort(cands)
	for _, c := range slices.Compact(cands) {
		if !(c > 0) {
			continue
		}
		if m.share(c) < share {
			break
		}
		m.Capacity = c
	}
	return m, nil
}

// Oracle is how an oracle policy sizes the pool.
type Oracle struct {
	// Predictor, when not empty, forecasts the rate from the intervals
	// observed (a core.NewPredictor name); empty reads the trace's own.
	Predictor string
	// Capacity is one engine's capacity at decision tick.
	Capacity func(tick int) float64
}

// RunOracle runs the trace with o sizing the pool every interval: to the
// most engines any judged window overlapping the next start-up and
// interval needs (a started engine serves from a start-up on, and one
// drained now could not serve again before that), within
// MinReplicas..MaxReplicas, draining the ready engines running the fewest
// requests. With the trace's rates it starts with what its first start-up
// and interval need, ready; with a forecast, with the planner's opening
// pool.
func RunOracle(trace []replay.Request, cfg Config, policy string, o Oracle) (Result, error) {
	rates := windowRates(trace, cfg.Window)
	if o.Capacity == nil {
		return Result{}, fmt.Errorf("planner-sim: %s: no capacity to size by", policy)
	}
	lo, hi := max(cfg.Planner.MinReplicas, 1), cfg.Planner.MaxReplicas
	needOf := func(rps, c float64) int {
		if !(rps > 0) {
			return lo
		}
		if !(c > 0) {
			return hi
		}
		return int(math.Ceil(rps/c - 1e-9))
	}
	// exact is the most engines the windows overlapping [from, from+span)
	// need.
	span := cfg.Startup + cfg.Planner.Interval
	exact := func(tick int, from time.Duration) int {
		n := 0
		for w := int(from / cfg.Window); w <= int((from+span-1)/cfg.Window) && w < len(rates); w++ {
			n = max(n, needOf(rates[w], o.Capacity(tick)))
		}
		return clampInt(n, lo, hi)
	}
	var pred core.Predictor
	if o.Predictor != "" {
		var err error
		if pred, err = core.NewPredictor(o.Predictor, cfg.Planner.Window, cfg.Planner.Quantile); err != nil {
			return Result{}, err
		}
	}
	sz := &sizer{opening: cfg.Opening}
	if pred == nil {
		sz.opening = exact(0, 0)
	}
	sz.decide = func(tick int, obs core.PoolObservation) core.PoolDecision {
		pd := core.PoolDecision{PoolKey: obs.Key, Current: len(obs.Workers) + obs.Starting}
		now := time.Duration(tick+1) * cfg.Planner.Interval
		if pred == nil {
			pd.Target = exact(tick, now)
		} else {
			pred.Observe(obs.Demand)
			// A forecast is a line (a flat one for a mean): its highest
			// over the span is at an end.
			f := max(pred.Forecast(0).RequestsPerSec, pred.Forecast(span).RequestsPerSec)
			pd.Target = clampInt(needOf(f, o.Capacity(tick)), lo, hi)
		}
		if pd.Target < pd.Current {
			// Only ready engines are drained (the fewest running first):
			// engines still starting were asked for a rate to come.
			ws := slices.Clone(obs.Workers)
			slices.SortStableFunc(ws, func(a, b core.Worker) int { return cmp.Compare(a.Running, b.Running) })
			for _, w := range ws[:min(pd.Current-pd.Target, len(ws))] {
				pd.Drain = append(pd.Drain, w.ID)
			}
			pd.Target = pd.Current - len(pd.Drain)
		}
		return pd
	}
	return run(trace, cfg, policy, 0, sz)
}

// OracleFor is the oracle policy named policy (OraclePolicies): the
// measured capacity m, or the planner's capacities judged by its run
// with the policy's predictor (planners, by predictor; the first
// predictor's for oracle-model-capacity, first).
func OracleFor(policy string, m Measured, planners map[string]Result, first string) (Oracle, error) {
	measured := func(int) float64 { return m.Capacity }
	model := func(p string) (func(int) float64, error) {
		r, ok := planners[p]
		if !ok || len(r.Capacities) == 0 {
			return nil, fmt.Errorf("planner-sim: %s needs the planner's run with predictor %q", policy, p)
		}
		// A decision that judged no capacity (no rate to judge it at yet)
		// sizes by the last one judged before it, or the first after.
		caps := slices.Clone(r.Capacities)
		last := 0.0
		for i := len(caps) - 1; i >= 0; i-- {
			if caps[i] > 0 {
				last = caps[i]
			}
		}
		for i, c := range caps {
			if c > 0 {
				last = c
			}
			caps[i] = last
		}
		return func(tick int) float64 { return caps[min(tick, len(caps)-1)] }, nil
	}
	switch {
	case policy == OracleExact:
		return Oracle{Capacity: measured}, nil
	case policy == OracleModelCapacity:
		c, err := model(first)
		return Oracle{Capacity: c}, err
	case strings.HasPrefix(policy, forecastPrefix):
		p, withModel := strings.CutSuffix(strings.TrimPrefix(policy, forecastPrefix), modelCapacitySuffix)
		if _, err := core.NewPredictor(p, 1, 0.95); err != nil {
			return Oracle{}, fmt.Errorf("planner-sim: oracle policy %q: %w", policy, err)
		}
		if !withModel {
			return Oracle{Predictor: p, Capacity: measured}, nil
		}
		c, err := model(p)
		return Oracle{Predictor: p, Capacity: c}, err
	}
	return Oracle{}, fmt.Errorf("planner-sim: unknown oracle policy %q: valid values are %s", policy, strings.Join(OraclePolicies(core.PredictorNames()), ", "))
}

func clampInt(v, lo, hi int) int { return min(max(v, lo), hi) }
