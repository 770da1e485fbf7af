package scheduler

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestClockSubMatchesSub compares clock.sub with time.Time.Sub over pairs
// of times with and without monotonic readings, in other locations, near
// clockSpan's bounds, far outside them (where Sub saturates) and the zero
// time.
func TestClockSubMatchesSub(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	wall := time.Now()
	base := []time.Time{
		{}, wall, wall.Round(0), time.Unix(1_700_000_000, 0), time.Unix(0, 0),
		time.Unix(clockSpan-1, 999_999_999), time.Unix(clockSpan, 0), time.Unix(-clockSpan, 0), time.Unix(-clockSpan+1, 1),
		time.Unix(1<<62, 5), time.Unix(-1<<62, 7), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		wall.In(time.FixedZone("x", 3600)),
	}
	var times []time.Time
	for _, b := range base {
		times = append(times, b)
		for range 6 {
			d := time.Duration(r.Int64N(int64(10*time.Second))) - 5*time.Second
			if r.IntN(3) == 0 {
				d = time.Duration(r.Int64())
			}
			times = append(times, b.Add(d), b.Add(d).Round(0))
		}
	}
	for _, a := range times {
		c := clockAt(a)
		for _, b := range times {
			if got, want := c.sub(b), a.Sub(b); got != want {
				t.Fatalf("clockAt(%v).sub(%v) = %v, want %v", a, b, got, want)
			}
		}
	}
}
