package core

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
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
				a.add(ms(x), 0, nil)
			}
			if got := a.perMs(ms(tt.now)); got != tt.want {
				t.Fatalf("rate %v per ms, want %v", got, tt.want)
			}
		})
	}
	t.Run("only the last window counts", func(t *testing.T) {
		var a arrivals
		for i := range 10 * rateWindow {
			a.add(ms(i), 0, nil) // 1 per ms, then the last window at 1 per 10 ms
		}
		base := 10 * rateWindow
		for i := range rateWindow {
			a.add(ms(base+10*i), 0, nil)
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
				a.add(ms(x.at), x.work, nil)
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
			a.add(ms(i), 1000, nil) // a window of heavy work, then one of none
		}
		for i := range rateWindow {
			a.add(ms(rateWindow+i), 0, nil)
		}
		if got := a.busy(ms(2*rateWindow), 2); got != 0 {
			t.Fatalf("busy %v after a window of idle arrivals, want 0", got)
		}
	})
	t.Run("no workers", func(t *testing.T) {
		var a arrivals
		a.add(ms(0), 10, nil)
		a.add(ms(1), 10, nil)
		if got := a.waitRate(ms(2), 0); got != 0 {
			t.Fatalf("wait rate %v with no workers, want 0", got)
		}
	})
}

func TestPrefillMs(t *testing.T) {
	m := timingmodel.Default()
	// The per-step constant: the request's overhead is not the worker's
	// time.
	q, p, k := m.PrefillQuadratic, m.PrefillPerToken, m.StepConstant()
	tests := []struct {
		name                string
		blocks, prefill, bs int
		want                float64
	}{
		// A fully cached prompt of 10 blocks computes its last block
		// after the other 9 (144 tokens of context).
		{name: "a fully cached prompt computes one block", blocks: 10, prefill: 0, bs: 16, want: q*(160*160-144*144) + p*16 + k},
		{name: "blocks of tokens", blocks: 10, prefill: 10, bs: 16, want: q*160*160 + p*160 + k},
		// 100 blocks cached: the 10 uncached attend to all 110.
		{name: "after a cached prefix", blocks: 110, prefill: 10, bs: 16, want: q*(1760*1760-1600*1600) + p*160 + k},
		// Two steps (8192 + 7808): two per-step constants, the attention
		// of the whole prompt.
		{name: "more than a step's budget", blocks: 1000, prefill: 1000, bs: 16, want: q*16000*16000 + p*16000 + 2*k},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := prefillMs(&m, tt.blocks, tt.prefill, tt.bs); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("prefill %v ms, want %v", got, tt.want)
			}
		})
	}
}

