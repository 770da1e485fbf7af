package core

import (
	"testing"
	"time"
)

func TestArrivalRate(t *testing.T) {
	t0 := time.Unix(100, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name     string
		arrivals []int // ms after t0
		now      int
		want     float64 // per ms
	}{
		{name: "nothing yet", now: 10, want: 0},
		{name: "one arrival measures nothing", arrivals: []int{0}, now: 10, want: 0},
		{name: "ten over 100 ms", arrivals: []int{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, now: 100, want: 0.1},
		{name: "it falls when requests stop", arrivals: []int{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, now: 1000, want: 0.01},
		{name: "a burst in one instant counts over a millisecond", arrivals: []int{5, 5, 5, 5}, now: 5, want: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a arrivals
			for _, x := range tt.arrivals {
				a.add(ms(x))
			}
			if got := a.perMs(ms(tt.now)); got != tt.want {
				t.Fatalf("rate %v per ms, want %v", got, tt.want)
			}
		})
	}
	t.Run("only the last window counts", func(t *testing.T) {
		var a arrivals
		for i := range 10 * rateWindow {
			a.add(ms(i)) // 1 per ms, then the last window at 1 per 10 ms
		}
		base := 10 * rateWindow
		for i := range rateWindow {
			a.add(ms(base + 10*i))
		}
		oldest := base
		now := base + 10*rateWindow
		if got, want := a.perMs(ms(now)), float64(rateWindow)/float64(now-oldest); got != want {
			t.Fatalf("rate %v per ms, want %v", got, want)
		}
	})
}
