package core

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/wire"
)

func TestPredictors(t *testing.T) {
	s := func(sec int, rps float64) Sample {
		return Sample{At: t0.Add(time.Duration(sec) * time.Second), Demand: Demand{RequestsPerSec: rps, PromptTokensPerSec: 10 * rps, OutputTokensPerSec: rps}}
	}
	for _, tc := range []struct {
		name, pred string
		window     int
		samples    []Sample
		want       float64 // requests per second forecast 5 s ahead
	}{
		{"window empty", "window", 3, nil, 0},
		{"window mean of the last 3", "window", 3, []Sample{s(0, 100), s(10, 10), s(20, 20), s(30, 30)}, 20},
		{"window ignores an old sample", "window", 3, []Sample{s(10, 10), s(20, 20), s(20, 99), s(15, 99)}, 15},
		{"window ignores a negative rate", "window", 3, []Sample{s(10, 10), s(20, -5)}, 10},
		{"trend one sample", "trend", 3, []Sample{s(0, 7)}, 7},
		// 10, 20, 30 at 0, 10, 20 s: the line 10 + t, read at 25 s.
		{"trend follows a ramp", "trend", 3, []Sample{s(0, 10), s(10, 20), s(20, 30)}, 35},
		// 30, 20, 10: read at 25 s, 5; one more step down, at 35 s: 0.
		{"trend falls", "trend", 3, []Sample{s(0, 30), s(10, 20), s(20, 10)}, 5},
		{"trend never below 0", "trend", 3, []Sample{s(0, 40), s(10, 20), s(20, 0)}, 0},
		// The window's last 2 of 10, 50, 50: flat at 50.
		{"trend over its window", "trend", 2, []Sample{s(0, 10), s(10, 50), s(20, 50)}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPredictor(tc.pred, tc.window, 0.95)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tc.samples {
				p.Observe(x)
			}
			f := p.Forecast(5 * time.Second)
			if !near(f.RequestsPerSec, tc.want) || !near(f.PromptTokensPerSec, 10*tc.want) || !near(f.OutputTokensPerSec, tc.want) {
				t.Fatalf("forecast %+v, want %v req/s (x10 prompt, x1 output)", f, tc.want)
			}
		})
	}
	// Read far ahead, a line is read no further than its samples span;
	// its token rates are its requests at the samples' mean sizes.
	for _, tc := range []struct {
		name    string
		samples []Sample
		ahead   time.Duration
		want    Demand
	}{
		// 10 then 20 req/s 10 s apart, 60 s ahead: read at +10 s, 30.
		{"two samples", []Sample{s(0, 10), s(10, 20)}, time.Minute, Demand{RequestsPerSec: 30, PromptTokensPerSec: 300, OutputTokensPerSec: 30, CachedPromptTokensPerSec: 0}},
		// 10, 20, 30 over 20 s, 15 s ahead: within the span, 45.
		{"within the span", []Sample{s(0, 10), s(10, 20), s(20, 30)}, 15 * time.Second, Demand{RequestsPerSec: 45, PromptTokensPerSec: 450, OutputTokensPerSec: 45, CachedPromptTokensPerSec: 0}},
		// Requests of 100 then 10 prompt tokens: the lines of tokens and
		// requests read ahead would give 200 req/s of -50 tokens; the
		// mean size is 1100/20 = 55 tokens.
		{"mean sizes", []Sample{
			{At: t0, Demand: Demand{RequestsPerSec: 10, PromptTokensPerSec: 1000, OutputTokensPerSec: 100}},
			{At: t0.Add(10 * time.Second), Demand: Demand{RequestsPerSec: 10, PromptTokensPerSec: 100, OutputTokensPerSec: 100}},
		}, 10 * time.Second, Demand{RequestsPerSec: 10, PromptTokensPerSec: 550, OutputTokensPerSec: 100, CachedPromptTokensPerSec: 0}},
		// Of those, 50 then 5 tokens cached: the mean cached part is
		// 550/20 = 27.5 tokens, carried the same way.
		{"mean cached part", []Sample{
			{At: t0, Demand: Demand{RequestsPerSec: 10, PromptTokensPerSec: 1000, OutputTokensPerSec: 100, CachedPromptTokensPerSec: 500}},
			{At: t0.Add(10 * time.Second), Demand: Demand{RequestsPerSec: 10, PromptTokensPerSec: 100, OutputTokensPerSec: 100, CachedPromptTokensPerSec: 50}},
		}, 10 * time.Second, Demand{RequestsPerSec: 10, PromptTokensPerSec: 550, OutputTokensPerSec: 100, CachedPromptTokensPerSec: 275}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := NewPredictor("trend", 10, 0.95)
			for _, x := range tc.samples {
				p.Observe(x)
			}
			f := p.Forecast(tc.ahead)
			if !near(f.RequestsPerSec, tc.want.RequestsPerSec) || !near(f.PromptTokensPerSec, tc.want.PromptTokensPerSec) || !near(f.OutputTokensPerSec, tc.want.OutputTokensPerSec) ||
				!near(f.CachedPromptTokensPerSec, tc.want.CachedPromptTokensPerSec) {
				t.Fatalf("forecast %+v, want %+v", f, tc.want)
			}
		})
	}
	// The spread: the noise from the median successive difference (a
	// step of the level is one difference, not noise), the error of the
	// window's mean over sqrt(n), of the line by its leverage (the drift
	// by the slope's part of it, none for a window).
	for _, tc := range []struct {
		name, pred string
		rates      []float64
		ahead      time.Duration
		want       Spread
	}{
		{"no samples", "window", nil, 0, Spread{}},
		{"two samples", "window", []float64{10, 20}, 0, Spread{}},
		// |d| 20, 20: 20/(0.67449*sqrt(2)) = 20.967; the mean of 3.
		{"window", "window", []float64{100, 120, 100}, 0, Spread{Noise: 20.9672, Error: 20.9672 / math.Sqrt(3)}},
		// |d| 0, 0, 90, 0, 0: the median is 0.
		{"a step is no noise", "window", []float64{10, 10, 10, 100, 100, 100}, 0, Spread{}},
		// x = 0, 10, 20: mean 10, Sxx 200; read 10 s past the last, at
		// 30: leverage 1/3 + 400/200, of which the slope carries 400/200.
		{"trend", "trend", []float64{100, 120, 100}, 10 * time.Second, Spread{Noise: 20.9672, Error: 20.9672 * math.Sqrt(1.0/3+2), Drift: 20.9672 * math.Sqrt(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := NewPredictor(tc.pred, 3, 0.95)
			for i, r := range tc.rates {
				p.Observe(s(10*i, r))
			}
			got := p.Spread(tc.ahead)
			if math.Abs(got.Noise-tc.want.Noise) > 1e-3 || math.Abs(got.Error-tc.want.Error) > 1e-3 || math.Abs(got.Drift-tc.want.Drift) > 1e-3 {
				t.Fatalf("spread %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := NewPredictor("arima", 3, 0.95); err == nil || !strings.Contains(err.Error(), "trend, window") {
		t.Fatalf("unknown predictor: %v", err)
	}
}

func TestRates(t *testing.T) {
	a := Counters{At: t0, Requests: 10, PromptTokens: 1000, OutputTokens: 100, CachedPromptTokens: 400}
	for _, tc := range []struct {
		name string
		cur  Counters
		want Demand
		ok   bool
	}{
		{"two seconds", Counters{At: t0.Add(2 * time.Second), Requests: 20, PromptTokens: 3000, OutputTokens: 300, CachedPromptTokens: 1400}, Demand{RequestsPerSec: 5, PromptTokensPerSec: 1000, OutputTokensPerSec: 100, CachedPromptTokensPerSec: 500}, true},
		{"idle", Counters{At: t0.Add(time.Second), Requests: 10, PromptTokens: 1000, OutputTokens: 100, CachedPromptTokens: 400}, Demand{}, true},
		{"same time", Counters{At: t0, Requests: 20}, Demand{}, false},
		{"earlier", Counters{At: t0.Add(-time.Second), Requests: 20, PromptTokens: 3000, OutputTokens: 300}, Demand{}, false},
		{"a count went down", Counters{At: t0.Add(time.Second), Requests: 9, PromptTokens: 3000, OutputTokens: 300, CachedPromptTokens: 400}, Demand{}, false},
		{"the cached count went down", Counters{At: t0.Add(time.Second), Requests: 20, PromptTokens: 3000, OutputTokens: 300, CachedPromptTokens: 100}, Demand{}, false},
		// Requests by their computed prompt: each bucket's difference; a
		// worker that starts counting them (from none) counts from 0.
		{"computed prompts", Counters{At: t0.Add(2 * time.Second), Requests: 20, PromptTokens: 3000, OutputTokens: 300, CachedPromptTokens: 1400,
			ComputedPromptRequests: [wire.ComputedPromptBuckets]uint64{3: 6, 19: 2}},
			Demand{RequestsPerSec: 5, PromptTokensPerSec: 1000, OutputTokensPerSec: 100, CachedPromptTokensPerSec: 500,
				ComputedPromptRequestsPerSec: [wire.ComputedPromptBuckets]float64{3: 3, 19: 1}}, true},
	} {
		got, ok := Rates(a, tc.cur)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: Rates = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDemandPerRequest(t *testing.T) {
	d := Demand{RequestsPerSec: 4, PromptTokensPerSec: 400, OutputTokensPerSec: 40, CachedPromptTokensPerSec: 100}
	if d.PromptTokens() != 100 || d.OutputTokens() != 10 || d.CachedPromptTokens() != 25 || (Demand{PromptTokensPerSec: 5}).PromptTokens() != 0 {
		t.Fatalf("per request: %v %v %v", d.PromptTokens(), d.OutputTokens(), d.CachedPromptTokens())
	}
	// More cached than prompt tokens (counts read at different moments)
	// is the whole prompt cached.
	if c := (Demand{RequestsPerSec: 2, PromptTokensPerSec: 100, CachedPromptTokensPerSec: 300}).CachedPromptTokens(); c != 50 {
		t.Fatalf("cached part past the prompt: %v, want 50", c)
	}
}

func TestTrendSteps(t *testing.T) {
	// 14 samples 10 s apart, ±1 req/s of noise (alternating: the
	// successive differences' median is 2, s = 2.097). A ramp with that
	// noise lies on a line: read ahead. A step does not: the forecast is
	// the level since it, flat, whichever way it went, however far ahead.
	noisy := func(level func(i int) float64) []float64 {
		var r []float64
		for i := range 14 {
			r = append(r, level(i)+float64(1-2*(i%2)))
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		rates []float64
		ahead time.Duration
		want  float64 // req/s
		drift bool    // a line's slope carried ahead
	}{
		// 10 + i at i = 0..13, noise ±1: the line ~ 10 + i (slope fitted
		// from the noisy samples), read at i = 13 + 7.
		{"a ramp is a line", noisy(func(i int) float64 { return 10 + float64(i) }), 70 * time.Second, 29.9, true},
		// 10 for 10 samples, 25 for the last 4: the line through them
		// would read 40 req/s 70 s ahead; the level since the step is 25.
		{"a burst's start", noisy(func(i int) float64 {
			if i >= 10 {
				return 25
			}
			return 10
		}), 70 * time.Second, 25, false},
		// 25 for 8 samples after 10 at the first, then 10 for the last 5:
		// the burst's end.
		{"a burst's end", noisy(func(i int) float64 {
			if i >= 1 && i < 9 {
				return 25
			}
			return 10
		}), 70 * time.Second, 9.8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := NewPredictor("trend", 14, 0.95)
			for i, r := range tc.rates {
				p.Observe(Sample{At: t0.Add(time.Duration(10*i) * time.Second), Demand: Demand{RequestsPerSec: r}})
			}
			if f := p.Forecast(tc.ahead).RequestsPerSec; math.Abs(f-tc.want) > 0.5 {
				t.Fatalf("forecast %.2f req/s, want about %.2f", f, tc.want)
			}
			if sp := p.Spread(tc.ahead); (sp.Drift > 0) != tc.drift {
				t.Fatalf("spread %+v: drift %v, want %v", sp, sp.Drift > 0, tc.drift)
			}
		})
	}
}
