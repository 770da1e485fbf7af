package scheduler

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestLateness: the quantile is the nearest-rank order statistic of the
// last LateWindow residuals, whatever came before them.
func TestLateness(t *testing.T) {
	ramp := func(n int) []float64 { // 1, 2, ..., n ms
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(i + 1)
		}
		return out
	}
	tests := []struct {
		name string
		adds []float64
		q    float64
		want float64
	}{
		{"empty: no correction", nil, LateQuantile, 0},
		{"one: itself", []float64{37}, LateQuantile, 37},
		{"ten: the 9th smallest", ramp(10), 0.9, 9},
		{"eleven: rank ceil(9.9) = 10", ramp(11), 0.9, 10},
		{"the smallest at q 0", ramp(10), 0, 1},
		{"the largest at q 1", ramp(10), 1, 10},
		{"a full window", ramp(LateWindow), 0.9, 58},
		// 1..100: the window holds 37..100; rank ceil(57.6) = 58 of
		// them is 94.
		{"only the last window counts", ramp(100), 0.9, 94},
		{"negative: early first tokens", []float64{-30, -10, -20}, 0.5, -20},
		{"repeats", []float64{5, 5, 5, 1, 5}, 0.2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Lateness
			for _, ms := range tt.adds {
				l.Add(ms)
			}
			if got := l.Quantile(tt.q); got != tt.want {
				t.Fatalf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
			if want := min(len(tt.adds), LateWindow); l.Len() != want {
				t.Fatalf("Len = %d, want %d", l.Len(), want)
			}
		})
	}
}

// TestLatenessWindow: over a long stream with repeats and a change of
// level, every quantile is the reference's (the last LateWindow values
// sorted) after every add.
func TestLatenessWindow(t *testing.T) {
	var l Lateness
	var all []float64
	for i := range 500 {
		// A sawtooth with repeats, then a level 200 ms later.
		ms := float64((i*37)%23) - 5
		if i >= 250 {
			ms += 200
		}
		l.Add(ms)
		all = append(all, ms)
		ref := slices.Clone(all[max(0, len(all)-LateWindow):])
		slices.Sort(ref)
		for _, q := range []float64{0, 0.1, 0.5, 0.9, 1} {
			k := int(math.Ceil(q * float64(len(ref))))
			want := ref[max(k, 1)-1]
			if got := l.Quantile(q); got != want {
				t.Fatalf("after %d adds: Quantile(%v) = %v, want %v", i+1, q, got, want)
			}
		}
	}
	// Once the window holds only the new level, nothing of the old one
	// is left.
	if got := l.Quantile(0); got < 195 {
		t.Fatalf("the lowest residual %v is the old level's", got)
	}
}

// TestLoadExpect: PrefillDone says how late a request's first token came
// against the time Expect kept for it, with Expect's key, and nothing for
// a request without one, unknown, or done already.
func TestLoadExpect(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name    string
		expect  string // the id Expect is given
		at      time.Duration
		done    time.Duration // when PrefillDone comes
		twice   bool
		wantOK  bool
		wantLat time.Duration
	}{
		{"late", "a", 100 * time.Millisecond, 130 * time.Millisecond, false, true, 30 * time.Millisecond},
		{"on time", "a", 100 * time.Millisecond, 100 * time.Millisecond, false, true, 0},
		{"early", "a", 100 * time.Millisecond, 80 * time.Millisecond, false, true, -20 * time.Millisecond},
		{"no prediction kept", "", 0, 80 * time.Millisecond, false, false, 0},
		{"an unknown id's prediction is not kept", "b", 100 * time.Millisecond, 80 * time.Millisecond, false, false, 0},
		{"a repeat says nothing", "a", 100 * time.Millisecond, 130 * time.Millisecond, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			l := NewLoadClock(func() time.Time { return now })
			l.Add("a", w(1), 10, nil)
			if tt.expect != "" {
				l.Expect(tt.expect, "m", t0.Add(tt.at), true)
			}
			now = t0.Add(tt.done)
			key, late, ok := l.PrefillDone("a")
			if tt.twice {
				key, late, ok = l.PrefillDone("a")
			}
			if ok != tt.wantOK || late != tt.wantLat || (ok && key != "m") {
				t.Fatalf("PrefillDone = %q, %v, %v; want m, %v, %v", key, late, ok, tt.wantLat, tt.wantOK)
			}
			if _, _, n := l.Of(w(1)); n != 1 {
				t.Fatalf("%d requests on the worker, want 1 (decoding)", n)
			}
		})
	}
}

// TestLoadExpectJoined: a request routed to a worker while others wait
// there behind the head shares their step, so they are expected with it:
// their lateness is counted from the later of their own prediction and
// its. The head, whose step has begun, is not joined; a request routed
// without a sample of its own still moves those it joins.
func TestLoadExpectJoined(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name string
		// c's prediction and whether it keeps a sample of its own.
		cAt    int
		sample bool
		// want is each request's lateness at PrefillDone (a at 120 ms,
		// b at 160, c at 170); -1: none said.
		want [3]int
	}{
		{"joined later: b expected with c", 150, true, [3]int{20, 10, 20}},
		{"joined earlier than b's own: b keeps its own", 90, true, [3]int{20, 60, 80}},
		{"a joiner without a sample still moves b", 150, false, [3]int{20, 10, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			l := NewLoadClock(func() time.Time { return now })
			l.Add("a", w(1), 10, nil)
			l.Add("b", w(1), 10, nil)
			l.Expect("a", "m", ms(100), true)
			l.Expect("b", "m", ms(100), true)
			l.Add("c", w(1), 10, nil)
			l.Expect("c", "m", ms(tt.cAt), tt.sample)
			for i, id := range []string{"a", "b", "c"} {
				now = ms([]int{120, 160, 170}[i])
				_, late, ok := l.PrefillDone(id)
				got := -1
				if ok {
					got = int(late / time.Millisecond)
				}
				if got != tt.want[i] {
					t.Fatalf("%s: lateness %d ms, want %d", id, got, tt.want[i])
				}
			}
		})
	}
}
