package scheduler

import (
	"testing"
	"time"
)

// TestHeld: a worker receiving the whole prompt's KV computes its queue
// and the last block, with a decode step beside each step while requests
// decode there, whatever it caches; its cached prefix is left as it was.
// With linear (1 ms a token, 10 ms a decode step, steps of 1000 tokens)
// and req (10 blocks of 10 tokens): the last block is 10 tokens.
func TestHeld(t *testing.T) {
	tests := []struct {
		name string
		c    Candidate
		want float64
	}{
		{name: "idle, nothing cached: the last block", c: Candidate{Timing: linear}, want: 10},
		{name: "idle, half cached: the same", c: Candidate{Overlap: 5, Timing: linear}, want: 10},
		{name: "queued tokens first", c: Candidate{QueuedTokens: 300, Timing: linear}, want: 310},
		{name: "decoding: a decode step beside the prefill step", c: Candidate{Decoding: 4, Timing: linear}, want: 20},
		{name: "a long queue in steps of 996 beside 4 decodes", c: Candidate{QueuedTokens: 2000, Decoding: 4, Timing: linear}, want: 2010 + 3*10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{tt.c}
			got := addTerms(cands, req, Params{OverlapWeight: 1}, Held{})
			near(t, "cost", got, []float64{tt.want})
			if cands[0].Overlap != tt.c.Overlap {
				t.Fatalf("overlap changed to %d", cands[0].Overlap)
			}
		})
	}
}

// TestDecodeLeg: the decode worker of a pair costs its time as the holder
// of every block plus the transfer of those it lacks; with a free link and
// every block cached it is KV's cost (a whole prompt cached computes the
// last block either way).
func TestDecodeLeg(t *testing.T) {
	link := KVTransfer{LatencyMs: 2, MsPerBlock: 0.5}
	leg := DecodeLeg(link)
	cands := []Candidate{{Worker: w(1), Timing: linear}, {Worker: w(2), Overlap: 8, Timing: linear}, {Worker: w(3), Overlap: 10, QueuedTokens: 5, Timing: linear}}
	chosen, err := leg.Select(cands, req, Params{OverlapWeight: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 10 + 2 + 10*0.5; 10 + 2 + 2*0.5; 15 and nothing moved.
	near(t, "costs", []float64{cands[0].Cost, cands[1].Cost, cands[2].Cost}, []float64{17, 13, 15})
	if chosen != 1 {
		t.Fatalf("chose %d, want 1", chosen)
	}
	whole := []Candidate{{Worker: w(1), Overlap: 10, QueuedTokens: 40, Decoding: 2, Timing: linear}}
	free := DecodeLeg(KVTransfer{})
	r := req
	r.Rate = 0.01
	got := addTerms(whole, r, Params{OverlapWeight: 1}, free.Terms...)
	kv := []Candidate{whole[0]}
	want := addTerms(kv, r, Params{OverlapWeight: 1}, Prefill{}, Decode{}, QueueWait{})
	near(t, "all cached, free link", got, want)
}

// TestLoadDrop: Drop ends a record in flight as Free does, and of an id
// not in flight remembers nothing, so a later Add counts.
func TestLoadDrop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ops       []string
		wantFound []bool
		wantAdd   bool
		reqs      int
	}{
		{name: "dropped in flight", ops: []string{"add", "drop"}, wantFound: []bool{true}, reqs: 0},
		{name: "dropped twice", ops: []string{"add", "drop", "drop"}, wantFound: []bool{true, false}, reqs: 0},
		{name: "drop before add leaves the add counted", ops: []string{"drop", "add"}, wantFound: []bool{false}, wantAdd: true, reqs: 1},
		{name: "prefilled then dropped", ops: []string{"add", "done", "drop"}, wantFound: []bool{true}, reqs: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			l := NewLoadClock(func() time.Time { return now })
			var found []bool
			for _, op := range tc.ops {
				switch op {
				case "add":
					if got := l.Add("r", w(1), 2, []uint64{1, 2}); got != (tc.wantAdd || tc.ops[0] == "add") {
						t.Fatalf("Add counted %v", got)
					}
				case "done":
					l.PrefillDone("r")
				case "drop":
					f, _ := l.Drop("r")
					found = append(found, f)
				}
			}
			if len(found) != len(tc.wantFound) {
				t.Fatalf("found %v, want %v", found, tc.wantFound)
			}
			for i := range found {
				if found[i] != tc.wantFound[i] {
					t.Fatalf("found %v, want %v", found, tc.wantFound)
				}
			}
			p, d, n := l.Of(w(1))
			if n != tc.reqs || (n == 0 && (p != 0 || d != 0)) {
				t.Fatalf("worker load %d prefill, %d decode, %d requests; want %d requests", p, d, n, tc.reqs)
			}
			// A dropped request a load report still lists is not counted again.
			l.Report(w(1), []ReportedRequest{{ID: "r", PrefillTokens: 50}}, 0, 0, 10)
			c := Candidate{Worker: w(1)}
			l.Fill(&c, 10)
			if tc.reqs == 0 && c.QueuedTokens != 0 {
				t.Fatalf("a dropped request's report counts %d tokens", c.QueuedTokens)
			}
		})
	}
}
