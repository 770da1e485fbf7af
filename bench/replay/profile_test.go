package replay

import (
	"math"
	"testing"
	"time"
)

// constant is n requests at rate per second, evenly spaced.
func constant(n int, rate float64) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i].Arrival = time.Duration(float64(i) / rate * float64(time.Second))
	}
	return reqs
}

// counts is the arrivals per window of width w.
func counts(reqs []Request, w time.Duration) []int {
	var c []int
	for _, r := range reqs {
		i := int(r.Arrival / w)
		for len(c) <= i {
			c = append(c, 0)
		}
		c[i]++
	}
	return c
}

func TestRateProfileWarp(t *testing.T) {
	// 10 req/s for 2,000 s of constant-rate time under a diurnal profile
	// of period 1,000 s and amplitude 0.8: the rate runs from 2 req/s at
	// the trough (t = 0) to 18 at the peak (t = 500 s), and the trace
	// still spans two periods (the mean factor over a period is 1).
	reqs := constant(20000, 10)
	RateProfile{Kind: "diurnal", Period: 1000 * time.Second, Amplitude: 0.8}.Warp(reqs, 1)
	c := counts(reqs, 50*time.Second)
	if last := reqs[len(reqs)-1].Arrival; math.Abs(last.Seconds()-2000) > 5 {
		t.Fatalf("last arrival at %v, want about 2,000 s", last)
	}
	// The 50 s windows around the trough and the peak: 50 s times the
	// mean factor over the window.
	trough := 50 * 10 * (1 - 0.8*math.Sin(math.Pi/10)/(math.Pi/10))
	peak := 50 * 10 * (1 + 0.8*math.Sin(math.Pi/10)/(math.Pi/10))
	if math.Abs(float64(c[0]+c[19])/2-trough) > 3 || math.Abs(float64(c[9]+c[10])/2-peak) > 3 {
		t.Fatalf("windows at the trough %d/%d (want %.0f), at the peak %d/%d (want %.0f)", c[0], c[19], trough, c[9], c[10], peak)
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Arrival < reqs[i-1].Arrival {
			t.Fatalf("arrival %d before %d", i, i-1)
		}
	}

	// Bursts of 10 s at 5 times the rate, one a minute on average: the
	// busiest 10 s window has about 5 times the quiet ones' arrivals.
	reqs = constant(20000, 10)
	RateProfile{Kind: "bursts", BurstEvery: time.Minute, BurstLength: 10 * time.Second, BurstFactor: 5}.Warp(reqs, 3)
	c = counts(reqs, 10*time.Second)
	most, least := 0, math.MaxInt
	for _, n := range c[:len(c)-1] {
		most, least = max(most, n), min(least, n)
	}
	if most < 300 || least > 110 || least < 90 {
		t.Fatalf("10 s windows: busiest %d, quietest %d; want about 500 in a whole burst and 100 outside", most, least)
	}
	// flat changes nothing.
	reqs = constant(10, 1)
	RateProfile{Kind: "flat"}.Warp(reqs, 1)
	if reqs[9].Arrival != 9*time.Second {
		t.Fatalf("flat moved an arrival to %v", reqs[9].Arrival)
	}
}

func TestRateProfileValidate(t *testing.T) {
	for _, tc := range []struct {
		p  RateProfile
		ok bool
	}{
		{RateProfile{}, true},
		{RateProfile{Kind: "flat"}, true},
		{RateProfile{Kind: "weekly"}, false},
		{RateProfile{Kind: "diurnal", Period: time.Hour, Amplitude: 0.99}, true},
		{RateProfile{Kind: "diurnal", Period: time.Hour, Amplitude: 1}, false},
		{RateProfile{Kind: "diurnal", Amplitude: 0.5}, false},
		{RateProfile{Kind: "bursts", BurstEvery: time.Minute, BurstLength: time.Second, BurstFactor: 1}, true},
		{RateProfile{Kind: "bursts", BurstEvery: time.Minute, BurstLength: time.Second, BurstFactor: 0.5}, false},
		{RateProfile{Kind: "diurnal+bursts", Period: time.Hour, Amplitude: 0.5, BurstEvery: time.Minute, BurstLength: time.Second, BurstFactor: 3}, true},
		{RateProfile{Kind: "diurnal+bursts", Period: time.Hour, Amplitude: 0.5}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}
