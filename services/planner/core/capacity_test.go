package core

import (
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// simple is a timing model whose steady states work out by hand: a step's
// prefill costs 10 ms plus 0.1 ms a token, a decode step 20 ms at any KV
// usage, 1,000 tokens a step.
var simple = timingmodel.Model{PrefillPerToken: 0.1, PrefillPerBatch: 10, DecodeBase: 20, MaxBatchedTokens: 1000}

// split is simple with 4 ms of its prefill constant paid once per
// request, outside the steps (timingmodel.Model.PrefillPerRequest).
var split = func() timingmodel.Model {
	m := simple
	m.PrefillPerRequest = 4
	return m
}()

// TestTTFTAsClientsSeeIt: the planner's TTFT is the one its objective
// binds, the first token as clients see it: the engine's time (its queue
// and steps, which the overhead does not occupy) and then each request's
// overhead. At a rate so low that requests never meet, it is an idle
// engine's time to first token, the model's FirstTokenMs.
func TestTTFTAsClientsSeeIt(t *testing.T) {
	e := Engine{Model: split}
	idle := split.FirstTokenMs(0, 100, 0, 0)
	if idle != 20 {
		t.Fatalf("FirstTokenMs(100 tokens) = %v, want 6 + 10 + 4", idle)
	}
	if l := e.SteadyState(Prefill, 0.01, 100, 0, 0); !near(l.TTFTMs, idle) || !near(l.StepMs, 16) {
		t.Errorf("prefill pool at 0.01 req/s: TTFT %v, service %v; want %v, 16 (the engine's time)", l.TTFTMs, l.StepMs, idle)
	}
	// rho 0.5 (31.25 req/s of 16 ms): the queue's p90 is of the engine's
	// time, 16 + 32 ln 5, then the overhead.
	if l := e.SteadyState(Prefill, 31.25, 100, 0, 0); !near(l.TTFTMs, 16+32*math.Log(5)+4) {
		t.Errorf("prefill pool at rho 0.5: TTFT %v, want %v", l.TTFTMs, 16+32*math.Log(5)+4)
	}
	// An agg engine at a rate where nine in ten arrivals find it idle:
	// its p90 is the idle engine's, the overhead in.
	if l := e.SteadyState(Agg, 0.001, 100, 0, 10); !near(l.TTFTMs, idle) {
		t.Errorf("agg engine at 0.001 req/s: TTFT %v, want %v", l.TTFTMs, idle)
	}
	without := Engine{Model: simple}
	if a, b := e.SteadyState(Agg, 5, 100, 0, 10), without.SteadyState(Agg, 5, 100, 0, 10); !near(a.StepMs, b.StepMs) {
		t.Errorf("agg engine at 5 req/s: step %v with the overhead, %v without; the overhead occupies no step, want equal", a.StepMs, b.StepMs)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestCapacity(t *testing.T) {
	obj := Objectives{TTFTMs: 500, ITLMs: 50}
	for _, tc := range []struct {
		name           string
		eng            Engine
		role           Role
		prompt, output float64
		obj            Objectives
		want, bound    float64
	}{
		// Agg, 100+10 tokens. At r req/s a step of T ms prefills 0.1rT
		// tokens and decodes 0.01rT requests. A step's prompt tokens add
		// 0.1 ms each to the 20 ms decode step (its fixed cost paid once),
		// so T = 20 + 0.01rT = 20/(1-0.01r) at every rate. The ITL
		// objective here is the 90th percentile at 40 req/s (itlAt40):
		// r = 40, where the TTFT is far under 500 ms.
		{"agg ITL-bound", Engine{Model: simple}, Agg, 100, 10, Objectives{TTFTMs: 500, ITLMs: itlAt40}, 40, 40},
		// Prefill, 400 tokens, TTFT 100 ms at the 90th percentile: a
		// prompt takes 50 ms, the engine is busy rho = 0.05r of the time,
		// TTFT p90 = 50 + 50/(1-rho)*ln(10*rho): 100 ms where
		// ln(10*rho) = 1-rho, rho = rhoAt100 (solved below), r = 20*rho.
		{"prefill TTFT-bound", Engine{Model: simple}, Prefill, 400, 10, Objectives{TTFTMs: 100, ITLMs: 1}, 20 * rhoAt100, 20 * rhoAt100},
		// TTFT 40 ms under the 50 ms of a prompt alone: nothing holds it;
		// the engine keeps up while it is not always busy: r < 20.
		{"prefill objective unreachable", Engine{Model: simple}, Prefill, 400, 0, Objectives{TTFTMs: 40, ITLMs: 50}, 0, 20},
		// Decode, 100 output tokens: every step 20 ms, so ITL holds at
		// any rate and the step budget binds: 0.1r*20 = 1000, r = 500.
		{"decode budget-bound", Engine{Model: simple}, Decode, 400, 100, obj, 500, 500},
		// With 1,000 KV blocks of 10 tokens, a request holds (its
		// prompt is not the decode pool's) 10 blocks at its end: the
		// cache holds 100 requests, a queue of 100 servers offered the
		// 0.1r*20 = 2r requests decoding. Nine in ten arrivals find a
		// server free while Erlang's C is at most 0.1: r = erlangAt10/2.
		{"decode KV-bound", Engine{Model: simple, KVBlocks: 1000, BlockSize: 10}, Decode, 400, 100, obj, erlangAt10 / 2, erlangAt10 / 2},
		// The workers report 5 blocks a running request, what one holds
		// unshared on average (half its 10): the same.
		{"decode KV-bound, footprint of its own", Engine{Model: simple, KVBlocks: 1000, BlockSize: 10, Footprint: 5}, Decode, 400, 100, obj, erlangAt10 / 2, erlangAt10 / 2},
		// They report 2.5: half of a request's blocks are another's
		// too. One holds 2.5 + 5 at its end: the cache holds 133.
		{"decode KV-bound, footprint shared", Engine{Model: simple, KVBlocks: 1000, BlockSize: 10, Footprint: 2.5}, Decode, 400, 100, obj, erlangLoad(133, 0.1) / 2, erlangLoad(133, 0.1) / 2},
		{"no work", Engine{Model: simple}, Agg, 0, 0, obj, 0, 0},
		{"invalid model", Engine{}, Agg, 100, 10, obj, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bound := tc.eng.Capacity(tc.role, tc.prompt, 0, tc.output, tc.obj)
			if !near(got, tc.want) || !near(bound, tc.bound) {
				t.Fatalf("Capacity = %v (bound %v), want %v (bound %v)", got, bound, tc.want, tc.bound)
			}
		})
	}
}

func TestSteadyState(t *testing.T) {
	e := Engine{Model: simple}
	// At 20 req/s of 100+10: T = 20/(1-0.2) = 25 ms (half the steps
	// carry a prompt, 10 ms of compute beside the 20 ms decode step), 50
	// prompt tokens and 5 decoding requests a step; rho = 50/995.
	l := e.SteadyState(Agg, 20, 100, 0, 10)
	if !l.Feasible || !near(l.StepMs, 25) || !near(l.Prefill, 50) || !near(l.Decoding, 5) ||
		!near(l.PrefillUtilization, 50.0/995) {
		t.Fatalf("steady state = %+v", l)
	}
	// ITL: a request's 9 intervals see mu = 20*9*25/1000 = 4.5 prompts,
	// b = 5/4.5 ms each on its mean interval, in busy periods of rho =
	// 20*b*9/1000 = 0.2: the 90th percentile is 25 + z*sqrt(4.5)*b/0.8.
	b := 5 / 4.5
	if want := 25 + normalQuantile(0.9)*math.Sqrt(4.5)*b/0.8; !near(l.ITLMs, want) {
		t.Fatalf("ITL p90 = %v, want %v", l.ITLMs, want)
	}
	// TTFT: the prompt's own step is 30 ms (a decode step of 20 and its
	// 100 tokens beside it: the router's prediction, whose steps beside
	// decodes pay the decode step's constant, not the prefill's), after
	// the wait for the step in progress, with 10 ms more for each prompt
	// that arrived during that wait. The same 90th percentile, integrated
	// finely here: ttftQuantile's 16 points are within 2% of it (1.2%).
	if want := ttft90Fine(20, 25, 30, 20, 20, 10, 0.02*(30+10*25)); math.Abs(l.TTFTMs-want) > 0.02*want {
		t.Fatalf("TTFT p90 = %v, want %v", l.TTFTMs, want)
	}
	// At 100 req/s the fixed point T = 20/(1-1) does not exist.
	if l := e.SteadyState(Agg, 100, 100, 0, 10); l.Feasible {
		t.Fatalf("100 req/s = %+v, want infeasible", l)
	}
}

// quadratic is simple with attention: a prompt of t tokens alone costs
// 1e-4*t^2 more, 1 ms for 100 tokens, and a step has room for 10,000.
var quadratic = timingmodel.Model{PrefillQuadratic: 1e-4, PrefillPerToken: 0.1, PrefillPerBatch: 10, DecodeBase: 20, MaxBatchedTokens: 10000}

// TestSteadyStateAttentionPerSequence checks that the steady state charges
// each prompt the attention over its own tokens, as the engines do: a
// step's prompts cost their count times one prompt's attention, never the
// square of their summed tokens.
func TestSteadyStateAttentionPerSequence(t *testing.T) {
	e := Engine{Model: quadratic}
	for _, tc := range []struct {
		name string
		rate float64
		// step is the mean step, ms: with 100+10 tokens at r req/s a
		// step of T ms has x = rT/1000 arrivals, each 10 ms of tokens
		// and 1 ms of attention beside the 20 ms decode step, so
		// T = 20 + 0.011rT whether x is below 1 (a share x of the steps
		// carries one prompt) or above (every step carries x).
		step float64
	}{
		// x = 0.51: T = 20/(1-0.22).
		{"one prompt in some steps", 20, 20 / (1 - 0.22)},
		// x = 3.5: T = 20/(1-0.66); summed, the 3.5 prompts' 350
		// tokens would cost 12.25 ms of attention where they cost 3.5.
		{"several prompts a step", 60, 20 / (1 - 0.66)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := e.SteadyState(Agg, tc.rate, 100, 0, 10)
			if !l.Feasible || !near(l.StepMs, tc.step) {
				t.Fatalf("steady state = %+v, want a step of %v ms", l, tc.step)
			}
			// TTFT: a prompt's own step is 31 ms (the 20 ms decode step,
			// its tokens and its attention), 21 alone (10+10+1), and each
			// prompt in the step in progress or arriving in the wait for
			// it adds 11 ms: ttft90Fine's linear steps.
			want := ttft90Fine(tc.rate, tc.step, 31, 21, 20, 11, tc.rate/1000*(31+10*tc.step))
			if math.Abs(l.TTFTMs-want) > 0.02*want {
				t.Fatalf("TTFT p90 = %v, want %v", l.TTFTMs, want)
			}
		})
	}
}

// TestSteadyStateCachedPrefix checks that the steady state computes a
// prompt's uncached part only, each of its tokens attending over the
// cached prefix too, while the KV cache holds the whole prompt: 300-token
// prompts of which c are cached cost n = 300-c tokens (0.1 ms each) and
// n*(2c+n) of attention (1e-4 ms each) beside the 20 ms decode step, so
// at r req/s T = 20 + r*T*(0.1n + 1e-4*n*(2c+n))/1000.
func TestSteadyStateCachedPrefix(t *testing.T) {
	e := Engine{Model: quadratic, KVBlocks: 1000, BlockSize: 10}
	for _, tc := range []struct {
		name         string
		rate, cached float64
		// perPrompt is a prompt's compute beside a decode step, ms.
		perPrompt float64
	}{
		// 30 ms of tokens, 9 of attention: what every prompt cost
		// before workers counted their cached tokens.
		{"nothing cached", 10, 0, 30 + 9},
		// 100 new tokens after 200 cached: 10 ms of tokens, 100*500 =
		// 50,000 of attention (5 ms), not 300^2 (9 ms) or 100^2 (1 ms).
		{"two thirds cached", 10, 200, 10 + 5},
		{"two thirds cached, busier", 30, 200, 10 + 5},
		// A wholly cached prompt computes its last token: 0.1 ms and
		// 1*(598+1) of attention.
		{"all cached", 10, 300, 0.1 + 0.0599},
		// More cached than prompt (counts read at different moments) is
		// all of it.
		{"cached past the prompt", 10, 500, 0.1 + 0.0599},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := e.SteadyState(Agg, tc.rate, 300, tc.cached, 10)
			step := 20 / (1 - tc.rate*tc.perPrompt/1000)
			n := 300 - min(tc.cached, 299)
			if !l.Feasible || !near(l.StepMs, step) || !near(l.Prefill, tc.rate*n*step/1000) {
				t.Fatalf("steady state = %+v, want a step of %v ms and %v prompt tokens a step", l, step, tc.rate*n*step/1000)
			}
			// The KV cache holds the whole prompt and half the output:
			// 31 blocks of 10 tokens a request decoding, cached or not;
			// the blocks the workers report a running request holds
			// when they do (a shared prefix held once).
			if !near(l.Usage, l.Decoding*31/1000) {
				t.Fatalf("KV usage %v with %v decoding, want %v", l.Usage, l.Decoding, l.Decoding*31/1000)
			}
			shared := e
			shared.Footprint = 12
			if l := shared.SteadyState(Agg, tc.rate, 300, tc.cached, 10); !near(l.Usage, l.Decoding*12/1000) {
				t.Fatalf("KV usage %v with %v decoding at 12 blocks each, want %v", l.Usage, l.Decoding, l.Decoding*12/1000)
			}
			// TTFT: the prompt's own step is the decode step and its
			// compute, alone the per-step constant and its compute.
			own := 20 + tc.perPrompt
			want := ttft90Fine(tc.rate, step, own, 10+tc.perPrompt, 20, tc.perPrompt, tc.rate/1000*(own+10*step))
			if math.Abs(l.TTFTMs-want) > 0.02*want {
				t.Fatalf("TTFT p90 = %v, want %v", l.TTFTMs, want)
			}
		})
	}
}

