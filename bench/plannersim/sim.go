// Package plannersim runs the planner's decisions against simulated
// engines, without a fleet: a trace's requests arrive at a pool of the
// mocker's engines (pkg/simengine, the replay's engines), routed by the
// router's own core in its default mode (the predicted time to first token
// on each engine, its cached prefix counted, from the KV events and load
// reports the engines publish), so a conversation's turns find the cache
// their earlier turns left, as in the product; every interval the planner (package
// services/planner/core) sees what a real one sees (the pool's demand and
// each engine's load and timing model) and its decisions apply after an
// engine's start-up time (scale-up) or once a drained engine has finished
// its requests (scale-down). The same runs with a fixed pool give the
// static baselines. It reports, per policy, the share of 30 s windows whose
// requests met both objectives, and the engine-seconds used.
package plannersim

import (
	"cmp"
	"container/heap"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/planner/core"
	rcore "github.com/switchyard-llm/switchyard/services/router/core"
)

// The delay of the engines' KV events and load reports on their way to
// the router, and the engines' load report interval: the replay's
// defaults, the workers' own interval.
const (
	eventDelay   = 5 * time.Millisecond
	loadInterval = time.Second
)

// The names the router sees the simulated engines under.
const (
	simNamespace = "plannersim"
	simModel     = "plannersim-model"
)

// Config is a simulation's setup.
type Config struct {
	// Engine is every engine's configuration.
	Engine simengine.Config
	// TraceBlock is the trace's tokens per hash id.
	TraceBlock int
	// Startup is how long a started engine takes to be ready.
	Startup time.Duration
	// Window is the span over which objectives are judged.
	Window time.Duration
	// Planner is the planner's policy (its objectives judge every run).
	Planner core.Config
	// Opening is the engines a planner's run starts with, ready (at least
	// Planner.MinReplicas): the pool a planner takes over, as a fleet
	// already serving the trace's opening rate has. Fixed pools start
	// ready too.
	Opening int
	// Warmup is the opening span a run is also judged without
	// (Result.Warm): a deployment's planner has been running before any
	// moment judged, with the rates of its memory seen, while a run's
	// planner starts with none, at the trace's first request.
	Warmup time.Duration
	// GiveUp, when positive, stops a fixed pool's run once its engines
	// hold more than GiveUp requests waiting each (Result.GaveUp).
	GiveUp int
	// Decisions, when set, gets a line per decision of a planner's run:
	// DecisionsHeader's columns, tab-separated.
	Decisions io.Writer
}

// DecisionsHeader names the columns of Config.Decisions' lines: the run's
// policy, the time in seconds, the pool's workers and target, the
// observed rate and mean request (prompt and output tokens), the forecast
// rate, one worker's capacity, the fleet's predicted TTFT and ITL, and the
// reason. cached is the mean prompt's part served from prefix caches,
// footprint the KV blocks a running request held (the capacity's).
const DecisionsHeader = "policy\tat_s\tcurrent\ttarget\tobserved_rps\tprompt\tcached\toutput\tforecast_rps\tcapacity_rps\tfootprint\tttft_ms\titl_ms\treason\n"

// Result is one run's outcome.
type Result struct {
	Policy string
	// Attainment is the share of windows (with requests) whose requests
	// met both objectives: TTFT p90 and ITL p90 within them. A TTFT is
	// as the request's client sees it, as the replay counts it: the
	// engine's time to the first token and the request's own overhead
	// outside the engine's steps (simengine.RequestOverhead), which the
	// planner's model counts too.
	Attainment float64
	// EngineSeconds is the engines' time from start to stop.
	EngineSeconds float64
	// ScaleChanges counts the decisions that changed the pool's size;
	// Flaps those that reversed the direction of a change made within
	// the 3 intervals before.
	ScaleChanges, Flaps int
	// Windows and Requests are what was judged; MaxEngines the largest
	// pool.
	Windows, Requests, MaxEngines int
	// PromptTokens and CachedPromptTokens are the prompt tokens of the
	// requests that had a first token and the part of them the engines
	// served from their prefix caches.
	PromptTokens, CachedPromptTokens int
	// KVBlocksUsed and Running are the engines' KV blocks in use and
	// running requests summed over their load reports: their ratio
	// (Footprint) is the blocks a running request held.
	KVBlocksUsed, Running int
	// Timeline is every judged window, in time order.
	Timeline []WindowResult
	// GaveUp is when a fixed pool's run stopped for its backlog
	// (Config.GiveUp), 0 if it did not: its windows from then on are not
	// judged, and its engines' time ends there.
	GaveUp time.Duration
	// Capacities is, for a planner's run, one worker's capacity within
	// the objectives its decisions judged, one per decision in order (0
	// where it judged none): the model's capacity, which an oracle run
	// can size by in its place (Oracle).
	Capacities []float64
	// Warm is the run judged from Config.Warmup on: its windows that
	// start then or later, and the engines' time from then on; and the
	// 90th percentiles of TTFT and ITL of all those windows' requests
	// together (a steady pool's, as the planner's capacity predicts them).
	Warm struct {
		Windows             int
		Attainment          float64
		EngineSeconds       float64
		TTFTp90Ms, ITLp90Ms float64
	}
}

