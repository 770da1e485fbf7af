// Package core is the planner's decision: from what a fleet reports (each
// pool's demand and its workers' load and timing models), how many workers
// each pool needs to hold the latency objectives, and which workers go
// when a pool shrinks. It does no I/O and reads no clock: a Planner's
// decisions are a deterministic function of its configuration and of the
// observations given to Decide, so that the service, the simulator and
// the tests run the same decisions.
//
// A pool's target comes from three rules, in order:
//   - throughput: the demand forecast over the next interval (a
//     Predictor), corrected by what its forecasts at that lead missed by
//     lately when those misses agree, over what one worker sustains
//     within the objectives, computed from its published timing model
//     (Engine.Capacity);
//   - load: the workers' predicted TTFT and ITL now, for a request of the
//     mean size; when every worker breaks an objective the pool grows by
//     one at least, and it shrinks only when the remaining workers, taking
//     the leaving workers' load, would still hold both;
//   - stability: a pool shrinks only when even (1-Hysteresis) of a
//     worker's capacity would do for the forecast and for every rate
//     observed over the cooldown, and the workers' capacity for the
//     rate's level now plus the largest rise its level made over a
//     start-up lately (as rare a rise as the intervals the pool may
//     miss), not within Cooldown intervals of its
//     last change nor before Cooldown+1 intervals have been observed,
//     not while started workers have yet to register, and
//     never on stale data; it stays within MinReplicas..MaxReplicas and
//     all pools within GPUBudget.
package core

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Objectives are the latency objectives, in milliseconds.
type Objectives struct {
	TTFTMs float64 `json:"ttft_ms"`
	ITLMs  float64 `json:"itl_ms"`
}

// Config is a planner's policy.
type Config struct {
	Objectives
	// Interval is the time between decisions.
	Interval time.Duration
	// MinReplicas and MaxReplicas bound every pool.
	MinReplicas, MaxReplicas int
	// GPUBudget bounds the GPUs of all pools together; 0 is no bound.
	GPUBudget int
	// GPUsPerWorker is what one worker of any pool takes; 0 is 1.
	GPUsPerWorker int
	// Predictor names the demand predictor (PredictorNames); Window is the
	// samples it looks at.
	Predictor string
	Window    int
	// Hysteresis is the share of a worker's capacity a pool keeps free
	// before it shrinks (0..1): shrinking to n needs the demand to fit in
	// n workers at (1-Hysteresis) of their capacity.
	Hysteresis float64
	// Cooldown is the intervals after a pool's change before it may
	// shrink.
	Cooldown int
	// MaxAge is the oldest data a decision uses; a worker whose last load
	// report is older is not counted, and a pool with none fresh holds.
	MaxAge time.Duration
	// Quantile is how sure the pool's size is to hold the level of the
	// rate, in [0.5, 1): the forecast plus Quantile's normal quantile
	// times the forecast's error (Spread.Error, from the noise of the
	// samples it was made from); 0.5 sizes for the forecast alone. The
	// error of the level only: a worker's capacity (Engine.Capacity)
	// already holds the objectives against requests arriving at random
	// around a level, its queue's wait; what it cannot know is whether
	// the level is the forecast's.
	Quantile float64
	// Lead is how long a started worker takes to serve (start, load,
	// register). A worker a decision starts serves from Lead on, and the
	// next decision's workers from Lead plus an interval: so a decision
	// grows the pool for the highest demand forecast over [Lead,
	// Lead+Interval]. A worker it drains is gone at once and could not be
	// replaced before Lead: so it shrinks the pool only to what holds the
	// highest demand forecast over [0, Lead+Interval].
	Lead time.Duration
	// JudgedWindow is the span over which the objectives are judged: a
	// pool is sized so that in a share Quantile of such windows the 90th
	// percentiles of the window's own requests hold them, not only the
	// 90th percentiles over all requests (window.md); 0 sizes for the
	// latter.
	JudgedWindow time.Duration
}

// DefaultConfig is the planner's defaults: objectives TTFT 500 ms and
// ITL 50 ms, a decision every 10 s.
func DefaultConfig() Config {
	return Config{
		Objectives: Objectives{TTFTMs: 500, ITLMs: 50},
		Interval:   10 * time.Second, MinReplicas: 1, MaxReplicas: 8,
		Predictor: "window", Window: 3, Hysteresis: 0.2, Cooldown: 3, MaxAge: 30 * time.Second,
		Quantile: 0.95, JudgedWindow: 30 * time.Second,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case !(c.TTFTMs > 0) || !(c.ITLMs > 0) || math.IsInf(c.TTFTMs, 0) || math.IsInf(c.ITLMs, 0):
		return errors.New("the TTFT and ITL objectives must be positive")
	case c.Interval <= 0:
		return errors.New("the adjustment interval must be positive")
	case c.MinReplicas < 0 || c.MaxReplicas < max(c.MinReplicas, 1):
		return fmt.Errorf("replicas: need 0 <= min (%d) <= max (%d) and max >= 1", c.MinReplicas, c.MaxReplicas)
	case c.GPUBudget < 0 || c.GPUsPerWorker < 0:
		return errors.New("the GPU budget and GPUs per worker must not be negative")
	case !(c.Hysteresis >= 0 && c.Hysteresis < 1):
		return fmt.Errorf("hysteresis %v: must be in [0, 1)", c.Hysteresis)
	case c.Cooldown < 0 || c.Window < 1:
		return errors.New("the cooldown must not be negative and the window at least 1")
	case c.MaxAge <= 0:
		return errors.New("the maximum data age must be positive")
	case c.Lead < 0:
		return errors.New("the workers' start-up lead must not be negative")
	case c.JudgedWindow < 0:
		return errors.New("the window the objectives are judged over must not be negative")
	case !(c.Quantile >= 0.5 && c.Quantile < 1):
		return fmt.Errorf("demand quantile %v: must be in [0.5, 1)", c.Quantile)
	}
	_, err := NewPredictor(c.Predictor, c.Window, c.Quantile)
	return err
}

