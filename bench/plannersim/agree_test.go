package plannersim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/services/planner/core"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// measured is what one simulated engine did under Poisson arrivals of
// requests of one size: the 90th percentiles of the requests' TTFT (as
// their clients see it: the engine's time to the first token and the
// request's own overhead, which occupies no step, as the replay counts
// it) and of
// their mean inter-token latency, the mean of the latter, and the 90th
// percentile of the router's TTFT prediction for each request as it
// arrived (the worker's load at that moment, as its load report says it).
type measured struct {
	ttft90, itl90, itlMean, predicted90 float64
	requests                            int
	// over is the share of requests whose TTFT exceeded overMs.
	over float64
}

// runEngine serves n requests of prompt and output tokens arriving at rate
// per second on one simulated engine (the mocker's, real time), and
// measures them. Prompts are random tokens: no prefix is shared, as the
// planner's steady state assumes. The first tenth of the requests warm the
// engine up and are not measured.
func runEngine(t *testing.T, cfg simengine.Config, rate float64, prompt, output, n int, seed uint64, overMs float64) measured {
	t.Helper()
	eng, err := simengine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	model := cfg.Timing()
	overhead := simengine.RequestOverhead(cfg.SpeedupRatio)
	rng := rand.New(rand.NewPCG(seed, 1))
	type req struct {
		arrival, first time.Duration
		predicted      float64
	}
	reqs := map[string]*req{}
	var ttft, itl, pred []float64
	var now, stepEnd time.Duration
	var busy bool
	var pending simengine.StepResult
	next := time.Duration(0)
	arrived := 0
	warm := n / 10
	finish := func(res simengine.StepResult) {
		for _, o := range res.Outputs {
			r := reqs[o.RequestID]
			if r == nil || len(o.Tokens) == 0 {
				continue
			}
			if r.first == 0 {
				r.first = now
			}
			if o.Finish != simengine.FinishNone {
				id, _ := strconv.Atoi(o.RequestID)
				if id >= warm {
					ttft = append(ttft, float64(r.first-r.arrival+overhead)/1e6)
					pred = append(pred, r.predicted)
					if k := o.Usage.CompletionTokens; k > 1 {
						itl = append(itl, float64(now-r.first)/1e6/float64(k-1))
					}
				}
				delete(reqs, o.RequestID)
			}
		}
	}
	for arrived < n || busy {
		if arrived < n && (!busy || next <= stepEnd) {
			now = next
			// The router's prediction from the worker's load now: its
			// queued prompt tokens, its decoding requests, its KV usage.
			m := eng.Metrics()
			queued, decoding := 0, 0
			for _, l := range m.Requests {
				if l.PrefillTokens > 0 {
					queued += l.PrefillTokens
				} else {
					decoding++
				}
			}
			c := scheduler.Candidate{QueuedTokens: queued, Decoding: decoding,
				Usage: float64(m.KVBlocksUsed) / float64(m.KVBlocksTotal), Timing: model}
			toks := make([]uint32, prompt)
			for i := range toks {
				toks[i] = rng.Uint32N(100000) + 1000
			}
			id := strconv.Itoa(arrived)
			if err := eng.Add(simengine.Request{ID: id, Prompt: toks, MaxTokens: output}); err != nil {
				t.Fatal(err)
			}
			reqs[id] = &req{arrival: now, predicted: c.FirstTokenMs(0, prompt)}
			arrived++
			next = now + time.Duration(rng.ExpFloat64()/rate*float64(time.Second))
			if !busy {
				pending = eng.Step()
				busy, stepEnd = true, now+pending.Duration
			}
			continue
		}
		now = stepEnd
		finish(pending)
		busy = false
		if !eng.Idle() {
			pending = eng.Step()
			busy, stepEnd = true, now+pending.Duration
		}
	}
	mean := 0.0
	for _, v := range itl {
		mean += v
	}
	late := 0
	for _, v := range ttft {
		if v > overMs {
			late++
		}
	}
	return measured{over: float64(late) / float64(max(len(ttft), 1)), ttft90: quantile(ttft, 0.9), itl90: quantile(itl, 0.9), itlMean: mean / float64(max(len(itl), 1)),
		predicted90: quantile(pred, 0.9), requests: len(ttft)}
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[int(math.Ceil(q*float64(len(v))))-1]
}

