package index

import (
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