// PoolKey names a pool: the workers of one role serving one model.
type PoolKey struct {
	Model string `json:"model"`
	Role  Role   `json:"role"`
}

func (k PoolKey) String() string { return k.Model + "/" + string(k.Role) }

// Worker is one registered worker of a pool and its last load report.
type Worker struct {
	ID uint64
	Engine
	// Reported is when its last load report was taken.
	Reported time.Time
	// Queued is prompt tokens still to prefill; Running and Waiting its
	// requests; Usage the share of its KV blocks in use.
	Queued, Running, Waiting int
	Usage                    float64
	// Pinned workers are never chosen to go (they hold a handoff or a
	// migration).
	Pinned bool
}

// PoolObservation is what the planner sees of one pool at a decision.
type PoolObservation struct {
	Key PoolKey
	// Demand is the pool's demand over the interval that ended at At; At
	// zero means none was measured.
	Demand Sample
	// Workers are its registered workers, draining ones excluded.
	Workers []Worker
	// Starting is workers started and not registered yet.
	Starting int
}

// Inputs are what a pool's decision was made from.
type Inputs struct {
	Observed Demand `json:"observed"`
	Forecast Demand `json:"forecast"`
	// SpreadRPS is the standard deviation of the forecast's rate (its
	// error, from the samples' noise); the pool is sized for the forecast
	// plus the quantile's share of it.
	SpreadRPS float64 `json:"spread_rps"`
	// BiasRPS is what the pool adds to the forecast for the predictor's
	// recent misses at the lead (the rates observed less its forecasts
	// of them), when they all agree; 0 when they do not.
	BiasRPS float64 `json:"bias_rps"`
	// CapacityRPS is one worker's requests per second within the
	// objectives for the forecast's request sizes, in the share of the
	// judged windows the pool aims at.
	CapacityRPS float64 `json:"capacity_rps"`
	// Dispersion is the index of dispersion of a judged window's
	// arrivals (variance over mean, at least 1) the capacity was computed
	// with, from the rate's noise; 0 when the objectives are not judged by
	// windows.
	Dispersion float64 `json:"dispersion,omitempty"`
	// BacklogRequests is the requests the workers hold past what they
	// clear within the TTFT objective, and what they will hold when the
	// workers started now serve; DrainRPS the rate the pool adds to clear
	// them within a judged window (backlog).
	BacklogRequests float64 `json:"backlog_requests,omitempty"`
	DrainRPS        float64 `json:"drain_rps,omitempty"`
	// FootprintBlocks is the KV blocks a running request holds, as the
	// workers' load reports show (blocks in use over running requests):
	// what the capacity was computed with; 0 when none ran.
	FootprintBlocks float64 `json:"footprint_blocks,omitempty"`
	// ComputedPrompts is the share of requests in each bucket of the
	// prompt tokens their engine computed (wire.ComputedPromptBucket), as
	// the workers counted them over the last samples: the capacity prices
	// each request's own prefill by its size (Judged.Computed); empty when
	// the workers do not count them.
	ComputedPrompts []float64 `json:"computed_prompts,omitempty"`
	// TTFTMs and ITLMs are the fleet's predicted latencies now: the lowest
	// of its workers' (the load rule acts when every worker breaks one).
	TTFTMs   float64 `json:"ttft_ms"`
	ITLMs    float64 `json:"itl_ms"`
	Workers  int     `json:"workers"`
	Starting int     `json:"starting"`
	Fresh    int     `json:"fresh"`
}

// PoolDecision is one pool's part of a decision.
type PoolDecision struct {
	PoolKey
	// Current counts the pool's registered and starting workers.
	Current int `json:"current"`
	// Target is the workers the pool should have.
	Target int `json:"target"`
	// Drain names the workers to drain and stop, Current-Target of them
	// (fewer when only pinned or starting ones are left), least loaded
	// first.
	Drain  []uint64 `json:"drain,omitempty"`
	Reason string   `json:"reason"`
	Inputs Inputs   `json:"inputs"`
}

// Decision is what one interval decided, for every pool.
type Decision struct {
	// ID increases by one at every decision.
	ID    uint64         `json:"id"`
	At    time.Time      `json:"at"`
	Pools []PoolDecision `json:"pools"`
}

// Changed says whether any pool's target differs from its count.
func (d Decision) Changed() bool {
	for _, p := range d.Pools {
		if p.Target != p.Current {
			return true
		}
	}
	return false
}

// Planner decides; it keeps each pool's history (its predictor and last
// change). It is not safe for concurrent use.
type Planner struct {
	cfg    Config
	lastID uint64
	pools  map[PoolKey]*poolState
}