// TestCapacityCachedPrefix checks that a pool's capacity rises with the
// cached part of its prompts, and that a prefill pool prices a prompt's
// uncached part (its queue's service time: 10 ms a step, then the tokens
// and attention as in TestSteadyStateCachedPrefix).
func TestCapacityCachedPrefix(t *testing.T) {
	obj := Objectives{TTFTMs: 500, ITLMs: 50}
	e := Engine{Model: quadratic}
	last := 0.0
	for _, cached := range []float64{0, 100, 200, 299} {
		c, _ := e.Capacity(Agg, 300, cached, 10, obj)
		if !(c > last) {
			t.Fatalf("agg capacity with %v of 300 tokens cached = %v, not above %v with fewer", cached, c, last)
		}
		last = c
	}
	// Prefill: the engine keeps up while busy less than all the time:
	// r < 1000/service.
	for _, tc := range []struct{ cached, service float64 }{{0, 10 + 30 + 9}, {200, 10 + 10 + 5}} {
		if _, bound := e.Capacity(Prefill, 300, tc.cached, 0, Objectives{TTFTMs: 1, ITLMs: 1}); !near(bound, 1000/tc.service) {
			t.Fatalf("prefill bound with %v cached = %v, want %v", tc.cached, bound, 1000/tc.service)
		}
	}
	// Decode pools compute no prompt: what is cached changes nothing.
	a, _ := e.Capacity(Decode, 300, 0, 100, obj)
	b, _ := e.Capacity(Decode, 300, 200, 100, obj)
	if a != b {
		t.Fatalf("decode capacity %v with nothing cached, %v with 200 cached", a, b)
	}
}

