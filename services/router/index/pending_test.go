package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
// one, and workers lose every request and come back (their numbers are
// reused), against the implementation before the prediction table
// (pending_old_test.go): every prediction must be the same. ExtendAll is
// asked from random start positions, for candidate lists with a worker
// listed twice, with workers that have nothing predicted, and for more
// workers than its buffers hold.
func TestPendingMatchesOld(t *testing.T) {
	for _, tc := range []struct {
		name            string
		workers, blocks int
		reqLen          int
	}{
		{"few workers, few blocks", 3, 6, 5},
		{"many workers, long requests", 40, 60, 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkPendingMatchesOld(t, tc.workers, tc.blocks, tc.reqLen)
		})
	}
}

func checkPendingMatchesOld(t *testing.T, workers, blocks, reqLen int) {
	r := rand.New(rand.NewPCG(3, uint64(workers)))
	p, old := NewPending(time.Minute), newOldPending(time.Minute)
	var ws []WorkerID
	for i := range workers {
		ws = append(ws, WorkerID{Instance: uint64(i/2 + 1), DPRank: uint32(i % 2)})
	}
	// The candidates: every worker, one twice, one with nothing ever
	// predicted.
	cands := append(append([]WorkerID(nil), ws...), ws[0], WorkerID{Instance: 999})
	hashes := func() []uint64 {
		start := uint64(r.IntN(blocks))
		h := make([]uint64, 1+r.IntN(reqLen))
		for i := range h {
			h[i] = start + uint64(i)
		}
		return h
	}
	now := time.Unix(1000, 0)
	for step := range 20_000 {
		now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
		id := fmt.Sprint("r", r.IntN(4*workers))
		switch r.IntN(7) {
		case 0, 1:
			w, h := ws[r.IntN(len(ws))], hashes()
			p.Add(id, w, h, now)
			old.Add(id, w, h, now)
		case 2:
			p.Release(id)
			old.Release(id)
		case 3:
			w, h := ws[r.IntN(len(ws))], hashes()
			p.Confirm(w, h)
			old.Confirm(w, h)
		case 4:
			p.Done(id, now)
			old.Done(id, now)
		case 5:
			p.Expire(now)
			old.Expire(now)
		case 6:
			in := ws[r.IntN(len(ws))].Instance
			p.RemoveWorker(in)
			old.RemoveWorker(in)
		}
		req := hashes()
		got, want := make([]int, len(cands)), make([]int, len(cands))
		for i := range got {
			if r.IntN(2) == 0 {
				got[i] = r.IntN(len(req) + 1)
				want[i] = got[i]
			}
		}
		from := slices.Clone(got)
		p.ExtendAll(cands, req, got)
		old.ExtendAll(cands, req, want)
		for i, w := range cands {
			if got[i] != want[i] || p.Extend(w, req, from[i]) != old.Extend(w, req, from[i]) {
				t.Fatalf("step %d: worker %d from %d reaches %d, before %d", step, i, from[i], got[i], want[i])
			}
		}
		if p.Len() != old.Len() || p.Empty() != old.Empty() {
			t.Fatalf("step %d: %d requests (empty %v), before %d (%v)", step, p.Len(), p.Empty(), old.Len(), old.Empty())
		}
	}
}