type poolState struct {
	predictor  Predictor
	lastSample time.Time
	// recent is the observed request rates of the last Cooldown+1
	// intervals, oldest first: a pool shrinks only when the highest of
	// them fits too.
	recent []float64
	// rates is the observed request rates of the last riseMemory
	// intervals, oldest first: the rises a shrink keeps room for.
	rates []float64
	// bounds is the rates the pool was sized for (the forecast's bound at
	// the quantile) at the decisions of the same intervals.
	bounds []float64
	// changedAt is the decision id of the pool's last change, 0 for none.
	changedAt uint64
	// pending is the forecasts of the rate of samples to come, made at
	// the last decisions (due order); misses the observed rate less the
	// forecast of the last ones that came (a lead's worth: biasSamples).
	pending []dueForecast
	misses  []float64
	// observed counts the samples the predictor has taken.
	observed int
	// started is when the workers started and not registered yet were
	// asked for, oldest first (the oldest register first): they serve
	// from then plus Lead.
	started []time.Time
	// kvUsed and kvRunning are the fresh workers' KV blocks in use and
	// running requests, summed, at the decisions of the predictor's last
	// samples: their ratio is the blocks a running request holds.
	kvUsed, kvRunning []float64
	// computed is the requests a second in each bucket of computed prompt
	// tokens of the last samples (riseMemory: requests far past the mean
	// prompt are few, and their share needs many to tell).
	computed [][wire.ComputedPromptBuckets]float64
}

// dueForecast is a forecast of the sample due then.
type dueForecast struct {
	due time.Time
	rps float64
}

// New returns a planner; cfg must be valid. The first decision has id
// lastID+1 (a restarted planner continues from the last it wrote).
func New(cfg Config, lastID uint64) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GPUsPerWorker == 0 {
		cfg.GPUsPerWorker = 1
	}
	return &Planner{cfg: cfg, lastID: lastID, pools: map[PoolKey]*poolState{}}, nil
}

// Decide makes the decision at now from the observations, one per pool.
// Pools not observed are forgotten.
func (p *Planner) Decide(now time.Time, obs []PoolObservation) Decision {
	p.lastID++
	d := Decision{ID: p.lastID, At: now}
	seen := map[PoolKey]bool{}
	obs = slices.Clone(obs)
	slices.SortFunc(obs, func(a, b PoolObservation) int {
		return cmp.Or(cmp.Compare(a.Key.Model, b.Key.Model), cmp.Compare(a.Key.Role, b.Key.Role))
	})
	for _, o := range obs {
		if seen[o.Key] {
			continue
		}
		seen[o.Key] = true
		st := p.pools[o.Key]
		if st == nil {
			pr, _ := NewPredictor(p.cfg.Predictor, p.predictorWindow(), p.cfg.Quantile)
			st = &poolState{predictor: pr}
			p.pools[o.Key] = st
		}
		d.Pools = append(d.Pools, p.decidePool(now, st, o))
	}
	for k := range p.pools {
		if !seen[k] {
			delete(p.pools, k)
		}
	}
	p.budget(d.Pools)
	for i := range d.Pools {
		pd := &d.Pools[i]
		st := p.pools[pd.PoolKey]
		if pd.Target != pd.Current {
			st.changedAt = d.ID
		}
		for range max(pd.Target-pd.Current, 0) {
			st.started = append(st.started, now)
		}
		pd.Drain = nil
		if pd.Target < pd.Current {
			pd.Drain = drainOrder(obsOf(obs, pd.PoolKey), pd.Current-pd.Target, now, p.cfg.MaxAge)
		}
	}
	return d
}

// Restore takes back what a planner that stopped had learnt of the rates,
// from its last decisions (history, as written to the registry, in any
// order): each pool's demand observed at each decision goes to a new
// pool state as if observed again (its predictor, the rates a shrink
// looks back over, the intervals observed), and the pool's last change
// still holds it for the cooldown. Decisions that observed no demand
// (stale) are skipped, and so are those older than p's last decision
// or at or after now. The forecast misses the bias is made of, the
// workers' KV footprint and the sizes of the prompts their engines
// computed are learnt again: the records do not hold the first two, and
// hold the sizes' shares only, not the rates they were taken over.
// Call it before the first Decide; it returns the samples restored.
func (p *Planner) Restore(now time.Time, history []Decision) int {
	history = slices.Clone(history)
	slices.SortFunc(history, func(a, b Decision) int { return cmp.Compare(a.ID, b.ID) })
	c := p.cfg
	z := normalQuantile(c.Quantile)
	n := 0
	for _, d := range history {
		if d.ID > p.lastID || !d.At.Before(now) {
			continue
		}
		for _, pd := range d.Pools {
			st := p.pools[pd.PoolKey]
			if st == nil {
				pr, _ := NewPredictor(c.Predictor, p.predictorWindow(), c.Quantile)
				st = &poolState{predictor: pr}
				p.pools[pd.PoolKey] = st
			}
			if pd.Target != pd.Current {
				st.changedAt = d.ID
			}
			// A pool without workers whose demand is zero may have
			// measured none: not a sample either.
			unmeasured := pd.Inputs.Workers == 0 && pd.Inputs.Observed == (Demand{})
			if strings.HasPrefix(pd.Reason, "stale") || unmeasured || !d.At.After(st.lastSample) || !pd.Inputs.Observed.valid() {
				continue
			}
			sample := Sample{At: d.At, Demand: pd.Inputs.Observed}
			st.predictor.Observe(sample)
			st.observed++
			st.lastSample = d.At
			st.recent = append(st.recent, sample.RequestsPerSec)
			if len(st.recent) > c.Cooldown+1 {
				st.recent = st.recent[len(st.recent)-c.Cooldown-1:]
			}
			st.rates = append(st.rates, sample.RequestsPerSec)
			if keep := c.riseMemory(); len(st.rates) > keep {
				st.rates = st.rates[len(st.rates)-keep:]
			}
			st.bounds = append(st.bounds, max(pd.Inputs.Forecast.RequestsPerSec+pd.Inputs.BiasRPS, 0)+z*pd.Inputs.SpreadRPS)
			if len(st.bounds) > c.Cooldown+1 {
				st.bounds = st.bounds[len(st.bounds)-c.Cooldown-1:]
			}
			n++
		}
	}
	return n
}

