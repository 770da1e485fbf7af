package core

import (
	"strings"
	"testing"
	"time"
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
			p, err := NewPredictor(tc.pred, tc.window)
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
	if _, err := NewPredictor("arima", 3); err == nil || !strings.Contains(err.Error(), "trend, window") {
		t.Fatalf("unknown predictor: %v", err)
	}
}

func TestRates(t *testing.T) {
	a := Counters{At: t0, Requests: 10, PromptTokens: 1000, OutputTokens: 100}
	for _, tc := range []struct {
		name string
		cur  Counters
		want Demand
		ok   bool
	}{
		{"two seconds", Counters{At: t0.Add(2 * time.Second), Requests: 20, PromptTokens: 3000, OutputTokens: 300}, Demand{5, 1000, 100}, true},
		{"idle", Counters{At: t0.Add(time.Second), Requests: 10, PromptTokens: 1000, OutputTokens: 100}, Demand{}, true},
		{"same time", Counters{At: t0, Requests: 20}, Demand{}, false},
		{"earlier", Counters{At: t0.Add(-time.Second), Requests: 20, PromptTokens: 3000, OutputTokens: 300}, Demand{}, false},
		{"a count went down", Counters{At: t0.Add(time.Second), Requests: 9, PromptTokens: 3000, OutputTokens: 300}, Demand{}, false},
	} {
		got, ok := Rates(a, tc.cur)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: Rates = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDemandPerRequest(t *testing.T) {
	d := Demand{RequestsPerSec: 4, PromptTokensPerSec: 400, OutputTokensPerSec: 40}
	if d.PromptTokens() != 100 || d.OutputTokens() != 10 || (Demand{PromptTokensPerSec: 5}).PromptTokens() != 0 {
		t.Fatalf("per request: %v %v", d.PromptTokens(), d.OutputTokens())
	}
}