// TestSteadyStateAgreesWithEngine checks the planner's steady state (what
// it sizes pools by) against the mocker's engine serving Poisson arrivals
// of one request size, and against the router's predictions for those
// arrivals, at shares of one engine's capacity within the default
// objectives. TTFT is as clients see it on all three sides: each
// request's overhead outside the engine's steps is in the planner's, the
// router's and the engine's (a constant of every request, it moves every
// 90th percentile by itself). The tolerances are what six draws of the
// random arrivals measured (4,000 requests a point; the AGREE_SEED
// variable picks the draw), rounded up, not fitted:
//   - ITL, at every load: the planner's mean step within 10% of the
//     requests' mean inter-token latency (measured: -6% to +6%), its 90th
//     percentile within 25% of theirs (measured: -18% to +3%);
//   - TTFT p90 up to three quarters of the capacity: within 25% of the
//     engine's (measured: -16% to +2%);
//   - at a quarter of the capacity: within 15% of the 90th percentile of
//     the router's predictions for the same arrivals (measured: 0 to
//     +10%); at higher loads the router here, knowing nothing of the step
//     in progress (no head), predicts less than both;
//   - at nine tenths of the capacity the engine holds both objectives
//     (measured: TTFT p90 at most 324 ms, ITL p90 46.8 ms);
//   - at the capacity itself the TTFT is not checked: where the KV cache
//     binds (4000+300) the engine pushes requests out and computes them
//     again, and the share of first tokens past the objective varied from
//     7% to 29% over the six draws, around the planner's 10%.
func TestSteadyStateAgreesWithEngine(t *testing.T) {
	cfg := simengine.DefaultConfig()
	obj := core.Objectives{TTFTMs: 500, ITLMs: 50}
	requests := 4000
	if testing.Short() {
		requests = 1500
	}
	for _, size := range []struct{ prompt, output int }{{1000, 200}, {4000, 300}, {6000, 150}, {500, 600}} {
		e := core.Engine{Model: cfg.Timing(), KVBlocks: cfg.NumGPUBlocks, BlockSize: cfg.BlockSize}
		capacity, _ := e.Capacity(core.Agg, float64(size.prompt), 0, float64(size.output), obj)
		for _, share := range []float64{0.25, 0.5, 0.75, 0.9, 1} {
			t.Run(fmt.Sprintf("%d+%d at %.0f%%", size.prompt, size.output, share*100), func(t *testing.T) {
				rate := share * capacity
				l := e.SteadyState(core.Agg, rate, float64(size.prompt), 0, float64(size.output))
				m := runEngine(t, cfg, rate, size.prompt, size.output, requests, seed, obj.TTFTMs)
				t.Logf("%.2f req/s of %.2f: ITL planner %.1f ms (p90 %.1f), engine %.1f (p90 %.1f); TTFT p90 planner %.0f ms, engine %.0f, router %.0f; full %.3f, over the objective %.3f",
					rate, capacity, l.StepMs, l.ITLMs, m.itlMean, m.itl90, l.TTFTMs, m.ttft90, m.predicted90, l.Full, m.over)
				off := func(got, want float64) float64 { return math.Abs(got-want) / want }
				if d := off(l.StepMs, m.itlMean); d > 0.10 {
					t.Errorf("mean ITL: planner %.1f ms, engine %.1f: %.0f%% apart, over 10%%", l.StepMs, m.itlMean, d*100)
				}
				if d := off(l.ITLMs, m.itl90); d > 0.25 {
					t.Errorf("ITL p90: planner %.1f ms, engine %.1f: %.0f%% apart, over 25%%", l.ITLMs, m.itl90, d*100)
				}
				switch {
				case share <= 0.75:
					if d := off(l.TTFTMs, m.ttft90); d > 0.25 {
						t.Errorf("TTFT p90: planner %.0f ms, engine %.0f: %.0f%% apart, over 25%%", l.TTFTMs, m.ttft90, d*100)
					}
				case share == 0.9:
					if m.ttft90 > obj.TTFTMs || m.itl90 > obj.ITLMs {
						t.Errorf("at 90%% of the capacity the engine's TTFT p90 is %.0f ms and its ITL p90 %.1f ms: past the objectives (%.0f, %.0f)",
							m.ttft90, m.itl90, obj.TTFTMs, obj.ITLMs)
					}
				}
				if share == 0.25 {
					if d := off(l.TTFTMs, m.predicted90); d > 0.15 {
						t.Errorf("TTFT p90: planner %.0f ms, router %.0f: %.0f%% apart, over 15%%", l.TTFTMs, m.predicted90, d*100)
					}
				}
			})
		}
	}
}