// predictorWindow is the samples the predictor looks at: Window, and for
// trend at least those of twice its horizon (Lead and an interval),
// so that a line read that far ahead is fitted over at least as long.
func (p *Planner) predictorWindow() int {
	w := p.cfg.Window
	if p.cfg.Predictor == "trend" {
		horizon := p.cfg.Lead + p.cfg.Interval
		w = max(w, int(math.Ceil(2*horizon.Seconds()/p.cfg.Interval.Seconds())))
	}
	return w
}

func obsOf(obs []PoolObservation, k PoolKey) PoolObservation {
	for _, o := range obs {
		if o.Key == k {
			return o
		}
	}
	return PoolObservation{}
}

func (p *Planner) decidePool(now time.Time, st *poolState, o PoolObservation) PoolDecision {
	c := p.cfg
	pd := PoolDecision{PoolKey: o.Key, Current: len(o.Workers) + o.Starting}
	pd.Inputs.Workers, pd.Inputs.Starting = len(o.Workers), o.Starting
	hold := func(reason string) PoolDecision {
		pd.Target = clamp(pd.Current, c.MinReplicas, c.MaxReplicas)
		pd.Reason = reason
		if pd.Target != pd.Current {
			pd.Reason += fmt.Sprintf("; bounded to %d..%d", c.MinReplicas, c.MaxReplicas)
		}
		return pd
	}

	var fresh []Worker
	for _, w := range o.Workers {
		if age := now.Sub(w.Reported); age >= 0 && age <= c.MaxAge {
			fresh = append(fresh, w)
		}
	}
	pd.Inputs.Fresh = len(fresh)
	// The workers started and not registered yet are the newest asked
	// for; those asked for by a planner before a restart are not known:
	// they are taken to serve no sooner than one started now.
	if k := len(st.started) - o.Starting; k > 0 {
		st.started = append(st.started[:0], st.started[k:]...)
	}
	coming := make([]time.Duration, o.Starting)
	for i := range coming {
		coming[i] = c.Lead
		if j := len(st.started) - o.Starting + i; j >= 0 {
			coming[i] = min(max(st.started[j].Add(c.Lead).Sub(now), 0), c.Lead)
		}
	}
	demandFresh := !o.Demand.At.IsZero() && now.Sub(o.Demand.At) <= c.MaxAge && o.Demand.valid()
	newSample := demandFresh && o.Demand.At.After(st.lastSample)
	if newSample {
		st.settle(o.Demand, c)
		st.predictor.Observe(o.Demand)
		st.observed++
		st.lastSample = o.Demand.At
		st.recent = append(st.recent, o.Demand.RequestsPerSec)
		if len(st.recent) > c.Cooldown+1 {
			st.recent = st.recent[len(st.recent)-c.Cooldown-1:]
		}
		st.rates = append(st.rates, o.Demand.RequestsPerSec)
		if keep := c.riseMemory(); len(st.rates) > keep {
			st.rates = append(st.rates[:0], st.rates[len(st.rates)-keep:]...)
		}
		used, running := 0.0, 0.0
		for _, w := range fresh {
			if w.KVBlocks > 0 && w.BlockSize > 0 {
				used += w.Usage * float64(w.KVBlocks)
				running += float64(w.Running)
			}
		}
		st.kvUsed, st.kvRunning = append(st.kvUsed, used), append(st.kvRunning, running)
		if keep := p.predictorWindow(); len(st.kvUsed) > keep {
			st.kvUsed, st.kvRunning = st.kvUsed[len(st.kvUsed)-keep:], st.kvRunning[len(st.kvRunning)-keep:]
		}
		st.computed = append(st.computed, o.Demand.ComputedPromptRequestsPerSec)
		if keep := c.riseMemory(); len(st.computed) > keep {
			st.computed = append(st.computed[:0], st.computed[len(st.computed)-keep:]...)
		}
	}
	if demandFresh {
		pd.Inputs.Observed = o.Demand.Demand
	}
	if len(o.Workers) > 0 && len(fresh) == 0 {
		return hold("stale: no worker has reported within " + c.MaxAge.String())
	}
	if !demandFresh && len(o.Workers) > 0 {
		return hold("stale: no demand measured within " + c.MaxAge.String())
	}
	// The demand the pool grows for: the highest forecast while the
	// workers started now are the newest, from Lead to Lead plus an
	// interval. Both predictors forecast a line (window a flat one), so
	// the highest is at an end of the span.
	f := highest(st.predictor.Forecast(c.Lead), st.predictor.Forecast(c.Lead+c.Interval))
	pd.Inputs.Forecast = f
	if newSample && st.observed >= p.predictorWindow() {
		// The sample of the span's interval will tell how far off the
		// predictor was: its forecast for that sample's middle. Only a
		// forecast from a full window counts: one made from fewer
		// samples misses for want of them, which the next do not.
		st.pending = append(st.pending, dueForecast{due: o.Demand.At.Add(c.Lead + c.Interval),
			rps: st.predictor.Forecast(c.Lead + c.Interval/2).RequestsPerSec})
	}
	// The rate to hold: the forecast, corrected by what the predictor's
	// forecasts at this lead missed by lately (bias), and the margin its
	// error needs at the quantile (the error at the span's far end, the
	// larger).
	spread := st.predictor.Spread(c.Lead + c.Interval)
	pd.Inputs.SpreadRPS = spread.Error
	z := normalQuantile(c.Quantile)
	pd.Inputs.BiasRPS = st.bias(spread.Noise, z, c.biasSamples())
	level := max(f.RequestsPerSec+pd.Inputs.BiasRPS, 0)
	upper := level + z*spread.Error
	if newSample {
		st.bounds = append(st.bounds, upper)
		if len(st.bounds) > c.Cooldown+1 {
			st.bounds = st.bounds[len(st.bounds)-c.Cooldown-1:]
		}
	}
	// The mean request of the samples, not of the forecast: a forecast of
	// no requests still has requests of a size to size a margin for.
	prompt, cached, output := st.predictor.Sizes()

	// Throughput: the forecast over one worker's capacity, with the
	// engine of the pool's first fresh worker (workers of a pool run one
	// engine), or the timing model's default without one.
	eng := Engine{Model: defaultModel()}
	if len(fresh) > 0 {
		eng = fresh[0].Engine
	}
	// The KV blocks a running request holds, as the workers report them
	// (a prefix that several running requests share is held once), over
	// the predictor's samples, as the request sizes are.
	if used, running := sum(st.kvUsed), sum(st.kvRunning); running > 0 && eng.KVBlocks > 0 {
		eng.Footprint = used / running
	}
	pd.Inputs.FootprintBlocks = eng.Footprint
	// Judged by windows: a window of few requests or of clustered
	// arrivals needs room the steady state does not (window.md). The
	// rates a shrink checks are bounds at the quantile already; the
	// forecast a pool grows for is not, and its error and the window's
	// own noise move the window's rate together, in quadrature
	// (Judged.LevelError), not one margin on top of the other.
	var judged Judged
	capLevel := 0.0
	if c.JudgedWindow > 0 {
		judged = JudgedBy(level, spread.Noise, c.Interval, c.JudgedWindow, c.Quantile)
		pd.Inputs.Dispersion = judged.Dispersion
		judged.Computed = shares(st.computed)
		pd.Inputs.ComputedPrompts = judged.Computed
		if level > 0 {
			j := judged
			j.LevelError = spread.Error / level
			capLevel, _ = eng.CapacityJudged(o.Key.Role, prompt, cached, output, c.Objectives, j)
		}
	}
	capRPS, bound := eng.CapacityJudged(o.Key.Role, prompt, cached, output, c.Objectives, judged)
	pd.Inputs.CapacityRPS = capRPS
	needAt := func(rps, share, per float64) int {
		if !(rps > 0) {
			return 0
		}
		if per == 0 {
			per = bound
		}
		if !(per > 0) {
			return math.MaxInt32
		}
		return int(math.Ceil(rps/(per*share) - 1e-9))
	}
	need := func(rps, share float64) int { return needAt(rps, share, capRPS) }
	// Backlog: the requests the workers hold past what they clear within
	// the TTFT objective must be cleared too, once the workers started now
	// serve (backlog).
	backlog, drainRPS := backlog(fresh, coming, c, eng, prompt, cached, f.RequestsPerSec, bound)
	pd.Inputs.BacklogRequests, pd.Inputs.DrainRPS = backlog, drainRPS
	target := need(upper+drainRPS, 1)
	if judged.Requests > 0 {
		target = needAt(level+drainRPS, 1, capLevel)
	}
	corrected := ""
	if b := pd.Inputs.BiasRPS; b != 0 {
		corrected = fmt.Sprintf(", %+.3g for its recent misses", b)
	}
	if drainRPS > 0 {
		corrected += fmt.Sprintf(", %.3g to clear a backlog of %.0f requests", drainRPS, backlog)
	}
	reason := fmt.Sprintf("throughput: %.3g req/s forecast%s (%.3g at the %.0fth percentile), %.3g req/s per worker within the objectives",
		f.RequestsPerSec, corrected, upper, 100*c.Quantile, capRPS)
	if judged.Requests > 0 {
		reason = fmt.Sprintf("throughput: %.3g req/s forecast%s, %.3g req/s per worker within the objectives in %.0f%% of %s windows with the forecast's error (%.3g req/s) and a window's own noise (dispersion %.3g); %.3g for a rate bound at the %.0fth percentile (%.3g)",
			f.RequestsPerSec, corrected, capLevel, 100*c.Quantile, c.JudgedWindow, spread.Error, judged.Dispersion, capRPS, 100*c.Quantile, upper)
	}
	if capRPS == 0 && f.RequestsPerSec > 0 {
		reason = fmt.Sprintf("throughput: %.3g req/s forecast; no load holds the objectives for requests of %.0f+%.0f tokens, sized to what a worker sustains (%.3g req/s)",
			f.RequestsPerSec, prompt, output, bound)
	}

	// Load: the workers' predictions now.
	// A shrink must leave workers that hold the objectives at the rate
	// sized for, not only at the one observed: else the load rule would
	// grow the pool again as soon as the rate met its forecast bound.
	growth := 1.0
	if r := pd.Inputs.Observed.RequestsPerSec; r > 0 && upper > r {
		growth = upper / r
	}
	up, downOK, ttft, itl := loadRule(o.Key.Role, fresh, prompt, cached, output, c.Objectives, growth)
	pd.Inputs.TTFTMs, pd.Inputs.ITLMs = ttft, itl
	if up && target <= pd.Current {
		target = pd.Current + 1
		reason = fmt.Sprintf("load: every worker predicts TTFT %.0f ms or ITL %.1f ms past the objectives (%.0f, %.0f)", ttft, itl, c.TTFTMs, c.ITLMs)
	}

	if target < pd.Current {
		// Shrinking needs the forecast's bound, every rate observed and
		// every bound sized for over the cooldown to fit the smaller pool
		// with the hysteresis kept free: a forecast that dips on noise
		// alone does not shrink it, and a pool that a falling forecast
		// would shrink keeps what the rate now needs (a worker drained
		// now could not be back before Lead). After a shrink to n the
		// pool grows only on a bound above n workers' capacity, a
		// quarter (1/(1-Hysteresis)) above the highest of the last
		// Cooldown+1: on a steady rate, the bound's own noise rarely
		// moves it that far. A fitted slope read ahead moves the bound
		// more (its noise times the lever to the read point): the
		// shrink keeps the quantile of that drift free too, so that the
		// next slopes do not grow the pool straight back.
		high := upper + z*spread.Drift
		for _, r := range st.recent {
			high = max(high, r)
		}
		for _, r := range st.bounds {
			high = max(high, r)
		}
		// A worker drained now is back no sooner than Lead and an
		// interval: the pool keeps room for the rate now plus the rise
		// the rate has made over such a span lately (riseMemory), so
		// that it holds through a trough before a rise and between
		// bursts shorter than a start-up, which no forecast sees coming.
		// That rate is a quantile of what may come, not a bound the
		// rate's noise moves: it needs the workers' capacity, not the
		// hysteresis kept free on top (which keeps a shrink from being
		// undone by the next bound's noise).
		riseNote := ""
		down := need(high, 1-c.Hysteresis)
		if levels := levelsOf(st.rates, c.Window); len(levels) > 0 {
			// A level is a mean of Window rates: it shows a rise of the
			// rates over the span Window-1 intervals later.
			rise := riseOf(levels, c.riseSpan()+c.Window-1)
			kept := levels[len(levels)-1] + rise
			if n := need(kept, 1); n > down {
				down = n
				riseNote = fmt.Sprintf("; room kept for a rise of %.3g req/s on %.3g", rise, levels[len(levels)-1])
			}
		}
		switch {
		case pd.Current <= c.MinReplicas:
			target, reason = pd.Current, reason+fmt.Sprintf("; at the minimum of %d", c.MinReplicas)
		case o.Starting > 0:
			target, reason = pd.Current, "hold: started workers have not registered yet"
		case st.changedAt != 0 && p.lastID-st.changedAt <= uint64(c.Cooldown):
			target, reason = pd.Current, fmt.Sprintf("hold: within %d intervals of the last change", c.Cooldown)
		case len(st.recent) <= c.Cooldown:
			// A planner that has just started (or a pool just seen) knows
			// too little of the rate to shrink on: it observes as many
			// intervals as follow a change first.
			target, reason = pd.Current, fmt.Sprintf("hold: %d intervals observed, a shrink needs %d", len(st.recent), c.Cooldown+1)
		case !downOK:
			target, reason = pd.Current, "hold: with one worker less the others would break an objective"
		case down >= pd.Current:
			target, reason = pd.Current, fmt.Sprintf("hold: demand is within the hysteresis band (%.0f%% of a worker's capacity)%s", c.Hysteresis*100, riseNote)
		default:
			target = max(down, target)
			reason += fmt.Sprintf("%s; down to %d with %.0f%% of capacity kept free", riseNote, target, c.Hysteresis*100)
		}
	}
	pd.Target = clamp(target, c.MinReplicas, c.MaxReplicas)
	if pd.Target != target {
		reason += fmt.Sprintf("; bounded to %d..%d", c.MinReplicas, c.MaxReplicas)
	}
	pd.Reason = reason
	return pd
}

