package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

func TestJudgedBy(t *testing.T) {
	for _, tc := range []struct {
		name           string
		rate, noise    float64
		interval, win  time.Duration
		wantN, wantDis float64
	}{
		// 10 req/s of Poisson arrivals: a 10 s interval counts 100 +- 10,
		// a rate's noise of 1 req/s.
		{"poisson", 10, 1, 10 * time.Second, 30 * time.Second, 300, 1},
		// Twice the variance: clusters of two on average.
		{"clustered", 10, math.Sqrt2, 10 * time.Second, 30 * time.Second, 300, 2},
		// Less noise than a Poisson process has is a chance low estimate.
		{"below poisson", 10, 0.5, 10 * time.Second, 30 * time.Second, 300, 1},
		{"no noise measured yet", 4, 0, 10 * time.Second, 30 * time.Second, 120, 1},
		{"no demand", 0, 1, 10 * time.Second, 30 * time.Second, 0, 1},
		{"not judged by windows", 10, 1, 10 * time.Second, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := JudgedBy(tc.rate, tc.noise, tc.interval, tc.win, 0.95)
			if !near(j.Requests, tc.wantN) || !near(j.Dispersion, tc.wantDis) || j.Attainment != 0.95 {
				t.Fatalf("JudgedBy = %+v, want %v requests, dispersion %v", j, tc.wantN, tc.wantDis)
			}
		})
	}
}

// TestLateAtTheCapacity: the share of late requests CapacityJudged works
// with is the tail the steady state's 90th percentile is found on: a
// tenth exactly at the capacity, for the objective that binds it.
func TestLateAtTheCapacity(t *testing.T) {
	for _, tc := range []struct {
		name           string
		role           Role
		prompt, output float64
		obj            Objectives
		ttft           bool // the TTFT binds, else the ITL
	}{
		{"prefill TTFT-bound", Prefill, 400, 10, Objectives{TTFTMs: 100, ITLMs: 1}, true},
		{"agg ITL-bound", Agg, 100, 10, Objectives{TTFTMs: 500, ITLMs: itlAt40}, false},
		{"agg TTFT-bound", Agg, 2000, 50, Objectives{TTFTMs: 400, ITLMs: 1000}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Engine{Model: simple}
			c, _ := e.Capacity(tc.role, tc.prompt, 0, tc.output, tc.obj)
			ttft, itl := e.late(tc.role, c, tc.prompt, 0, tc.output, tc.obj, nil)
			got := itl
			if tc.ttft {
				got = ttft
			}
			if math.Abs(got-0.1) > 1e-3 {
				t.Fatalf("at the capacity %.4g req/s: late TTFT %.4f, ITL %.4f; want a tenth for the binding one", c, ttft, itl)
			}
		})
	}
}

// TestCapacityJudged: judged by windows, an engine sustains less than in
// the steady state: less with fewer requests a window, more clustered
// arrivals, or more windows to hold; the steady state's with no windows.
func TestCapacityJudged(t *testing.T) {
	obj := Objectives{TTFTMs: 500, ITLMs: 50}
	for _, tc := range []struct {
		name           string
		eng            Engine
		role           Role
		prompt, output float64
		obj            Objectives
	}{
		{"prefill", Engine{Model: simple}, Prefill, 400, 10, Objectives{TTFTMs: 100, ITLMs: 1}},
		{"agg ITL-bound", Engine{Model: simple}, Agg, 100, 10, Objectives{TTFTMs: 500, ITLMs: itlAt40}},
		{"agg TTFT-bound", Engine{Model: simple}, Agg, 2000, 50, Objectives{TTFTMs: 400, ITLMs: 1000}},
		{"decode KV-bound", Engine{Model: simple, KVBlocks: 1000, BlockSize: 10}, Decode, 400, 100, obj},
		{"agg, default model and cache", Engine{Model: defaultModel(), KVBlocks: 8000, BlockSize: 16, Footprint: 300}, Agg, 4600, 230, obj},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capacity := func(j Judged) float64 {
				c, _ := tc.eng.CapacityJudged(tc.role, tc.prompt, 0, tc.output, tc.obj, j)
				return c
			}
			steady, _ := tc.eng.Capacity(tc.role, tc.prompt, 0, tc.output, tc.obj)
			if got := capacity(Judged{}); got != steady {
				t.Fatalf("no windows: %v, want the steady state's %v", got, steady)
			}
			// Each is below the next, and the steady state's above all.
			base := Judged{Requests: 30, Dispersion: 1, Attainment: 0.95}
			more := func(f func(*Judged)) Judged { j := base; f(&j); return j }
			for _, order := range [][]Judged{
				{more(func(j *Judged) { j.Attainment = 0.99 }), base},
				{more(func(j *Judged) { j.Dispersion = 3 }), base},
				{base, more(func(j *Judged) { j.Requests = 300 }), more(func(j *Judged) { j.Requests = 3000 })},
			} {
				last := 0.0
				for _, j := range order {
					c := capacity(j)
					t.Logf("%+v: %.4g req/s (steady state %.4g)", j, c, steady)
					if !(c > last) || !(c < steady) {
						t.Errorf("%+v: %.4g req/s, want above %.4g and below the steady state's %.4g", j, c, last, steady)
					}
					last = c
				}
			}
		})
	}
}