// ttft90Fine is the 90th percentile of the time to first token at rate
// req/s on an engine of mean step t ms whose steps cost decode ms plus
// perPrompt ms a prompt, a prompt's own step own ms (idle ms on an idle
// engine, found idle with probability exp(-load)): the wait R for the
// step in progress (j prompts, Poisson with mean rate*t/1000, found in
// proportion to its length), then the own step with perPrompt ms for each
// of the K ~ Poisson(rate*R/1000) prompts that arrived during R. It
// integrates over R with 1,000 points a step.
func ttft90Fine(rate, t, own, idle, decode, perPrompt, load float64) float64 {
	lambda, f := rate/1000, rate*t/1000
	pIdle := math.Exp(-load)
	exceeds := func(x float64) float64 {
		p := 0.0
		if idle > x {
			p = pIdle
		}
		var busy, total float64
		pj := math.Exp(-f)
		for j := 0; j < 30; j++ {
			if j > 0 {
				pj *= f / float64(j)
			}
			s := decode + perPrompt*float64(j)
			total += pj * s
			const n = 1000
			for i := range n {
				r := (float64(i) + 0.5) / n * s
				k := int(max(math.Floor((x-r-own)/perPrompt)+1, 0)) // more prompts that pass x
				// P(K >= k), K Poisson with mean lambda*r.
				mu := lambda * r
				term, below := math.Exp(-mu), 0.0
				for i := 0; i < k; i++ {
					if i > 0 {
						term *= mu / float64(i)
					}
					below += term
				}
				busy += pj * s / n * max(1-below, 0)
			}
		}
		return p + (1-pIdle)*busy/total
	}
	lo, hi := 0.0, 1000.0
	for range 50 {
		mid := (lo + hi) / 2
		if exceeds(mid) > 0.1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// erlangAt10 is the load at which an arrival waits for one of 100
// servers with probability 0.1 (Erlang's C), by bisection: 86.25.
var erlangAt10 = erlangLoad(100, 0.1)

// erlangLoad is the load at which an arrival waits for one of c servers
// with probability p (Erlang's C), by bisection.
func erlangLoad(c int, p float64) float64 {
	lo, hi := 0.0, float64(c)
	for range 100 {
		mid := (lo + hi) / 2
		if erlangC(c, mid) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func TestErlangC(t *testing.T) {
	for _, tc := range []struct {
		c    int
		a    float64
		want float64
	}{
		// One server: an arrival waits while it is busy, a of the time.
		{1, 0.5, 0.5},
		// Two servers at load 1: Erlang's B is (1/2)/(1+1+1/2) = 1/5,
		// C = 2B/(2-(1-B)) = 1/3.
		{2, 1, 1.0 / 3},
		{3, 3, 1}, {3, 4, 1}, {5, 0, 0},
	} {
		if got := erlangC(tc.c, tc.a); !near(got, tc.want) {
			t.Errorf("erlangC(%d, %v) = %v, want %v", tc.c, tc.a, got, tc.want)
		}
	}
}

// rhoAt100 solves ln(10*rho) = 1-rho by bisection (0.1 < rho < 1): the
// utilization at which a 50 ms prompt's TTFT p90 reaches 100 ms.
var rhoAt100 = func() float64 {
	lo, hi := 0.1, 1.0
	for range 100 {
		mid := (lo + hi) / 2
		if math.Log(10*mid) < 1-mid {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}()

func TestTTFT90(t *testing.T) {
	for _, tc := range []struct{ own, rho, want float64 }{
		{50, 0, 50}, {50, 0.1, 50},
		// rho 0.5: the wait's p90 is 100*ln(5).
		{50, 0.5, 50 + 100*math.Log(5)},
		{50, rhoAt100, 100},
	} {
		if got := ttft90(tc.own, tc.rho); !near(got, tc.want) {
			t.Errorf("ttft90(%v, %v) = %v, want %v", tc.own, tc.rho, got, tc.want)
		}
	}
}

func TestNow(t *testing.T) {
	for _, tc := range []struct {
		name             string
		model            timingmodel.Model
		role             Role
		queued, running  int
		prompt, output   float64
		cached           float64
		wantTTFT, wantIT float64
	}{
		// An idle engine: the prompt's own prefill, no ITL.
		{"idle", simple, Agg, 0, 0, 100, 10, 0, 20, 0},
		// 1,500 queued + 100 new over chunks of 990 (10 decoding): two
		// steps, one full (99) and one of 610 (61), each beside a decode
		// step (40) that pays the per-step constant. ITL: the 150 ms of
		// the queued tokens spread over a request's next 10 steps, beside
		// their 20 ms decode steps.
		{"busy", simple, Agg, 1500, 10, 100, 10, 0, 99 + 61 + 40, 20 + 15},
		// A request of one more token sees at most a whole chunk (990
		// tokens, 99 ms) beside its one step.
		{"busy, short answers", simple, Agg, 1500, 10, 100, 1, 0, 99 + 61 + 40, 20 + 99},
		// Queued tokens are prompts of the mean size, each attending over
		// itself: 300 tokens as three prompts of 100 put 3 x 1 ms of
		// attention beside their 30 ms of tokens, over 10 steps. TTFT is
		// the timing model's.
		{"attention per prompt", quadratic, Agg, 300, 10, 100, 10, 0, quadratic.TTFTMs(300, 100, 10, 0.5, 1), 20 + 3.3},
		// Prompts of 300 tokens, 200 of them cached: the request computes
		// 100 tokens after the 300 queued, in one step beside the decode
		// step: 40 ms of tokens, attention 300^2 for the queue (the
		// timing model's, as the router predicts) and 100*(400+100) for
		// the request (14 ms), 20 ms of decode. The queued 300 tokens are
		// three prompts' uncached parts, each attending over 500: 30 ms
		// of tokens and 15 of attention over 10 steps.
		{"cached prefix", quadratic, Agg, 300, 10, 300, 10, 200, 40 + 14 + 20, 20 + 4.5},
		// A wholly cached prompt on an idle engine computes its last
		// token: the per-step constant and 0.1 ms.
		{"all cached", simple, Agg, 0, 0, 100, 10, 100, 10.1, 0},
		// Decode pools prefill nothing of their own.
		{"decode", simple, Decode, 0, 10, 100, 10, 50, 0, 20},
		{"prefill has no ITL", simple, Prefill, 0, 10, 100, 10, 0, 10 + 20, 0},
		// 4 ms of the prefill constant is each request's own, outside the
		// steps: a step alone pays 6, and the client sees the first
		// token 4 ms after the engine computes it, an idle engine's
		// prompt at the fit's Prefill(100) (20 ms). Beside decode steps
		// (which pay the step's constant) only the 4 ms moves. A decode
		// pool's worker computes no first token of its own.
		{"idle, overhead per request", split, Agg, 0, 0, 100, 10, 0, 6 + 10 + 4, 0},
		{"busy, overhead per request", split, Agg, 1500, 10, 100, 10, 0, 99 + 61 + 40 + 4, 20 + 15},
		{"decode, overhead per request", split, Decode, 0, 10, 100, 10, 50, 0, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ttft, itl := Engine{Model: tc.model}.Now(tc.role, tc.queued, tc.running, 0.5, tc.prompt, tc.cached, tc.output)
			if !near(ttft, tc.wantTTFT) || !near(itl, tc.wantIT) {
				t.Fatalf("Now = %v, %v; want %v, %v", ttft, itl, tc.wantTTFT, tc.wantIT)
			}
		})
	}
}