// WindowResult is one judged window: the requests that arrived in it,
// the ready engines they found (the mean over their arrivals), the
// engines running or starting at its end, and the 90th percentiles of
// their TTFT and ITL.
type WindowResult struct {
	Start               time.Duration
	Requests            int
	ReadyEngines        float64
	Engines             int
	TTFTp90Ms, ITLp90Ms float64
	Met                 bool
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type queue []event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simEngine struct {
	id       uint64
	e        *simengine.Engine
	readyAt  time.Duration
	started  time.Duration
	stopped  time.Duration // 0 while it runs
	ready    bool
	draining bool
	busy     bool
	gone     bool
}

type request struct {
	arrival time.Duration
	first   time.Duration
	prompt  int
	eng     *simEngine
}

type sim struct {
	cfg    Config
	router *rcore.Core
	byID   map[uint64]*simEngine
	target *routerv1.Target
	// left counts the trace's requests not yet finished or dropped.
	left    int
	q       queue
	seq     uint64
	now     time.Duration
	engines []*simEngine
	nextID  uint64
	reqs    map[string]*request
	// Interval counts of the pool: arrivals, prompt and output tokens,
	// and the prompt tokens the engines served from their prefix caches
	// (counted at a request's first token, as a worker counts what its
	// engine's usage says).
	arrivals, promptTok, outputTok, cachedTok uint64
	// computed counts the requests that ended by the prompt tokens their
	// engine computed, as a worker does (wire.ComputedPromptBucket).
	computed [wire.ComputedPromptBuckets]uint64
	// Per window: TTFTs and ITLs of the requests that arrived in it.
	ttft, itl map[int][]float64
	// Per window: arrivals and the ready engines they found, summed;
	// the engines running or starting when it ended.
	winArrivals, winReady, winEngines map[int]int
	res                               Result
	buf                               []uint32
	// fixed is whether the pool is a fixed one.
	fixed bool
	// lastChange is the time and direction (+1, -1) of the last change.
	lastChange    time.Duration
	lastDirection int
}

func (s *sim) at(t time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, event{at: t, seq: s.seq, fn: fn})
}

// launch starts an engine, ready after delay.
func (s *sim) launch(delay time.Duration) *simEngine {
	e, err := simengine.New(s.cfg.Engine)
	if err != nil {
		panic(err) // the configuration is validated before the run
	}
	s.nextID++
	w := &simEngine{id: s.nextID, e: e, started: s.now, readyAt: s.now + delay}
	s.engines = append(s.engines, w)
	s.byID[w.id] = w
	s.at(w.readyAt, func() {
		w.ready = true
		s.register(w, false)
	})
	return w
}

// register tells the router an engine joined (deleted false) or left, as
// the registry's watch does: a worker registers once ready and
// deregisters when it starts draining.
func (s *sim) register(w *simEngine, deleted bool) {
	s.router.OnInstances([]registryclient.Change[*registryv1.Instance]{{Deleted: deleted, Item: &registryv1.Instance{
		Namespace: simNamespace, Component: "backend", Endpoint: "generate", InstanceId: w.id, Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}}})
	s.router.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Deleted: deleted, Item: &registryv1.ModelCard{
		Namespace: simNamespace, Component: "backend", Endpoint: "generate", InstanceId: w.id, ModelName: simModel, BlockSize: uint32(s.cfg.Engine.BlockSize)}}})
}

// stop ends an engine's time.
func (s *sim) stop(w *simEngine) {
	w.gone, w.stopped = true, s.now
}