// backlog is the requests a pool holds past what its workers clear within
// the TTFT objective by the time workers started now serve, and the rate
// that clears them within a judged window (an interval when the
// objectives are not judged by windows). A worker's backlog is its
// requests waiting for room (its KV cache full) and its queued prompt
// tokens past one step's budget, in prompts of the mean uncached size,
// less what it computes within the objective at the most it sustains
// (bound requests per second): a queue that short delays no first token
// past the objective, and the steady state has it anyway. Until the
// workers started now serve (Lead), the backlog grows by the forecast
// rate that the ready workers, and the started ones from when they serve
// (coming: the time until each does), cannot take at that most. Every
// request in a
// backlog is late, and so is every window it lasts through: the pool
// clears it within the window after the new workers come.
func backlog(fresh []Worker, coming []time.Duration, c Config, eng Engine, prompt, cached, forecast, bound float64) (requests, drainRPS float64) {
	if len(fresh) == 0 || !(bound > 0) {
		return 0, 0
	}
	np, _, _ := computed(prompt, cached)
	budget := float64(eng.Model.MaxBatchedTokens)
	within := bound * c.TTFTMs / 1000
	for _, w := range fresh {
		held := float64(w.Waiting)
		if q := float64(w.Queued) - budget; q > 0 && np > 0 {
			held += q / np
		}
		requests += max(held-within, 0)
	}
	if requests == 0 {
		return 0, 0
	}
	coming = slices.Clone(coming)
	slices.Sort(coming)
	serving, from := float64(len(fresh)), time.Duration(0)
	for _, until := range append(coming, c.Lead) {
		requests += max(forecast-serving*bound, 0) * (until - from).Seconds()
		serving, from = serving+1, until
	}
	span := max(c.JudgedWindow, c.Interval)
	return requests, requests / span.Seconds()
}

