package index

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPending(t *testing.T) {
	w1, w2 := WorkerID{Instance: 1}, WorkerID{Instance: 2}
	t0 := time.Unix(100, 0)
	req := []uint64{10, 11, 12, 13}
	tests := []struct {
		name string
		do   func(p *Pending)
		// want is Extend(w, req, 0) for w1 and w2.
		want [2]int
	}{
		{"routed", func(p *Pending) { p.Add("a", w1, req, t0) }, [2]int{4, 0}},
		{"confirmed part", func(p *Pending) { p.Add("a", w1, req, t0); p.Confirm(w1, []uint64{12, 13}) }, [2]int{2, 0}},
		{"released", func(p *Pending) { p.Add("a", w1, req, t0); p.Release("a") }, [2]int{0, 0}},
		{"two requests, one released", func(p *Pending) {
			p.Add("a", w1, req[:2], t0)
			p.Add("b", w1, req, t0)
			p.Release("a")
		}, [2]int{4, 0}},
		{"moved by a retry", func(p *Pending) { p.Add("a", w1, req, t0); p.Add("a", w2, req[:3], t0) }, [2]int{0, 3}},
		{"expired", func(p *Pending) {
			p.Add("a", w1, req, t0)
			p.Add("b", w2, req, t0.Add(time.Minute))
			p.Expire(t0.Add(61 * time.Second))
		}, [2]int{0, 4}},
		{"done, within the grace", func(p *Pending) { p.Add("a", w1, req, t0); p.Done("a", t0); p.Expire(t0.Add(Grace / 2)) }, [2]int{4, 0}},
		{"done, past the grace", func(p *Pending) { p.Add("a", w1, req, t0); p.Done("a", t0); p.Expire(t0.Add(Grace + 1)) }, [2]int{0, 0}},
		{"worker left", func(p *Pending) { p.Add("a", w1, req, t0); p.Add("b", w2, req, t0); p.RemoveWorker(1) }, [2]int{0, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPending(time.Minute)
			tt.do(p)
			got := [2]int{p.Extend(w1, req, 0), p.Extend(w2, req, 0)}
			if got != tt.want {
				t.Fatalf("Extend = %v, want %v", got, tt.want)
			}
			all := []int{0, 0}
			p.ExtendAll([]WorkerID{w1, w2}, req, all)
			if [2]int(all) != tt.want {
				t.Fatalf("ExtendAll = %v, want %v", all, tt.want)
			}
		})
	}
	// Extend continues from what the index already holds.
	p := NewPending(time.Minute)
	p.Add("a", w1, req[2:], t0)
	if got := p.Extend(w1, req, 2); got != 4 {
		t.Fatalf("Extend from 2 = %d, want 4", got)
	}
	if got := p.Extend(w1, req, 0); got != 0 {
		t.Fatalf("Extend from 0 = %d, want 0 (block 10 is not predicted)", got)
	}
	p.Release("a")
	if !p.Empty() || p.Len() != 0 {
		t.Fatal("released everything, yet predictions remain")
	}
}

// TestPendingMatchesOld runs random operations on a few blocks and
// workers, so that blocks are predicted on several workers and back on
// one, against the implementation before one/multi (pending_old_test.go):
// every prediction must be the same.
func TestPendingMatchesOld(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	p, old := NewPending(time.Minute), newOldPending(time.Minute)
	ws := []WorkerID{{Instance: 1}, {Instance: 2}, {Instance: 3}}
	hashes := func() []uint64 {
		start := uint64(r.IntN(6))
		h := make([]uint64, 1+r.IntN(5))
		for i := range h {
			h[i] = start + uint64(i)
		}
		return h
	}
	now := time.Unix(1000, 0)
	for step := range 20_000 {
		now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
		id := fmt.Sprint("r", r.IntN(12))
		switch r.IntN(7) {
		case 0, 1:
			w, h := ws[r.IntN(3)], hashes()
			p.Add(id, w, h, now)
			old.Add(id, w, h, now)
		case 2:
			p.Release(id)
			old.Release(id)
		case 3:
			w, h := ws[r.IntN(3)], hashes()
			p.Confirm(w, h)
			old.Confirm(w, h)
		case 4:
			p.Done(id, now)
			old.Done(id, now)
		case 5:
			p.Expire(now)
			old.Expire(now)
		case 6:
			in := uint64(r.IntN(3) + 1)
			p.RemoveWorker(in)
			old.RemoveWorker(in)
		}
		req := hashes()
		got, want := make([]int, 3), make([]int, 3)
		p.ExtendAll(ws, req, got)
		old.ExtendAll(ws, req, want)
		for i := range ws {
			if got[i] != want[i] || p.Extend(ws[i], req, 0) != old.Extend(ws[i], req, 0) {
				t.Fatalf("step %d: worker %d reaches %d, before %d", step, i, got[i], want[i])
			}
		}
		if p.Len() != old.Len() || p.Empty() != old.Empty() {
			t.Fatalf("step %d: %d requests (empty %v), before %d (%v)", step, p.Len(), p.Empty(), old.Len(), old.Empty())
		}
	}
}