func (s *sim) running() []*simEngine {
	var out []*simEngine
	for _, w := range s.engines {
		if !w.gone {
			out = append(out, w)
		}
	}
	return out
}

func (s *sim) arrive(i int, r replay.Request) {
	id := strconv.Itoa(i)
	s.buf = replay.Tokens(r, s.cfg.TraceBlock, s.buf)
	resp, err := s.router.Route(&routerv1.RouteRequest{RequestId: id, Target: s.target, TokenIds: s.buf, OmitCandidates: true})
	var w *simEngine
	if err == nil {
		w = s.byID[resp.GetInstanceId()]
		rcore.Recycle(resp)
	}
	if w == nil || w.gone || !w.ready || w.draining {
		if w != nil {
			s.router.Free(id)
		}
		// No ready engine: the request waits for the first one.
		s.at(s.now+100*time.Millisecond, func() { s.arrive(i, r) })
		return
	}
	out := max(r.OutputLength, 1)
	if err := w.e.Add(simengine.Request{ID: id, Prompt: slices.Clone(s.buf), MaxTokens: out}); err != nil {
		s.router.Free(id)
		s.left--
		return // too large for the engine: not served, not judged
	}
	s.reqs[id] = &request{arrival: r.Arrival, prompt: r.InputLength, eng: w}
	win := int(r.Arrival / s.cfg.Window)
	s.winArrivals[win]++
	for _, e := range s.engines {
		if !e.gone && e.ready && !e.draining {
			s.winReady[win]++
		}
	}
	s.arrivals++
	s.promptTok += uint64(r.InputLength)
	if !w.busy {
		s.step(w)
	}
}

func (s *sim) step(w *simEngine) {
	res := w.e.Step()
	w.busy = true
	s.at(s.now+res.Duration, func() { s.stepped(w, res) })
}

func (s *sim) stepped(w *simEngine, res simengine.StepResult) {
	w.busy = false
	for _, o := range res.Outputs {
		in := s.reqs[o.RequestID]
		if in == nil {
			continue
		}
		if len(o.Tokens) > 0 {
			s.outputTok++
			if in.first == 0 {
				in.first = s.now
				s.router.PrefillDone(o.RequestID)
				s.cachedTok += uint64(o.Usage.CachedPromptTokens)
				s.res.CachedPromptTokens += o.Usage.CachedPromptTokens
				s.res.PromptTokens += in.prompt
				win := int(in.arrival / s.cfg.Window)
				s.ttft[win] = append(s.ttft[win], float64(s.now-in.arrival+simengine.RequestOverhead(s.cfg.Engine.SpeedupRatio))/1e6)
			}
		}
		if o.Finish != simengine.FinishNone {
			if n := o.Usage.CompletionTokens; n > 1 && in.first > 0 {
				win := int(in.arrival / s.cfg.Window)
				s.itl[win] = append(s.itl[win], float64(s.now-in.first)/1e6/float64(n-1))
			}
			s.computed[wire.ComputedPromptBucket(in.prompt-min(o.Usage.CachedPromptTokens, in.prompt))]++
			s.router.Free(o.RequestID)
			delete(s.reqs, o.RequestID)
			s.res.Requests++
			s.left--
		}
	}
	if len(res.Events) > 0 {
		if b, err := simengine.BatchProto(w.id, 0, res.Events); err == nil {
			s.at(s.now+eventDelay, func() { s.router.ApplyEvents(b) })
		}
	}
	if !w.e.Idle() {
		s.step(w)
		return
	}
	if w.draining {
		s.stop(w)
	}
}

// reportLoad sends every ready engine's load to the router, as workers
// do every loadInterval, while requests remain.
func (s *sim) reportLoad() {
	if s.left <= 0 {
		return
	}
	at := time.Unix(0, 0).Add(s.now)
	waiting, ready := 0, 0
	for _, w := range s.engines {
		if w.gone || !w.ready || w.draining {
			continue
		}
		em := w.e.Metrics()
		waiting, ready = waiting+em.Waiting, ready+1
		s.res.KVBlocksUsed += em.KVBlocksUsed
		s.res.Running += em.Running
		m := em.Proto(w.id, 0, at, s.cfg.Engine.Timing())
		s.at(s.now+eventDelay, func() { s.router.ReportLoad(m) })
	}
	if s.cfg.GiveUp > 0 && s.fixed && waiting > s.cfg.GiveUp*ready {
		s.res.GaveUp, s.q = s.now, nil
		return
	}
	s.at(s.now+loadInterval, s.reportLoad)
}

