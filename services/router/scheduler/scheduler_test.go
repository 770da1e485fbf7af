package scheduler

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/index"
)

func w(i uint64) index.WorkerID { return index.WorkerID{Instance: i} }

func TestSelectCosts(t *testing.T) {
	tests := []struct {
		name   string
		cands  []Candidate
		blocks int
		p      Params
		want   index.WorkerID
		costs  []float64
	}{
		{
			name:   "cache hit wins at equal load",
			cands:  []Candidate{{Worker: w(1), Overlap: 0}, {Worker: w(2), Overlap: 8}},
			blocks: 10, p: Params{OverlapWeight: 1},
			want: w(2), costs: []float64{10, 2},
		},
		{
			name:   "load outweighs a small hit",
			cands:  []Candidate{{Worker: w(1), Overlap: 2, DecodeBlocks: 100}, {Worker: w(2)}},
			blocks: 10, p: Params{OverlapWeight: 1},
			want: w(2), costs: []float64{108, 10},
		},
		{
			name:   "higher weight favours the hit",
			cands:  []Candidate{{Worker: w(1), Overlap: 8, DecodeBlocks: 30}, {Worker: w(2)}},
			blocks: 10, p: Params{OverlapWeight: 5},
			want: w(1), costs: []float64{40, 50},
		},
		{
			name:   "pending prefill counts",
			cands:  []Candidate{{Worker: w(1), Overlap: 10, PrefillBlocks: 50}, {Worker: w(2), Overlap: 5}},
			blocks: 10, p: Params{OverlapWeight: 1},
			want: w(2), costs: []float64{50, 5},
		},
		{
			name:   "overlap beyond the request is capped",
			cands:  []Candidate{{Worker: w(1), Overlap: 20}},
			blocks: 10, p: Params{OverlapWeight: 1},
			want: w(1), costs: []float64{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, err := Select(tt.cands, tt.blocks, tt.p, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if tt.cands[i].Worker != tt.want {
				t.Fatalf("chose %v, want %v", tt.cands[i].Worker, tt.want)
			}
			for j, c := range tt.cands {
				if c.Cost != tt.costs[j] {
					t.Fatalf("cost of %v = %v, want %v", c.Worker, c.Cost, tt.costs[j])
				}
			}
		})
	}
}

func TestSelectTiesAreRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	counts := map[index.WorkerID]int{}
	for range 3000 {
		cands := []Candidate{{Worker: w(1)}, {Worker: w(2)}, {Worker: w(3)}, {Worker: w(4), DecodeBlocks: 1}}
		i, _ := Select(cands, 4, Params{OverlapWeight: 1}, rng)
		counts[cands[i].Worker]++
	}
	if counts[w(4)] != 0 {
		t.Fatalf("the costlier worker was chosen %d times", counts[w(4)])
	}
	for _, id := range []index.WorkerID{w(1), w(2), w(3)} {
		if counts[id] < 800 || counts[id] > 1200 {
			t.Fatalf("tie-break is not uniform: %v", counts)
		}
	}
}

func TestSelectTemperature(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	counts := [2]int{}
	for range 4000 {
		cands := []Candidate{{Worker: w(1), Overlap: 8}, {Worker: w(2)}}
		i, _ := Select(cands, 10, Params{OverlapWeight: 1, Temperature: 0.5}, rng)
		counts[i]++
	}
	// exp(0) : exp(-1/0.5): the cheap worker about 88% of the time.
	if counts[0] < 3300 || counts[0] > 3750 || counts[1] == 0 {
		t.Fatalf("softmax split = %v, want about 3523:477", counts)
	}
}

func TestSelectNoCandidates(t *testing.T) {
	if _, err := Select(nil, 1, Params{}, rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadLifecycle(t *testing.T) {
	l := NewLoad()
	check := func(step string, id index.WorkerID, prefill, decode, reqs int) {
		t.Helper()
		p, d, r := l.Of(id)
		if p != prefill || d != decode || r != reqs {
			t.Fatalf("%s: load of %v = (%d, %d, %d), want (%d, %d, %d)", step, id, p, d, r, prefill, decode, reqs)
		}
	}
	// a and b share their first two blocks (a system prompt).
	l.Add("a", w(1), 3, []uint64{1, 2, 3})
	l.Add("b", w(1), 2, []uint64{1, 2, 4, 5})
	check("after two adds", w(1), 5, 0, 2)
	l.PrefillDone("a")
	l.PrefillDone("a")
	check("after a's prefill", w(1), 2, 3, 2)
	l.PrefillDone("b")
	check("after b's prefill", w(1), 0, 5, 2)
	l.Free("a")
	l.Free("a")
	l.Free("never")
	check("after a's free", w(1), 0, 4, 1)
	l.Add("b", w(2), 2, []uint64{1, 2, 4, 5}) // b migrated
	check("b left w1", w(1), 0, 0, 0)
	check("b on w2", w(2), 2, 0, 1)
	l.RemoveWorker(w(2))
	check("w2 removed", w(2), 0, 0, 0)
	l.PrefillDone("b")
	check("late prefill of a removed request", w(2), 0, 0, 0)
}

func TestLoadExpire(t *testing.T) {
	l := NewLoad()
	l.Add("old", w(1), 2, []uint64{1})
	l.Add("retried", w(1), 2, []uint64{2})
	cutoff := time.Now()
	time.Sleep(time.Millisecond) // the clock must move past cutoff
	l.Add("retried", w(2), 2, []uint64{2})
	l.Add("new", w(1), 2, []uint64{3})
	if n := l.Expire(cutoff); n != 1 {
		t.Fatalf("Expire dropped %d requests, want 1 (the old one; the retry is newer)", n)
	}
	if _, _, r := l.Of(w(1)); r != 1 {
		t.Fatalf("worker 1 keeps %d requests, want 1", r)
	}
	if _, _, r := l.Of(w(2)); r != 1 {
		t.Fatalf("worker 2 keeps %d requests, want the retried one", r)
	}
}