// TestShared checks which recent arrivals share the prefix a request's
// best-cached workers hold, and what the scheduler is told of them.
func TestShared(t *testing.T) {
	t0 := time.Unix(100, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// Sequence hashes chain: a prompt is its prefix's hashes and more.
	group := []uint64{11, 12, 13}
	prompt := func(tail ...uint64) []uint64 { return append(slices.Clone(group), tail...) }
	other := []uint64{21, 22, 23, 24}
	// A full window of arrivals 10 ms apart on 4 workers, each 20 ms of
	// prefill: the last 10 are 5 of the group's prefix (one a shorter
	// prompt that still holds it) and 5 of another's.
	var a arrivals
	for i := range rateWindow - 10 {
		a.add(ms(10*i), 20, []uint64{uint64(1000 + i)})
	}
	for i := range 10 {
		h := other
		switch {
		case i%2 == 0 && i < 8:
			h = prompt(uint64(100 + i))
		case i == 9:
			h = group
		}
		a.add(ms(10*(rateWindow-10+i)), 20, h)
	}
	now := ms(10 * rateWindow)
	u := a.busy(now, 4) // 20 ms every 10 ms on 4 workers: 0.5
	tests := []struct {
		name   string
		hashes []uint64
		reach  []int
		want   scheduler.Shared
	}{
		{name: "no worker caches any of it", hashes: prompt(999), reach: []int{0, 0, 0, 0}},
		{name: "every worker caches it: no copy to make", hashes: prompt(999), reach: []int{3, 3, 3, 3}},
		// 5 sharers, the first of which may have brought the prefix: 4
		// over the window's 640 ms. Their 100 ms of work over 640 ms is
		// 0.156 on its one home, less on two: below the mean's 0.5.
		{name: "one home", hashes: prompt(999), reach: []int{3, 0, 1, 0},
			want: scheduler.Shared{Blocks: 3, Rate: 4.0 / 640, HomeBusy: u, SeedBusy: u}},
		{name: "two homes", hashes: prompt(999), reach: []int{3, 3, 0, 0},
			want: scheduler.Shared{Blocks: 3, Rate: 4.0 / 640, HomeBusy: u, SeedBusy: u}},
		// Only the 5 arrivals of the other prefix hold all 4 blocks.
		{name: "a deeper prefix has its own sharers", hashes: other, reach: []int{0, 4, 0, 0},
			want: scheduler.Shared{Blocks: 4, Rate: 4.0 / 640, HomeBusy: u, SeedBusy: u}},
		{name: "a prefix seen once is not shared", hashes: []uint64{11, 12, 13, 100, 7}, reach: []int{0, 4, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := a.shared(now, tt.hashes, tt.reach, len(tt.reach))
			checkShared(t, got, tt.want)
		})
	}
	t.Run("requests of one prefix take most of the work", func(t *testing.T) {
		// Every other arrival of a full window, 10 ms apart on 8
		// workers: 0.25 of their time, but the prefix's 32 x 20 ms
		// over 640 ms is 0.5 of each of its two homes' and 1/3 with
		// three.
		var b arrivals
		for i := range rateWindow {
			h := []uint64{uint64(5000 + i)}
			if i%2 == 0 {
				h = prompt(uint64(i))
			}
			b.add(ms(10*i), 20, h)
		}
		now := ms(10 * rateWindow)
		got := b.shared(now, prompt(999), []int{3, 3, 0, 0, 0, 0, 0, 0}, 8)
		checkShared(t, got, scheduler.Shared{Blocks: 3, Rate: 31.0 / 640, HomeBusy: 0.5, SeedBusy: 1.0 / 3})
	})
	t.Run("a window not yet full measures no rate", func(t *testing.T) {
		var b arrivals
		for i := range rateWindow - 1 {
			b.add(ms(i), 20, prompt(uint64(i)))
		}
		checkShared(t, b.shared(ms(rateWindow), prompt(999), []int{3, 0}, 2), scheduler.Shared{})
	})
}

func checkShared(t *testing.T, got, want scheduler.Shared) {
	t.Helper()
	if got.Blocks != want.Blocks || math.Abs(got.Rate-want.Rate) > 1e-12 ||
		math.Abs(got.HomeBusy-want.HomeBusy) > 1e-12 || math.Abs(got.SeedBusy-want.SeedBusy) > 1e-12 {
		t.Fatalf("shared %+v, want %+v", got, want)
	}
}

// sharersScan is sharers without fingerprints: every arrival's hash at the
// block compared (the definition).
func sharersScan(a *arrivals, hashes []uint64, shared int) (n int, workMs float64) {
	if shared < 1 || shared > len(hashes) {
		return 0, 0
	}
	key := hashes[shared-1]
	for i := range a.n {
		j := (a.next - 1 - i + rateWindow) % rateWindow
		if h := a.hashes[j]; len(h) >= shared && h[shared-1] == key {
			n++
			workMs += a.work[j]
		}
	}
	return n, workMs
}

// TestSharersMatchScan checks that the fingerprints never change which
// arrivals share a prefix, nor the order their work is summed in: random
// arrivals of hand-made hashes that do not chain (a few values, so that
// arrivals agree at one block and not at the one before), values whose
// fingerprints collide, lengths around fp's 8-block words and past
// fpMaxBlocks.
func TestSharersMatchScan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	// Pairs of different hashes with one fingerprint.
	var twins []uint64
	seen := map[byte]uint64{}
	for v := uint64(1); len(twins) < 16; v++ {
		if u, ok := seen[fingerprint(v)]; ok {
			twins = append(twins, u, v)
			delete(seen, fingerprint(v))
			continue
		}
		seen[fingerprint(v)] = v
	}
	value := func() uint64 {
		if r.IntN(2) == 0 {
			return twins[r.IntN(len(twins))]
		}
		return uint64(r.IntN(4))
	}
	length := func() int {
		switch r.IntN(20) {
		case 0:
			return fpMaxBlocks - 2 + r.IntN(5)
		case 1:
			return 0
		}
		return 1 + r.IntN(24)
	}
	long := make([]uint64, fpMaxBlocks+3)
	for i := range long {
		long[i] = value()
	}
	prompt := func(n int) []uint64 {
		h := slices.Clone(long[:n])
		for i := range min(n, 30) {
			h[i] = value()
		}
		for k := 0; k < 3 && n > 0; k++ {
			h[n-1-r.IntN(min(n, 40))] = value()
		}
		return h
	}
	var a arrivals
	for step := range 3000 {
		a.add(time.Unix(0, int64(step)), float64(r.IntN(1000))/7, prompt(length()))
		q := prompt(length())
		for range 4 {
			shared := r.IntN(len(q) + 2)
			gn, gw := a.sharers(q, shared)
			wn, ww := sharersScan(&a, q, shared)
			if gn != wn || math.Float64bits(gw) != math.Float64bits(ww) {
				t.Fatalf("step %d, %d blocks shared of %d: sharers %d, %v; the scan %d, %v", step, shared, len(q), gn, gw, wn, ww)
			}
		}
	}
}