// observe is the planner's view of the pool now.
func (s *sim) observe(prev time.Duration) core.PoolObservation {
	o := core.PoolObservation{Key: core.PoolKey{Model: "sim", Role: core.Agg}}
	dt := (s.now - prev).Seconds()
	o.Demand = core.Sample{At: time.Unix(0, 0).Add(s.now), Demand: core.Demand{
		RequestsPerSec: float64(s.arrivals) / dt, PromptTokensPerSec: float64(s.promptTok) / dt, OutputTokensPerSec: float64(s.outputTok) / dt,
		CachedPromptTokensPerSec: float64(s.cachedTok) / dt}}
	for i, n := range s.computed {
		o.Demand.ComputedPromptRequestsPerSec[i] = float64(n) / dt
	}
	s.arrivals, s.promptTok, s.outputTok, s.cachedTok, s.computed = 0, 0, 0, 0, [wire.ComputedPromptBuckets]uint64{}
	model := s.cfg.Engine.Timing()
	for _, w := range s.engines {
		switch {
		case w.gone || w.draining:
		case !w.ready:
			o.Starting++
		default:
			m := w.e.Metrics()
			o.Workers = append(o.Workers, core.Worker{ID: w.id,
				Engine:   core.Engine{Model: model, KVBlocks: m.KVBlocksTotal, BlockSize: s.cfg.Engine.BlockSize},
				Reported: time.Unix(0, 0).Add(s.now), Queued: m.ActivePrefillTokens, Running: m.Running, Waiting: m.Waiting,
				Usage: float64(m.KVBlocksUsed) / float64(max(m.KVBlocksTotal, 1))})
		}
	}
	return o
}

// apply carries a decision out: engines started (ready after Startup) or
// drained (no new requests; stopped once idle).
func (s *sim) apply(pd core.PoolDecision) {
	if pd.Target == pd.Current {
		return
	}
	s.res.ScaleChanges++
	dir := 1
	if pd.Target < pd.Current {
		dir = -1
	}
	if s.lastDirection == -dir && s.now-s.lastChange <= 3*s.cfg.Planner.Interval {
		s.res.Flaps++
	}
	s.lastChange, s.lastDirection = s.now, dir
	for range max(pd.Target-pd.Current, 0) {
		s.launch(s.cfg.Startup)
	}
	for _, id := range pd.Drain {
		for _, w := range s.engines {
			if w.id == id && !w.gone {
				if !w.draining && w.ready {
					s.register(w, true)
				}
				w.draining = true
				if w.e.Idle() && !w.busy {
					s.stop(w)
				}
			}
		}
	}
}

// Run simulates the trace with the planner in the loop (fixed = 0) or a
// fixed pool of fixed engines, ready from the start.
func Run(trace []replay.Request, cfg Config, policy string, fixed int) (Result, error) {
	return run(trace, cfg, policy, fixed, nil)
}

// sizer decides a pool's size in place of the planner: opening is the
// engines a run starts with, ready; decide is called every interval with
// the decision's index and the pool's view since the last one.
type sizer struct {
	opening int
	decide  func(tick int, o core.PoolObservation) core.PoolDecision
}