// seed starts the random source of the arrivals; the AGREE_SEED variable
// sets another, to check the tolerances on other draws.
var seed = func() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("AGREE_SEED"), 10, 64); err == nil {
		return v
	}
	return 1
}()

// sharedPrefix is n requests arriving at rate per second (Poisson, drawn
// from a random source keyed by seed), each a prompt of shared tokens every request has (a system
// prompt) and own tokens no other has, and output tokens; in blocks of 16
// tokens (Config.TraceBlock 16).
func sharedPrefix(n int, rate float64, shared, own, output int, seed uint64) []replay.Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	out := make([]replay.Request, 0, n)
	at, next := time.Duration(0), uint64(shared/16)
	for range n {
		ids := make([]uint64, 0, (shared+own)/16)
		for j := range shared / 16 {
			ids = append(ids, uint64(j))
		}
		for range own / 16 {
			ids = append(ids, next)
			next++
		}
		out = append(out, replay.Request{Arrival: at, InputLength: shared + own, OutputLength: output, HashIDs: ids})
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
	}
	return out
}

// TestCapacityAgreesUnderRouting checks the planner's capacity against a
// pool of simulated engines behind the router's own core (Run with a
// fixed pool), for requests that share a prefix (a system prompt: one
// engine holds its blocks once for all the requests running on it) and
// for requests that share nothing. The capacity is the planner's: for
// the cached share of the prompts and the KV blocks a running request
// holds that the pool's engines report (blocks in use over running
// requests), measured on a run at the capacity computed without either.
// At nine tenths of it the pool holds both objectives, at 1.3 times it
// breaks one (90th percentiles of all the requests after the first 30 s).
// Measured (240 s of arrivals a point, 2 and 3 engines): 3,000 shared +
// 1,000 own + 200 output tokens: a running request holds 70-81 blocks,
// not the 257 of its whole prompt and half its output; the capacity is
// 17.0 req/s an engine (6.86 with whole prompts, where the engines'
// TTFT p90 was 60-62 ms and ITL p90 12.1-12.5 ms); at 0.9 times ITL p90
// 38.4-38.7 ms, at 1.0 45.4-45.9, at 1.15 53.5-53.7, at 1.3 57.4 (TTFT
// p90 13 s). Nothing shared, 2,000 + 200: 131.6 blocks (132 whole), 9.78
// req/s either way; ITL p90 44.2 ms at 0.9 times, 50.2 at 1.0, 54.0 at
// 1.15.
func TestCapacityAgreesUnderRouting(t *testing.T) {
	cases := []struct {
		name                string
		shared, own, output int
		engines             int
		long                bool // run only without -short
	}{
		{name: "shared prefix, 2 engines", shared: 3000, own: 1000, output: 200, engines: 2},
		{name: "nothing shared, 2 engines", own: 2000, output: 200, engines: 2, long: true},
		{name: "shared prefix, 3 engines", shared: 3000, own: 1000, output: 200, engines: 3, long: true},
	}
	secs := 240.0
	if testing.Short() {
		secs = 90
	}
	pc := core.DefaultConfig()
	cfg := Config{Engine: simengine.DefaultConfig(), TraceBlock: 16, Startup: time.Minute, Window: 30 * time.Second, Planner: pc, Warmup: 30 * time.Second}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("another pool or workload: only without -short, to keep the short form quick")
			}
			run := func(rate float64, seed uint64) Result {
				t.Helper()
				n := float64(tc.engines)
				res, err := Run(sharedPrefix(int(rate*n*secs), rate*n, tc.shared, tc.own, tc.output, seed), cfg, "fixed", tc.engines)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			prompt, output := float64(tc.shared+tc.own), float64(tc.output)
			e := core.Engine{Model: cfg.Engine.Timing(), KVBlocks: cfg.Engine.NumGPUBlocks, BlockSize: cfg.Engine.BlockSize}
			whole, _ := e.Capacity(core.Agg, prompt, float64(tc.shared), output, pc.Objectives)
			calib := run(whole, 1)
			e.Footprint = calib.Footprint()
			capacity, _ := e.Capacity(core.Agg, prompt, calib.CachedShare()*prompt, output, pc.Objectives)
			wholeBlocks := math.Ceil((prompt + output/2) / float64(cfg.Engine.BlockSize))
			t.Logf("at %.2f req/s an engine (the capacity with whole prompts): TTFT p90 %.0f ms, ITL p90 %.1f; %.1f blocks a running request (%.0f whole), %.1f%% cached: capacity %.2f",
				whole, calib.Warm.TTFTp90Ms, calib.Warm.ITLp90Ms, e.Footprint, wholeBlocks, 100*calib.CachedShare(), capacity)
			// What the engines report a request holds: its own blocks and
			// a share of the prefix, or its whole prompt with nothing
			// shared.
			if tc.shared == 0 && math.Abs(e.Footprint-wholeBlocks) > 0.05*wholeBlocks {
				t.Errorf("nothing shared: %.1f blocks a running request, want its whole prompt and half its output, %.0f", e.Footprint, wholeBlocks)
			}
			if tc.shared > 0 && e.Footprint > 0.5*wholeBlocks {
				t.Errorf("a shared prefix: %.1f blocks a running request, want well under its whole prompt's %.0f", e.Footprint, wholeBlocks)
			}
			for _, share := range []float64{0.9, 1.3} {
				res := run(share*capacity, 2)
				held := res.Warm.TTFTp90Ms <= pc.TTFTMs && res.Warm.ITLp90Ms <= pc.ITLMs
				t.Logf("%.0f%% of the capacity, %.2f req/s an engine: TTFT p90 %.0f ms, ITL p90 %.1f ms", 100*share, share*capacity, res.Warm.TTFTp90Ms, res.Warm.ITLp90Ms)
				switch {
				case share < 1 && !held:
					t.Errorf("at %.0f%% of the capacity the pool breaks an objective: TTFT p90 %.0f ms, ITL p90 %.1f ms (objectives %.0f, %.0f)",
						100*share, res.Warm.TTFTp90Ms, res.Warm.ITLp90Ms, pc.TTFTMs, pc.ITLMs)
				case share > 1 && held:
					t.Errorf("at %.0f%% of the capacity the pool still holds both objectives (TTFT p90 %.0f ms, ITL p90 %.1f ms): the capacity, %.2f req/s, is too low",
						100*share, res.Warm.TTFTp90Ms, res.Warm.ITLp90Ms, capacity)
				}
			}
		})
	}
}