// settle compares the forecasts due by the sample s (its interval ends
// within half an interval of their due time, or after it) with its rate,
// keeping the last biasSamples misses.
func (st *poolState) settle(s Sample, c Config) {
	n := 0
	for _, p := range st.pending {
		if p.due.After(s.At.Add(c.Interval / 2)) {
			break
		}
		st.misses = append(st.misses, s.RequestsPerSec-p.rps)
		n++
	}
	st.pending = st.pending[n:]
	if keep := c.biasSamples(); len(st.misses) > keep {
		st.misses = st.misses[len(st.misses)-keep:]
	}
}

// bias is how far below the rate that came (above, when negative) the
// predictor's forecasts at the lead fell lately, when they all did: the
// miss nearest zero of its last k if they share a sign (0 before there
// are k), else 0, less
// what a sample's noise (standard deviation noise) puts in a mean of as
// many at the quantile z. A predictor misses persistently where the rate
// does what its model cannot: a trend's line runs on past a turn (below
// a trough, above a peak), a window's mean lags a ramp by half its span
// and the lead. Added to the forecast it carries that miss forward while
// it lasts. A burst's misses do not last: they change sign when it ends,
// and the forecasts made before it still count while it runs, so a
// burst shorter than a lead moves the bias little.
func (st *poolState) bias(noise, z float64, k int) float64 {
	if len(st.misses) < k {
		return 0
	}
	least, most := math.Inf(1), math.Inf(-1)
	for _, m := range st.misses {
		least, most = min(least, m), max(most, m)
	}
	chance := z * noise / math.Sqrt(float64(len(st.misses)))
	switch {
	case least > chance:
		return least - chance
	case most < -chance:
		return most + chance
	}
	return 0
}

