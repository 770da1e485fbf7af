package replay

import (
	"testing"
	"time"
)

func TestNextRate(t *testing.T) {
	const slo = 2 * time.Second
	res := func(mode string, rate float64, p90 time.Duration) Result {
		return Result{Mode: mode, RateScale: rate, TTFT: [3]time.Duration{0, p90, 0}}
	}
	sweep := func(p90s ...time.Duration) []Result {
		var out []Result
		for i, r := range []float64{2, 4, 6, 9, 12} {
			out = append(out, res("kv", r, p90s[i]))
		}
		return append(out, res("other", 100, time.Hour))
	}
	ok, bad := time.Second, 3*time.Second
	tests := []struct {
		name             string
		results          []Result
		extended, bisect int
		want             float64
		up               bool
	}{
		{name: "the top meets the SLO: go above it", results: sweep(ok, ok, ok, ok, ok), bisect: 1, want: 18, up: true},
		{name: "but not for ever", results: sweep(ok, ok, ok, ok, ok), extended: maxExtend, bisect: 1},
		{name: "bracketed: halfway", results: sweep(ok, ok, ok, bad, bad), bisect: 1, want: 7.5},
		{name: "no bisection left", results: sweep(ok, ok, ok, bad, bad), bisect: 0},
		{name: "a pass above a miss counts: the goodput rule takes the highest", results: sweep(ok, bad, ok, bad, bad), bisect: 1, want: 7.5},
		{name: "nothing meets the SLO: nothing to bisect", results: sweep(bad, bad, bad, bad, bad), bisect: 1},
		{name: "close enough", results: append(sweep(ok, ok, ok, bad, bad), res("kv", 8.8, ok)), bisect: 1},
		{name: "rejections miss the SLO", results: append(sweep(ok, ok, ok, ok, ok)[:4], Result{Mode: "kv", RateScale: 12, Rejected: 1}), bisect: 1, want: 10.5},
		{name: "a mode with no results", results: sweep(ok, ok, ok, ok, ok)[5:], bisect: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, up := nextRate(tt.results, "kv", slo, tt.extended, tt.bisect)
			if got != tt.want || up != tt.up {
				t.Fatalf("nextRate = %v, %v; want %v, %v", got, up, tt.want, tt.up)
			}
		})
	}
}

func TestRound3(t *testing.T) {
	for in, want := range map[float64]float64{18: 18, 27: 27, 40.5: 40.5, 13.499999: 13.5, 7.5: 7.5, 0.1234: 0.123, 121.5: 122, 16.875: 16.9, 1234: 1230} {
		if got := round3(in); got != want {
			t.Errorf("round3(%v) = %v, want %v", in, got, want)
		}
	}
}
