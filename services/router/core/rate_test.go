package core

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
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
				a.add(ms(x), 0)
			}
			if got := a.perMs(ms(tt.now)); got != tt.want {
				t.Fatalf("rate %v per ms, want %v", got, tt.want)
			}
		})
	}
	t.Run("only the last window counts", func(t *testing.T) {
		var a arrivals
		for i := range 10 * rateWindow {
			a.add(ms(i), 0) // 1 per ms, then the last window at 1 per 10 ms
		}
		base := 10 * rateWindow
		for i := range rateWindow {
			a.add(ms(base+10*i), 0)
		}
		oldest := base
		now := base + 10*rateWindow
		if got, want := a.perMs(ms(now)), float64(rateWindow)/float64(now-oldest); got != want {
			t.Fatalf("rate %v per ms, want %v", got, want)
		}
	})
}

// TestWaitRate checks the prefill share of the workers' time the window's
// arrivals take, and the rate of later requests a decision's work delays:
// each worker's share of the arrival rate over 1 - that share.
func TestWaitRate(t *testing.T) {
	t0 := time.Unix(100, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type arrival struct {
		at   int // ms after t0
		work float64
	}
	ten := func(work float64) []arrival { // ten arrivals 10 ms apart
		var out []arrival
		for i := range 10 {
			out = append(out, arrival{10 * i, work})
		}
		return out
	}
	tests := []struct {
		name     string
		arrivals []arrival
		now      int
		workers  int
		busy     float64
	}{
		{name: "nothing yet", now: 10, workers: 4, busy: 0},
		{name: "one arrival measures nothing", arrivals: []arrival{{0, 500}}, now: 10, workers: 4, busy: 0},
		{name: "idle prefill", arrivals: ten(0), now: 100, workers: 4, busy: 0},
		// 10 x 20 ms of prefill over 100 ms on 4 workers: half their time.
		{name: "half busy", arrivals: ten(20), now: 100, workers: 4, busy: 0.5},
		{name: "the same work on twice the workers", arrivals: ten(20), now: 100, workers: 8, busy: 0.25},
		{name: "it falls when requests stop", arrivals: ten(20), now: 1000, workers: 4, busy: 0.05},
		{name: "more work than the workers can do is capped", arrivals: ten(200), now: 100, workers: 4, busy: maxBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a arrivals
			for _, x := range tt.arrivals {
				a.add(ms(x.at), x.work)
			}
			now := ms(tt.now)
			if got := a.busy(now, tt.workers); math.Abs(got-tt.busy) > 1e-12 {
				t.Fatalf("busy %v, want %v", got, tt.busy)
			}
			want := a.perMs(now) / float64(tt.workers) / (1 - tt.busy)
			if got := a.waitRate(now, tt.workers); math.Abs(got-want) > 1e-12 {
				t.Fatalf("wait rate %v per ms, want %v", got, want)
			}
		})
	}
	t.Run("only the last window's work counts", func(t *testing.T) {
		var a arrivals
		for i := range rateWindow {
			a.add(ms(i), 1000) // a window of heavy work, then one of none
		}
		for i := range rateWindow {
			a.add(ms(rateWindow+i), 0)
		}
		if got := a.busy(ms(2*rateWindow), 2); got != 0 {
			t.Fatalf("busy %v after a window of idle arrivals, want 0", got)
		}
	})
	t.Run("no workers", func(t *testing.T) {
		var a arrivals
		a.add(ms(0), 10)
		a.add(ms(1), 10)
		if got := a.waitRate(ms(2), 0); got != 0 {
			t.Fatalf("wait rate %v with no workers, want 0", got)
		}
	})
}

func TestPrefillMs(t *testing.T) {
	m := timingmodel.Default()
	tests := []struct {
		name          string
		blocks, bs    int
		wantTokens    int
		wantMoreSteps bool
	}{
		{name: "a fully cached prompt computes one block", blocks: 0, bs: 16, wantTokens: 16},
		{name: "blocks of tokens", blocks: 10, bs: 16, wantTokens: 160},
		{name: "more than a step's budget", blocks: 1000, bs: 16, wantTokens: 16000, wantMoreSteps: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := prefillMs(&m, tt.blocks, tt.bs)
			want := m.TTFTMs(0, tt.wantTokens, 0, 0, 1)
			if got != want {
				t.Fatalf("prefill %v ms, want %v", got, want)
			}
			if one := m.PrefillMs(float64(tt.wantTokens)); tt.wantMoreSteps == (got == one) {
				t.Fatalf("prefill %v ms, one step of %d tokens %v ms: steps of the budget expected %v", got, tt.wantTokens, one, tt.wantMoreSteps)
			}
		})
	}
}