// levelsOf is the rate's level at each of rates from the window-th on:
// the mean of it and the window-1 before. A rate's noise around its level
// is not a rise a pool must keep room for: a worker's capacity already
// holds the objectives against arrivals at random around a level.
func levelsOf(rates []float64, window int) []float64 {
	window = max(window, 1)
	if len(rates) < window {
		return nil
	}
	out := make([]float64, 0, len(rates)-window+1)
	sum := 0.0
	for i, r := range rates {
		sum += r
		if i >= window {
			sum -= rates[i-window]
		}
		if i >= window-1 {
			out = append(out, sum/float64(window))
		}
	}
	return out
}

// riseOf is the largest rise of levels over span: for each level, the
// highest of the span after it (or of what followed it so far) less it;
// 0 when they only fell.
func riseOf(levels []float64, span int) float64 {
	most := 0.0
	for i := 0; i+1 < len(levels); i++ {
		for _, r := range levels[i+1 : min(i+1+span, len(levels))] {
			most = max(most, r-levels[i])
		}
	}
	return most
}

// riseSpan is the intervals a drained worker could not be replaced in:
// Lead and an interval.
func (c Config) riseSpan() int {
	return int(math.Ceil((c.Lead+c.Interval).Seconds()/c.Interval.Seconds() - 1e-9))
}

// riseMemory is the rates a shrink looks back over for rises: the
// Window-1 before the first level, then n levels, each with the span
// after it (riseSpan), n being the fewest rises whose largest is at or
// above their Quantile-quantile with probability Quantile (1 - q^n >= q,
// n >= ln(1-q)/ln(q): 59 at 0.95, 1 at 0.5), and at least as many as a
// change holds the pool for (Cooldown+1). The pool then keeps room for a
// rise as rare as the share of intervals it is sized to hold (the
// attainment it aims at), as sure as that, whatever the rate's shape.
func (c Config) riseMemory() int {
	n := int(math.Ceil(math.Log(1-c.Quantile)/math.Log(c.Quantile) - 1e-9))
	return max(n, c.Cooldown+1) + c.riseSpan() + c.Window - 1
}