// run is Run, with sz (when not nil) deciding in place of the planner.
func run(trace []replay.Request, cfg Config, policy string, fixed int, sz *sizer) (Result, error) {
	if err := cfg.Engine.Validate(); err != nil {
		return Result{}, err
	}
	s := &sim{cfg: cfg, reqs: map[string]*request{}, ttft: map[int][]float64{}, itl: map[int][]float64{},
		winArrivals: map[int]int{}, winReady: map[int]int{}, winEngines: map[int]int{}, byID: map[uint64]*simEngine{},
		left: len(trace), target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: simModel}}}
	rc := rcore.DefaultConfig()
	rc.Seed, rc.Clock = 1, func() time.Time { return time.Unix(0, 0).Add(s.now) }
	s.router = rcore.New(rc)
	s.res.Policy = policy
	var plan *core.Planner
	s.fixed = fixed > 0
	switch {
	case fixed > 0:
		for range fixed {
			s.launch(0)
		}
	case sz != nil:
		for range max(sz.opening, 1) {
			s.launch(0)
		}
	default:
		var err error
		if plan, err = core.New(cfg.Planner, 0); err != nil {
			return Result{}, err
		}
		for range max(cfg.Planner.MinReplicas, cfg.Opening, 1) {
			s.launch(0)
		}
	}
	for i, r := range trace {
		s.at(r.Arrival, func() { s.arrive(i, r) })
	}
	end := time.Duration(0)
	if len(trace) > 0 {
		end = trace[len(trace)-1].Arrival
	}
	s.at(0, s.reportLoad)
	if sz != nil {
		var tick func(k int, prev time.Duration)
		tick = func(k int, prev time.Duration) {
			s.apply(sz.decide(k, s.observe(prev)))
			if s.now < end {
				now := s.now
				s.at(s.now+cfg.Planner.Interval, func() { tick(k+1, now) })
			}
		}
		s.at(cfg.Planner.Interval, func() { tick(0, 0) })
	}
	if plan != nil {
		var tick func(prev time.Duration)
		tick = func(prev time.Duration) {
			d := plan.Decide(time.Unix(0, 0).Add(s.now), []core.PoolObservation{s.observe(prev)})
			s.res.Capacities = append(s.res.Capacities, d.Pools[0].Inputs.CapacityRPS)
			if cfg.Decisions != nil {
				pd := d.Pools[0]
				fmt.Fprintf(cfg.Decisions, "%s\t%.0f\t%d\t%d\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.0f\t%.1f\t%s\n", policy, s.now.Seconds(), pd.Current, pd.Target,
					pd.Inputs.Observed.RequestsPerSec, pd.Inputs.Observed.PromptTokens(), pd.Inputs.Observed.CachedPromptTokens(), pd.Inputs.Observed.OutputTokens(),
					pd.Inputs.Forecast.RequestsPerSec, pd.Inputs.CapacityRPS, pd.Inputs.FootprintBlocks, pd.Inputs.TTFTMs, pd.Inputs.ITLMs, pd.Reason)
			}
			s.apply(d.Pools[0])
			if s.now < end {
				now := s.now
				s.at(s.now+cfg.Planner.Interval, func() { tick(now) })
			}
		}
		s.at(cfg.Planner.Interval, func() { tick(0) })
	}
	for s.q.Len() > 0 {
		ev := heap.Pop(&s.q).(event)
		s.now = ev.at
		ev.fn()
		n := len(s.running())
		s.res.MaxEngines = max(s.res.MaxEngines, n)
		s.winEngines[int(s.now/cfg.Window)] = n
	}
	for _, w := range s.engines {
		if !w.gone {
			s.stop(w)
		}
		s.res.EngineSeconds += (w.stopped - w.started).Seconds()
		s.res.Warm.EngineSeconds += max(w.stopped-max(w.started, cfg.Warmup), 0).Seconds()
	}
	met := 0
	for win, ts := range s.ttft {
		s.res.Windows++
		w := WindowResult{Start: time.Duration(win) * cfg.Window, Requests: s.winArrivals[win], Engines: s.winEngines[win],
			TTFTp90Ms: p90(ts), ITLp90Ms: p90(s.itl[win])}
		if w.Requests > 0 {
			w.ReadyEngines = float64(s.winReady[win]) / float64(w.Requests)
		}
		if w.Met = w.TTFTp90Ms <= cfg.Planner.TTFTMs && w.ITLp90Ms <= cfg.Planner.ITLMs; w.Met {
			met++
		}
		s.res.Timeline = append(s.res.Timeline, w)
	}
	slices.SortFunc(s.res.Timeline, func(a, b WindowResult) int { return cmp.Compare(a.Start, b.Start) })
	warmMet := 0
	var warmTTFT, warmITL []float64
	for _, w := range s.res.Timeline {
		if w.Start >= cfg.Warmup {
			s.res.Warm.Windows++
			if w.Met {
				warmMet++
			}
			win := int(w.Start / cfg.Window)
			warmTTFT, warmITL = append(warmTTFT, s.ttft[win]...), append(warmITL, s.itl[win]...)
		}
	}
	s.res.Warm.TTFTp90Ms, s.res.Warm.ITLp90Ms = p90(warmTTFT), p90(warmITL)
	if s.res.Warm.Windows > 0 {
		s.res.Warm.Attainment = float64(warmMet) / float64(s.res.Warm.Windows)
	}
	if s.res.Windows > 0 {
		s.res.Attainment = float64(met) / float64(s.res.Windows)
	}
	return s.res, nil
}

