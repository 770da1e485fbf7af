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