// TestCapacityJudgedHoldsItsWindows draws windows as window.md models
// them, for a prefill engine (its late share by hand: rho*exp(-(1-rho))
// at a 100 ms objective and 50 ms prompts): a window's arrivals, in
// clusters of k (dispersion k), a Poisson count of clusters; each request
// late with the steady state's probability at the window's own rate. At
// the judged capacity about the asked share of windows keeps its late
// requests within a tenth (the normal approximation is within a couple of
// points here); at the steady state's capacity about half do.
func TestCapacityJudgedHoldsItsWindows(t *testing.T) {
	e := Engine{Model: simple}
	obj := Objectives{TTFTMs: 100, ITLMs: 1}
	steady, _ := e.Capacity(Prefill, 400, 0, 0, obj)
	for _, tc := range []struct {
		requests    float64
		cluster     int
		attainment  float64
		lo, hi      float64 // the share of windows held at the judged capacity
		steadyAtMos float64 // and at most this share at the steady state's
	}{
		{300, 1, 0.95, 0.93, 0.985, 0.65},
		{100, 1, 0.95, 0.93, 0.985, 0.65},
		{300, 3, 0.95, 0.93, 0.985, 0.65},
		{300, 1, 0.8, 0.77, 0.86, 0.65},
	} {
		t.Run(fmt.Sprintf("%.0f a window, clusters of %d, %.0f%%", tc.requests, tc.cluster, 100*tc.attainment), func(t *testing.T) {
			j := Judged{Requests: tc.requests, Dispersion: float64(tc.cluster), Attainment: tc.attainment}
			judged, _ := e.CapacityJudged(Prefill, 400, 0, 0, obj, j)
			held := func(rate float64) float64 {
				rng := rand.New(rand.NewPCG(7, uint64(tc.cluster)))
				const windows = 4000
				ok := 0
				for range windows {
					n := poisson(rng, tc.requests/float64(tc.cluster)) * tc.cluster
					if n == 0 {
						ok++
						continue
					}
					p, _ := e.late(Prefill, rate*float64(n)/tc.requests, 400, 0, 0, obj, nil)
					late := 0
					for range n {
						if rng.Float64() < p {
							late++
						}
					}
					if float64(late) <= 0.1*float64(n) {
						ok++
					}
				}
				return float64(ok) / windows
			}
			atJudged, atSteady := held(judged), held(steady)
			t.Logf("judged %.4g req/s holds %.3f of windows; steady state's %.4g holds %.3f", judged, atJudged, steady, atSteady)
			if atJudged < tc.lo || atJudged > tc.hi {
				t.Errorf("at the judged capacity %.3f of windows held, want %.2f-%.3f", atJudged, tc.lo, tc.hi)
			}
			if atSteady > tc.steadyAtMos {
				t.Errorf("at the steady state's capacity %.3f of windows held, want at most %.2f", atSteady, tc.steadyAtMos)
			}
		})
	}
}

// poisson draws a Poisson count of mean mu (Knuth's product of uniforms,
// in pieces of at most 30 so the product stays far from underflow).
func poisson(rng *rand.Rand, mu float64) int {
	n := 0
	for mu > 0 {
		m := min(mu, 30)
		mu -= m
		limit, p := math.Exp(-m), rng.Float64()
		for p > limit {
			n++
			p *= rng.Float64()
		}
	}
	return n
}