// biasSamples is the misses the bias looks at: a lead and an interval's
// worth of decisions, the span a forecast reads ahead (so that the bias
// follows the rate's shape at the scale the forecast does), and no fewer
// than make their agreement evidence at the quantile: k misses of noise
// alone share a sign with probability 2^(1-k), at most 1-Quantile when
// k >= 1 + log2(1/(1-Quantile)) (6 at 0.95, 2 at 0.5).
func (c Config) biasSamples() int {
	lead := int(math.Ceil((c.Lead + c.Interval).Seconds() / c.Interval.Seconds()))
	return max(lead, 1+int(math.Ceil(math.Log2(1/(1-c.Quantile)))))
}

// loadRule applies the load rule to the fresh workers: up when every one
// predicts, for a request of prompt (cached of it) and output tokens (Engine.Now), a
// TTFT or an ITL past the objectives; downOK when, with one worker fewer and its load spread over
// the others and grown by growth (the rate sized for over the rate
// observed), every one would still hold both. ttft and itl are the
// lowest of the workers' predictions.
func loadRule(role Role, fresh []Worker, prompt, cached, output float64, o Objectives, growth float64) (up, downOK bool, ttft, itl float64) {
	if len(fresh) == 0 {
		return false, true, 0, 0
	}
	up, downOK = true, len(fresh) > 1
	ttft, itl = math.Inf(1), math.Inf(1)
	n := float64(len(fresh))
	for _, w := range fresh {
		t, i := w.Now(role, w.Queued, w.Running, w.Usage, prompt, cached, output)
		ttft, itl = min(ttft, t), min(itl, i)
		if t <= o.TTFTMs && i <= o.ITLMs {
			up = false
		}
		if downOK {
			scale := n / (n - 1) * growth
			t2, i2 := w.Now(role, int(math.Ceil(float64(w.Queued)*scale)), int(math.Ceil(float64(w.Running)*scale)), min(w.Usage*scale, 1), prompt, cached, output)
			if t2 > o.TTFTMs || i2 > o.ITLMs {
				downOK = false
			}
		}
	}
	return up, downOK, ttft, itl
}

// shares is the share of each bucket in the sum of the samples' rates,
// nil when they hold none.
func shares(samples [][wire.ComputedPromptBuckets]float64) []float64 {
	var sum [wire.ComputedPromptBuckets]float64
	total := 0.0
	for _, x := range samples {
		for i, v := range x {
			sum[i] += v
			total += v
		}
	}
	if !(total > 0) {
		return nil
	}
	out := make([]float64, len(sum))
	for i, v := range sum {
		out[i] = v / total
	}
	return out
}

// budget lowers targets until the pools' GPUs fit the budget: each pool
// keeps its minimum (or its target, when lower), and the rest goes one worker at a time to the pool furthest from its target
// (by the share of it missing), ties to the first pool in key order.
func (p *Planner) budget(pools []PoolDecision) {
	c := p.cfg
	if c.GPUBudget == 0 {
		return
	}
	total := 0
	for _, pd := range pools {
		total += pd.Target * c.GPUsPerWorker
	}
	if total <= c.GPUBudget {
		return
	}
	give := make([]int, len(pools))
	left := c.GPUBudget
	for i, pd := range pools {
		give[i] = min(c.MinReplicas, pd.Target)
		left -= give[i] * c.GPUsPerWorker
	}
	for left >= c.GPUsPerWorker {
		best, bestShort := -1, 0.0
		for i, pd := range pools {
			if give[i] >= pd.Target {
				continue
			}
			short := float64(pd.Target-give[i]) / float64(pd.Target)
			if best < 0 || short > bestShort {
				best, bestShort = i, short
			}
		}
		if best < 0 {
			break
		}
		give[best]++
		left -= c.GPUsPerWorker
	}
	for i := range pools {
		if give[i] < pools[i].Target {
			pools[i].Reason += fmt.Sprintf("; %d within the GPU budget of %d", give[i], c.GPUBudget)
			pools[i].Target = give[i]
		}
	}
}

// drainOrder picks n workers to go: fresh, not pinned, the fewest running
// and waiting requests first, then the least KV in use, then the lowest
// id. A worker whose report is stale is not chosen: its load is unknown.
func drainOrder(o PoolObservation, n int, now time.Time, maxAge time.Duration) []uint64 {
	var cands []Worker
	for _, w := range o.Workers {
		if age := now.Sub(w.Reported); !w.Pinned && age >= 0 && age <= maxAge {
			cands = append(cands, w)
		}
	}
	slices.SortFunc(cands, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.Running+a.Waiting, b.Running+b.Waiting), cmp.Compare(a.Usage, b.Usage), cmp.Compare(a.ID, b.ID))
	})
	var ids []uint64
	for _, w := range cands[:min(n, len(cands))] {
		ids = append(ids, w.ID)
	}
	return ids
}

// normalQuantile is the standard normal distribution's q-quantile.
func normalQuantile(q float64) float64 { return math.Sqrt2 * math.Erfinv(2*q-1) }

// highest is the forecast of the more requests per second of a and b.
func highest(a, b Demand) Demand {
	if b.RequestsPerSec > a.RequestsPerSec {
		return b
	}
	return a
}

func defaultModel() timingmodel.Model { return timingmodel.Default() }

func clamp(v, lo, hi int) int { return min(max(v, lo), hi) }

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}
