package replay

import (
	"math"
	"testing"
	"time"
)

func TestNextRate(t *testing.T) {
	slo := Objectives{TTFT: 2 * time.Second}
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

// TestSettleGoodputRatio starts from brackets that do not decide kv >= 2x
// round-robin (rr in [2, 4), kv in [4, 8); the misses at 4 and 8 are
// made up, the rest are real runs of 60 requests) and checks that it runs
// both modes at their brackets' middles first, at most two runs a round,
// and stops only once the brackets decide it or the rounds are spent.
func TestSettleGoodputRatio(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:60]
	slo := Objectives{TTFT: 300 * time.Millisecond}
	res := func(mode string, rate float64, p90 time.Duration) Result {
		return Result{Mode: mode, RateScale: rate, TTFT: [3]time.Duration{0, p90, 0}}
	}
	start := []Result{res("round-robin", 2, time.Millisecond), res("round-robin", 4, time.Hour),
		res("kv", 4, time.Millisecond), res("kv", 8, time.Hour)}
	for _, rounds := range []int{0, 1, 3} {
		got, err := SettleGoodputRatio(trace, smallConfig(), start, slo, 2, rounds, 1)
		if err != nil {
			t.Fatal(err)
		}
		more := got[len(start):]
		if len(more) > 2*rounds || (rounds > 0 && len(more) < 2) {
			t.Fatalf("%d rounds ran %d", rounds, len(more))
		}
		if rounds > 0 && (more[0].Mode != "round-robin" || more[0].RateScale != 3 || more[1].Mode != "kv" || more[1].RateScale != 6) {
			t.Fatalf("first round ran %s x%g and %s x%g, want round-robin x3 and kv x6", more[0].Mode, more[0].RateScale, more[1].Mode, more[1].RateScale)
		}
		rr, rrFail := bracket(got, "round-robin", slo)
		kv, kvFail := bracket(got, "kv", slo)
		if len(more) < 2*rounds && !ratioSettled(rr, rrFail, kv, kvFail, 2) {
			t.Fatalf("stopped after %d runs unsettled: rr [%g, %g), kv [%g, %g)", len(more), rr, rrFail, kv, kvFail)
		}
		t.Logf("%d rounds: %d runs, rr [%g, %g), kv [%g, %g)", rounds, len(more), rr, rrFail, kv, kvFail)
	}
}

// TestRefineGoodput refines real runs of 60 requests from one or two
// swept rates: it extends above a top that meets the SLO, bisects a
// bracket at most bisect times per mode, and stops with nothing left to
// run; the results come back by mode, then rate.
func TestRefineGoodput(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:60]
	slo := Objectives{TTFT: 300 * time.Millisecond}
	cfg := smallConfig()
	tests := []struct {
		name   string
		rates  []float64
		bisect int
	}{
		{name: "one low rate, no bisection", rates: []float64{1}, bisect: 0},
		{name: "two rates, two bisections", rates: []float64{1, 64}, bisect: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, err := RunAll(trace, cfg, []string{"kv", "round-robin"}, tt.rates, 2)
			if err != nil {
				t.Fatal(err)
			}
			got, err := RefineGoodput(trace, cfg, []string{"round-robin", "kv"}, start, slo, tt.bisect, 2)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(got); i++ {
				a, b := got[i-1], got[i]
				if a.Mode == "kv" && b.Mode == "round-robin" || a.Mode == b.Mode && a.RateScale > b.RateScale {
					t.Fatalf("results out of order at %d: %s x%g before %s x%g", i, a.Mode, a.RateScale, b.Mode, b.RateScale)
				}
			}
			for _, m := range []string{"round-robin", "kv"} {
				var rates []float64
				for _, x := range got {
					if x.Mode == m {
						rates = append(rates, x.RateScale)
					}
				}
				pass, fail := bracket(got, m, slo)
				extra := len(rates) - len(tt.rates)
				if tt.bisect == 0 {
					// Extensions only: x1.5 at a time from the top, until a
					// miss or maxExtend of them.
					for k := len(tt.rates); k < len(rates); k++ {
						if want := round3(rates[k-1] * extendFactor); rates[k] != want {
							t.Fatalf("%s ran %v: x%g after x%g, want x%g", m, rates, rates[k], rates[k-1], want)
						}
					}
					if math.IsInf(fail, 1) && extra != maxExtend {
						t.Fatalf("%s stopped after %d extensions with no miss", m, extra)
					}
				} else if extra > tt.bisect || (extra < tt.bisect && (fail-pass)/pass > bracketTolerance) {
					t.Fatalf("%s: %d bisections of %d, bracket [%g, %g)", m, extra, tt.bisect, pass, fail)
				}
				if r, _ := nextRate(got, m, slo, maxExtend, 0); r != 0 {
					t.Fatalf("%s: still something to run at x%g", m, r)
				}
				t.Logf("%s: ran %v, goodput [%g, %g)", m, rates, pass, fail)
			}
		})
	}
}
