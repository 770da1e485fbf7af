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
		// tokens and decodes 0.01rT requests. While rT < 1000 a share
		// rT/1000 of the steps carries a prompt: T = 0.01rT + 0.01rT +
		// 20, T = 20/(1-0.02r), up to r = 25 (T = 40); past it every
		// step does: T = 10 + 0.01rT + 20 = 30/(1-0.01r). ITL 50 ms:
		// r = 40. The TTFT then: 200 prompt tokens a step of 980 free
		// (rho 0.204), the request's own prompt a 20 ms prefill and a
		// 20 ms decode step: 50 ms.
		{"agg ITL-bound", Engine{Model: simple}, Agg, 100, 10, obj, 40, 40},
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
		// prompt is not the decode pool's) ceil(50/10) = 5 blocks:
		// 200 requests fill the cache, 0.1r*20 = 200, r = 100.
		{"decode KV-bound", Engine{Model: simple, KVBlocks: 1000, BlockSize: 10}, Decode, 400, 100, obj, 100, 100},
		{"no work", Engine{Model: simple}, Agg, 0, 0, obj, 0, 0},
		{"invalid model", Engine{}, Agg, 100, 10, obj, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bound := tc.eng.Capacity(tc.role, tc.prompt, tc.output, tc.obj)
			if !near(got, tc.want) || !near(bound, tc.bound) {
				t.Fatalf("Capacity = %v (bound %v), want %v (bound %v)", got, bound, tc.want, tc.bound)
			}
		})
	}
}

func TestSteadyState(t *testing.T) {
	e := Engine{Model: simple}
	// At 20 req/s of 100+10: T = 20/0.6 = 33.3 ms (2 in 3 steps carry
	// a prompt), 66.7 prompt tokens and 6.67 decoding requests a step;
	// rho = 66.7/993.3 = 0.067, under 0.1: the 90th percentile waits
	// nothing, TTFT = the prompt's own 30 ms (a decode step of 20 and
	// its 100 tokens beside it: the router's prediction, whose steps
	// beside decodes pay the decode step's constant, not the prefill's).
	l := e.steadyState(Agg, 20, 100, 10)
	rho := (200.0 / 3) / (1000 - 20.0/3)
	if !l.Feasible || !near(l.StepMs, 100.0/3) || !near(l.Prefill, 200.0/3) || !near(l.Decoding, 20.0/3) ||
		!near(l.PrefillUtilization, rho) || !near(l.TTFTMs, 30) {
		t.Fatalf("steady state = %+v", l)
	}
	// At 100 req/s the fixed point T = 30/(1-1) does not exist.
	if l := e.steadyState(Agg, 100, 100, 10); l.Feasible {
		t.Fatalf("100 req/s = %+v, want infeasible", l)
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
	e := Engine{Model: simple}
	for _, tc := range []struct {
		name             string
		role             Role
		queued, running  int
		prompt           float64
		wantTTFT, wantIT float64
	}{
		// An idle engine: the prompt's own prefill, no ITL.
		{"idle", Agg, 0, 0, 100, 20, 0},
		// 1,500 queued + 100 new over chunks of 990 (10 decoding): two
		// steps, one full (99) and one of 610 (61), each beside a decode
		// step (40) that pays the per-step constant; ITL a 990-token
		// chunk and a decode step.
		{"busy", Agg, 1500, 10, 100, 99 + 61 + 40, 20 + 109},
		// Decode pools prefill nothing of their own.
		{"decode", Decode, 0, 10, 100, 0, 20},
		{"prefill has no ITL", Prefill, 0, 10, 100, 10 + 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ttft, itl := e.Now(tc.role, tc.queued, tc.running, 0.5, tc.prompt)
			if !near(ttft, tc.wantTTFT) || !near(itl, tc.wantIT) {
				t.Fatalf("Now = %v, %v; want %v, %v", ttft, itl, tc.wantTTFT, tc.wantIT)
			}
		})
	}
}
