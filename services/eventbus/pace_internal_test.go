package eventbus

import (
	"math"
	"testing"
	"time"
)

// TestFairLevel checks the water-filling level on hand-worked rows: the
// streams under the level keep their rates, the others are cut to it, and
// together they send the target.
func TestFairLevel(t *testing.T) {
	free := func(rs ...float64) []paceRate {
		out := make([]paceRate, len(rs))
		for i, r := range rs {
			out[i] = paceRate{rate: r}
		}
		return out
	}
	held := func(rs []paceRate, n int) []paceRate {
		for range n {
			rs = append(rs, paceRate{rate: 1, held: true})
		}
		return rs
	}
	tests := []struct {
		name   string
		rates  []paceRate
		target float64
		want   float64
	}{
		{"no streams", nil, 100, 0},
		{"no target", free(500, 500), 0, 0},
		{"under the target", free(10, 20, 30), 100, 0},
		{"exactly the target", free(50, 50), 100, 0},
		// 10 keeps its rate; 90 left for two: 45 each, under 50 and 100.
		{"one quiet, two cut", free(100, 10, 50), 100, 45},
		{"all equal, over", free(50, 50, 50, 50), 100, 25},
		// 10 keeps its rate; the held ones want more: 90 / 2.
		{"held streams share what is left", held(free(10), 2), 100, 45},
		// 200 is over its share (50): both are cut to 50.
		{"a loud free stream and a held one", held(free(200), 1), 100, 50},
		// 90 quiet streams at 0.2 (18 together); 182 left for ten at 100.
		{"ten loud among ninety quiet", append(free(100, 100, 100, 100, 100, 100, 100, 100, 100, 100), free(manyOf(90, 0.2)...)...), 200, 18.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fairLevel(tc.rates, tc.target)
			if math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("fairLevel = %v; want %v", got, tc.want)
			}
			if got == 0 {
				return
			}
			sum := 0.0
			for _, r := range tc.rates {
				if r.held {
					sum += got
				} else {
					sum += min(r.rate, got)
				}
			}
			if math.Abs(sum-tc.target) > 1e-6 {
				t.Fatalf("the rates cut to %v sum to %v; want the target %v", got, sum, tc.target)
			}
		})
	}
}

func manyOf(n int, r float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// TestPacerFollowsDemand runs a pacer period by period over streams of a
// given demand (batches a second), each sending what it wants or, while
// asked for an interval, at most one batch per interval, and checks the
// interval it asks for after each period: set when the demand passes the
// target, steady while it stays, dropped when it falls.
func TestPacerFollowsDemand(t *testing.T) {
	const target = 100
	type phase struct {
		demand []float64 // per stream, batches a second
		want   time.Duration
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		{"a quiet fleet is never asked", []phase{
			{manyOf(100, 0.5), 0},
			{manyOf(100, 0.9), 0},
		}},
		{"a fleet over the target, steady, then quiet", []phase{
			// 500 a second wanted: one each (100 / 100 streams).
			{manyOf(100, 5), time.Second},
			{manyOf(100, 5), time.Second},
			{manyOf(100, 5), time.Second},
			// Between half the level and the level: still held (the
			// interval kept rather than let go and set again).
			{manyOf(100, 0.7), time.Second},
			// Under half the level: not held any more; 40 in all.
			{manyOf(100, 0.4), 0},
		}},
		{"ten loud streams among ninety quiet", []phase{
			// 18 a second from the quiet ones; 82 / 10 for the loud.
			{append(manyOf(10, 100), manyOf(90, 0.2)...), perSecond(8.2)},
			{append(manyOf(10, 100), manyOf(90, 0.2)...), perSecond(8.2)},
			// Down to 3, under half what they were held to: 48 in all.
			{append(manyOf(10, 3), manyOf(90, 0.2)...), 0},
			// Up to 9: 108 in all, over the target again.
			{append(manyOf(10, 9), manyOf(90, 0.2)...), perSecond(8.2)},
		}},
		{"the level is capped at one batch a second", []phase{
			{manyOf(1000, 5), maxPublishInterval},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			p := newPacer(target, now)
			var streams []*paceStream
			for i, ph := range tc.phases {
				for len(streams) < len(ph.demand) {
					streams = append(streams, p.open())
				}
				iv := time.Duration(p.interval.Load())
				for j, d := range ph.demand {
					if iv > 0 {
						d = min(d, float64(time.Second)/float64(iv))
					}
					streams[j].batches.Add(uint64(math.Round(d * 10))) // a period of 10 s
				}
				now = now.Add(10 * time.Second)
				p.mu.Lock()
				p.measure(now)
				p.mu.Unlock()
				if got := time.Duration(p.interval.Load()); absDuration(got-ph.want) > time.Millisecond {
					t.Fatalf("phase %d: interval %s; want %s", i, got, ph.want)
				}
			}
			for _, s := range streams {
				p.done(s)
			}
			if len(p.streams) != 0 {
				t.Fatalf("%d streams left after done", len(p.streams))
			}
		})
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// perSecond is the interval of a rate of r batches a second.
func perSecond(r float64) time.Duration { return time.Duration(float64(time.Second) / r) }
