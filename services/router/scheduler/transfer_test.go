package scheduler

import "testing"

// TestKVTransfer: a worker receives the request's full blocks past its
// cached prefix, at the link's latency once and its time per block; one
// that caches them all receives nothing.
func TestKVTransfer(t *testing.T) {
	link := KVTransfer{LatencyMs: 2, MsPerBlock: 0.5}
	r := Request{Blocks: 10, Tokens: 105, BlockSize: 10}
	tests := []struct {
		name    string
		link    KVTransfer
		overlap int
		want    float64
	}{
		{name: "nothing cached: every block", link: link, want: 2 + 10*0.5},
		{name: "a cached prefix: the rest", link: link, overlap: 6, want: 2 + 4*0.5},
		{name: "all cached: nothing moves", link: link, overlap: 10, want: 0},
		{name: "cached past the prompt: nothing moves", link: link, overlap: 12, want: 0},
		{name: "a free link", overlap: 3, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{{Overlap: tt.overlap, Cost: 7}}
			tt.link.Add(cands, r, Params{})
			near(t, "cost", []float64{cands[0].Cost}, []float64{7 + tt.want})
		})
	}
}

// TestKVDisaggAddsTheTransferToTheTime: in KVDisagg the transfer is part of
// the request's own time, before the wait it imposes on later requests;
// with a free link its costs are KV's to the bit.
func TestKVDisaggAddsTheTransferToTheTime(t *testing.T) {
	cands := func() []Candidate {
		return []Candidate{{Worker: w(1), Overlap: 8, QueuedTokens: 150, Timing: linear}, {Worker: w(2), Timing: linear}}
	}
	r := req
	r.Rate = 0.01
	p := Params{OverlapWeight: 1}
	kv := cands()
	KV.cost(kv, r, p)
	free := cands()
	pol := KVDisagg(KVTransfer{})
	pol.cost(free, r, p)
	for i := range kv {
		if free[i].Cost != kv[i].Cost {
			t.Fatalf("free link: cost %v, KV's %v", free[i].Cost, kv[i].Cost)
		}
	}
	got := cands()
	pol = KVDisagg(KVTransfer{MsPerBlock: 1})
	pol.cost(got, r, p)
	// w1 receives 2 blocks: its work 20 -> 22 ms behind 150 ms ahead.
	want0 := 150 + 22 + 0.01*22*(150+11.0)
	want1 := 100 + 10 + 0.01*110*55.0
	near(t, "costs", []float64{got[0].Cost, got[1].Cost}, []float64{want0, want1})
}