// TestCapacityJudgedPricesPromptSizes: with the computed prompts' sizes
// known, a request's own prefill takes its own prompt's time. Requests of
// the mean prompt size sustain about what the mean-size model says; a few
// prompts whose own prefill passes the TTFT objective are late at any
// load and leave the others less room; so many that no load holds a
// window leave the capacity of requests of the mean prompt.
func TestCapacityJudgedPricesPromptSizes(t *testing.T) {
	e := Engine{Model: defaultModel(), KVBlocks: 8000, BlockSize: 16, Footprint: 300}
	obj := Objectives{TTFTMs: 500, ITLMs: 50}
	const prompt, output = 4600, 230
	base := Judged{Requests: 300, Dispersion: 1, Attainment: 0.95}
	meanOnly, _ := e.CapacityJudged(Agg, prompt, 0, output, obj, base)
	sizes := func(far float64) []float64 {
		s := make([]float64, wire.ComputedPromptBuckets)
		s[wire.ComputedPromptBucket(prompt)] = 1 - far
		s[wire.ComputedPromptBuckets-1] += far
		return s
	}
	if own := e.ownMs(bucketMiddle(wire.ComputedPromptBuckets-1), 0, 0, 0); !(own > 10*obj.TTFTMs) {
		t.Fatalf("the last bucket's own prefill %.0f ms: want far past the objective", own)
	}
	for _, tc := range []struct {
		name    string
		far     float64 // share of requests far past the objective on their own
		lo, hi  float64 // the capacity's bounds, as shares of the mean-size one
		lateMin float64 // the late TTFT share at a light load, at least
	}{
		{"all of the mean's size", 0, 0.95, 1.0000001, 0},
		{"three in a hundred far past", 0.03, 0.5, 0.99, 0.03},
		{"more than a window allows", 0.12, 1, 1, 0.12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := base
			j.Computed = sizes(tc.far)
			got, _ := e.CapacityJudged(Agg, prompt, 0, output, obj, j)
			t.Logf("%.4g req/s (mean-size %.4g)", got, meanOnly)
			if got < tc.lo*meanOnly || got > tc.hi*meanOnly {
				t.Errorf("%.4g req/s: want %.2f to %.2f of the mean-size capacity %.4g", got, tc.lo, tc.hi, meanOnly)
			}
			ttft, itl := e.late(Agg, meanOnly/100, prompt, 0, output, obj, j.Computed)
			if ttft < tc.lateMin || ttft > tc.lateMin+0.01 || itl > 0.01 {
				t.Errorf("at a light load: late TTFT %.4f, ITL %.4f; want TTFT %.2f (+0.01) and no ITL", ttft, itl, tc.lateMin)
			}
		})
	}
}

// TestWaitBehind works waitBehind's rows by hand on an engine whose
// prefill costs 0.1 ms a token and nothing else (no step constant, no
// attention, nothing decoding), for requests of 2000 prompt tokens of
// which 1000 are cached: g = 0.5, a mean prompt's own prefill 100 ms, so
// the slack is 400 ms within a 500 ms objective and rho = rate*0.5*0.1 s.
// Bucket 7 computes 256*2^3.25 = 2435.5 tokens (243.5 ms alone), bucket 13
// 256*2^6.25 = 19484 tokens (1948.4 ms).
func TestWaitBehind(t *testing.T) {
	e := Engine{Model: timingmodel.Model{PrefillPerToken: 0.1, MaxBatchedTokens: 1 << 20}}
	l := Load{promptTok: 2000, cachedTk: 1000}
	sizes := func(far float64) []float64 {
		s := make([]float64, wire.ComputedPromptBuckets)
		s[7], s[13] = 1-far, far
		return s
	}
	for _, tc := range []struct {
		name              string
		rate, cached, obj float64
		sizes             []float64
		share, cluster    float64
	}{
		// Nothing cached binds no request to the engine: the router sends
		// them all where no long prompt is.
		{"nothing cached", 2, 0, 500, sizes(0.1), 0, 0},
		// rho = 0.1: bucket 7 holds the engine 243.5/0.9 = 270.6 ms, within
		// the slack.
		{"every prompt within the slack", 2, 1000, 500, sizes(0), 0, 0},
		// Bucket 13 holds it 1948.4/0.9 = 2164.9 ms: b = 2*0.5*(2164.9 -
		// 400)/1000 = 1.7649 late behind each; a tenth of the requests:
		// share 0.17649, excess variance 0.1*1.7649^2 = 0.31148.
		{"one in ten far past, 2 req/s", 2, 1000, 500, sizes(0.1), 0.17649, 0.31148},
		// rho = 0.05: 1948.4/0.95 = 2050.9 ms, b = 0.5*(2050.9 - 400)/1000
		// = 0.82547: share 0.082547, excess 0.1*0.82547^2 = 0.068140.
		{"one in ten far past, 1 req/s", 1, 1000, 500, sizes(0.1), 0.082547, 0.068140},
		// rho = 20*0.5*0.1 = 1: the bound arrivals alone keep it busy.
		{"bound arrivals fill the engine", 20, 1000, 500, sizes(0.1), 1, 0},
		// An 80 ms objective leaves no slack: every bucket's hold counts,
		// bucket 7's 2435.5*0.1/0.95 = 256.4 ms (b = 0.12816) and bucket
		// 13's 2050.9 ms (b = 1.02547): share 0.9*0.12816 + 0.1*1.02547 =
		// 0.21791, excess 0.9*0.12816^2 + 0.1*1.02547^2 = 0.11995.
		{"no slack", 1, 1000, 80, sizes(0.1), 0.21791, 0.11995},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := l
			l.cachedTk = tc.cached
			share, cluster := e.waitBehind(tc.rate, l, Objectives{TTFTMs: tc.obj, ITLMs: 50}, tc.sizes)
			if math.Abs(share-tc.share) > 1e-4 || math.Abs(cluster-tc.cluster) > 1e-4 {
				t.Errorf("share %.5f, cluster %.5f; want %.5f, %.5f", share, cluster, tc.share, tc.cluster)
			}
		})
	}
}