// p90 is the 90th percentile (nearest rank), 0 for none.
func p90(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[int(math.Ceil(0.9*float64(len(v))))-1]
}

// Static sizes the fixed pools: the engines the trace's busiest window and
// its mean need at one engine's capacity within the objectives, for the
// trace's mean request with the share cached of its prompt tokens served
// from prefix caches (0: every prompt token computed; how much the engines
// find cached is known only from a run) and footprint KV blocks held by a
// running request (0: its whole prompt; known only from a run too), at
// least one; and opening, the engines its first window needs, which a
// planner's run starts with.
func Static(trace []replay.Request, cfg Config, cached, footprint float64) (peak, mean, opening int, capacity float64) {
	if len(trace) == 0 {
		return 1, 1, 1, 0
	}
	var prompt, output float64
	counts := map[int]int{}
	for _, r := range trace {
		prompt += float64(r.InputLength)
		output += float64(r.OutputLength)
		counts[int(r.Arrival/cfg.Window)]++
	}
	n := float64(len(trace))
	model := cfg.Engine.Timing()
	capacity, bound := core.Engine{Model: model, KVBlocks: cfg.Engine.NumGPUBlocks, BlockSize: cfg.Engine.BlockSize, Footprint: footprint}.
		Capacity(core.Agg, prompt/n, cached*prompt/n, output/n, cfg.Planner.Objectives)
	if capacity == 0 {
		capacity = bound
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	span := max(trace[len(trace)-1].Arrival.Seconds(), cfg.Window.Seconds())
	need := func(rps float64) int { return max(int(math.Ceil(rps/capacity)), 1) }
	return need(float64(most) / cfg.Window.Seconds()), need(n / span), need(float64(counts[0]) / cfg.Window.Seconds()), capacity
}

// CachedShare is the share of the prompt tokens the engines served from
// their prefix caches, 0 with none.
func (r Result) CachedShare() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.CachedPromptTokens) / float64(r.PromptTokens)
}

// Footprint is the KV blocks a running request held, as the engines'
// load reports showed (blocks in use over running requests), 0 with none.
func (r Result) Footprint() float64 {
	if r.Running == 0 {
		return 0
	}
	return float64(r.KVBlocksUsed) / float64(r.Running)
}

// RunStatic runs a fixed pool sized by size for a cached share of the
// prompt tokens and the KV blocks a running request holds (Static's peak
// or mean), first at the share 0 and whole prompts, then again at what
// each run measured, until the size repeats (at most three runs), and
// chooses the pool a capacity model that knows the cache its own engines
// keep would: the smallest run whose measures size it at no more engines
// than it had (the largest run when none does; a smaller pool may cache
// less and so need more). It returns every run and the chosen one's
// index.
func RunStatic(trace []replay.Request, cfg Config, policy string, size func(cached, footprint float64) int) ([]Result, int, error) {
	var runs []Result
	sizes := []int{size(0, 0)}
	var fits []bool
	for {
		n := sizes[len(sizes)-1]
		res, err := Run(trace, cfg, policy, n)
		if err != nil {
			return nil, 0, err
		}
		runs = append(runs, res)
		next := size(res.CachedShare(), res.Footprint())
		fits = append(fits, next <= n)
		if len(runs) == 3 || slices.Contains(sizes, next) {
			break
		}
		sizes = append(sizes, next)
	}
	chosen := -1
	for i := range runs {
		if fits[i] && (chosen < 0 || sizes[i] < sizes[chosen]) {
			chosen = i
		}
	}
	if chosen < 0 {
		chosen = 0
		for i := range runs {
			if sizes[i] > sizes[chosen] {
				chosen = i
			}
		}
	}
	return runs, chosen, nil
}

// String is a one-line summary.
func (r Result) String() string {
	return fmt.Sprintf("%s: attainment %.3f of %d windows, %.0f engine-s, %d changes (%d flaps), at most %d engines, %d requests",
		r.Policy, r.Attainment, r.Windows, r.EngineSeconds, r.ScaleChanges, r.Flaps, r.MaxEngines, r.Requests)
}
