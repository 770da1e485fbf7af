package scheduler

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestBlockWait: hand-worked waits for free KV blocks. A worker of 400
// blocks whose 4 running requests hold 100 each (a request frees 100 when
// it ends), a mean run of 1,200 ms: an end comes after 1200/4 = 300 ms on
// average, the next 1200/3 = 400 ms later (memoryless remainders), and so
// on; while requests queued ahead remain, an end admits one of them and
// the running stay 4. With no prompt queued the worker computes nothing
// before the request, so the whole wait is added.
func TestBlockWait(t *testing.T) {
	tm := timingmodel.Default()
	full := KVSpace{Total: 400, Held: 400, Holders: 4, RunMs: 1200}
	req := func(blocks int) Request { return Request{Blocks: blocks, Tokens: blocks * 16, BlockSize: 16} }
	tests := []struct {
		name    string
		kv      KVSpace
		overlap int // cached blocks
		shared  int // of them, held by running requests
		req     Request
		queued  int // prompt tokens queued for prefill, uncached
		want    float64
	}{
		{name: "room: no wait", kv: KVSpace{Total: 400, Held: 200, Holders: 2, RunMs: 1200}, req: req(150), want: 0},
		{name: "exactly fits: no wait", kv: KVSpace{Total: 400, Held: 250, Holders: 2, RunMs: 1200}, req: req(150), want: 0},
		{name: "one end frees enough", kv: full, req: req(80), want: 300},
		{name: "two ends", kv: full, req: req(150), want: 300 + 400},
		{name: "a prefix running requests hold is shared: one end", kv: full, overlap: 100, shared: 100, req: req(150), want: 300},
		{name: "a cached prefix nobody holds takes free memory: two ends", kv: full, overlap: 100, req: req(150), want: 300 + 400},
		{name: "a partial last block takes a block", kv: KVSpace{Total: 400, Held: 300, Holders: 3, RunMs: 1200},
			req: Request{Blocks: 100, Tokens: 1601, BlockSize: 16}, want: 400},
		{name: "two queued ahead take the first two ends, the running stay 4", kv: KVSpace{Total: 400, Held: 400, Holders: 4,
			Queued: 150, Waiting: 2, RunMs: 1200}, req: req(150), want: 300 + 300 + 300},
		{name: "every running request ends", kv: full, req: req(400), want: 300 + 400 + 600 + 1200},
		{name: "more than all of them: all end", kv: full, req: req(500), want: 300 + 400 + 600 + 1200},
		{name: "a queue's compute longer than the wait: nothing more", kv: full, req: req(80), queued: 20000, want: 0},
		{name: "capacity unknown", kv: KVSpace{Held: 400, Holders: 4, RunMs: 1200}, req: req(150), want: 0},
		{name: "run unknown", kv: KVSpace{Total: 400, Held: 400, Holders: 4}, req: req(150), want: 0},
		{name: "nothing running", kv: KVSpace{Total: 400, Queued: 500, Waiting: 3, RunMs: 1200}, req: req(150), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Candidate{Cost: 10, Overlap: tt.overlap, SharedBlocks: tt.shared, KV: tt.kv, Timing: tm, QueuedTokens: tt.queued,
				QueuedAttn: float64(tt.queued) * float64(tt.queued)}
			cands := []Candidate{c}
			BlockWait{}.Add(cands, tt.req, Params{})
			if got := cands[0].Cost - 10; math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("added %v, want %v", got, tt.want)
			}
			if tt.want == 0 && math.Float64bits(cands[0].Cost) != math.Float64bits(10) {
				t.Errorf("cost %v changed with no wait", cands[0].Cost)
			}
		})
	}
	t.Run("a long queue's compute covers a short wait", func(t *testing.T) {
		c := Candidate{KV: full, Timing: tm, QueuedTokens: 20000, QueuedAttn: 20000 * 20000}
		r := req(80)
		if w, q := c.BlockWaitMs(&r), c.queueMs(); !(q > w) {
			t.Fatalf("queue %v ms, wait %v ms: the case above needs the queue longer", q, w)
		}
	})
}

// TestBlockWaitDecodeLeg: a decode worker of a pair takes the request's
// blocks of its memory (those it receives and the cached ones nobody
// holds), so its price gains the wait for room for them; a decode worker
// with room keeps its price to the bit. Two decode workers with equal
// queues: the one caching 20 of the 100 blocks, full, waits for one of
// its 2 running requests (holding 200 blocks each, runs of 3,000 ms) to
// end: 1,500 ms.
func TestBlockWaitDecodeLeg(t *testing.T) {
	tm := timingmodel.Default()
	link := KVTransfer{LatencyMs: 1, MsPerBlock: 0.5}
	r := Request{Blocks: 100, Tokens: 1600, BlockSize: 16}
	cands := []Candidate{
		{Overlap: 20, Timing: tm, Decoding: 2, Usage: 1, KV: KVSpace{Total: 400, Held: 400, Holders: 2, RunMs: 3000}},
		{Overlap: 0, Timing: tm, Decoding: 2, Usage: 0.5, KV: KVSpace{Total: 400, Held: 200, Holders: 2, RunMs: 3000}},
	}
	without := Compose(Lowest{}, Held{}, QueueWait{}, link)
	base := append([]Candidate(nil), cands...)
	without.cost(base, r, Params{OverlapWeight: 1})
	leg := DecodeLeg(link)
	with := append([]Candidate(nil), cands...)
	leg.cost(with, r, Params{OverlapWeight: 1})
	if got := with[0].Cost - base[0].Cost; math.Abs(got-1500) > 1e-9 {
		t.Errorf("full decode worker: added %v, want 1500", got)
	}
	if math.Float64bits(with[1].Cost) != math.Float64bits(base[1].Cost) {
		t.Errorf("decode worker with room: cost %v, want %v", with[1].Cost, base[1].Cost)
	}
	if i, _ := leg.Select(append([]Candidate(nil), cands...), r, Params{OverlapWeight: 1}, nil); i != 1 {
		t.Errorf("the decode leg chose %d, want the worker with room (1)", i)
	}
}

// TestBlockWaitFill: the load record fills a worker's KV space: the
// distinct blocks its decoding requests hold plus half the mean output's
// blocks each, the blocks its queued requests take when admitted (a
// decode leg's, what it receives), the report's capacity and foreign
// requests, and the run.
func TestBlockWaitFill(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLoadClock(func() time.Time { return now })
	l.Add("a", w(1), 3, []uint64{1, 2, 3})
	l.PrefillDone("a")
	l.Add("b", w(1), 2, []uint64{1, 2, 4, 5}) // shares 1 and 2 with a
	l.PrefillDone("b")
	l.Add("queued", w(1), 4, []uint64{6, 7, 8, 9})
	l.AddNeed("decode-leg", w(1), 0, 6, []uint64{10, 11, 12, 13, 14, 15})
	l.Report(w(1), []ReportedRequest{{ID: "other", PrefillTokens: 40}, {ID: "other-decoding", DecodeBlocks: 9}}, 0, 1000, 16)
	l.ReportRun(w(1), 2500, 320) // 320 tokens: 20 blocks, 10 on average so far
	c := Candidate{Worker: w(1)}
	l.Fill(&c, 16)
	want := KVSpace{Total: 1000, Held: 5 + 2*10 + 9, Holders: 3, Queued: 4 + 6 + 3, Waiting: 3, RunMs: 2500}
	if c.KV != want {
		t.Fatalf("KV %+v, want %+v", c.KV, want)
	}
	cands := []Candidate{{Worker: w(1)}}
	l.FillAll(cands, 16)
	if cands[0].KV != want {
		t.Fatalf("FillAll: KV %+v, want %+v", cands[0].KV, want)
	}
	l.Free("queued")
	l.PrefillDone("decode-leg")
	l.FillAll(cands, 16)
	want = KVSpace{Total: 1000, Held: 5 + 6 + 3*10 + 9, Holders: 4, Queued: 3, Waiting: 1, RunMs: 2500}
	if cands[0].KV != want {
		t.Fatalf("after the queue moved: KV %+v, want %+v", cands[0].KV, want)
	}

	// Running requests hold blocks 1, 2, 3 (a) and 1, 2, 4, 5 (b): a
	// request continuing 1, 2, 4 shares them where its memory is short;
	// one with room is not looked at.
	full := NewLoadClock(func() time.Time { return now })
	full.Add("a", w(2), 3, []uint64{1, 2, 3})
	full.PrefillDone("a")
	full.Add("b", w(2), 2, []uint64{1, 2, 4, 5})
	full.PrefillDone("b")
	full.Report(w(2), []ReportedRequest{}, 0, 8, 16)
	full.ReportRun(w(2), 1000, 0)
	full.Report(w(3), []ReportedRequest{}, 0, 8, 16)
	hashes := []uint64{1, 2, 4, 6, 7}
	shared := []Candidate{{Worker: w(2), Overlap: 4}, {Worker: w(2), Overlap: 2}, {Worker: w(2)}, {Worker: w(3), Overlap: 3}}
	full.FillAll(shared, 16)
	full.FillShared(shared, hashes)
	for i, want := range []int{3, 2, 0, 0} {
		if got := shared[i].SharedBlocks; got != want {
			t.Errorf("candidate %d: %d shared blocks, want %d", i, got, want)
		}
	}
	if got := full.SharedPrefix(w(2), hashes, 5); got != 3 {
		t.Errorf("SharedPrefix = %d, want 3", got)
	}
}

// TestHarmonic: the asymptotic series past 64 agrees with the sum.
func TestHarmonic(t *testing.T) {
	sum := 0.0
	for n := 1; n <= 5000; n++ {
		sum += 1 / float64(n)
		if got := harmonic(n); math.Abs(got-sum) > 1e-11 {
			t.Fatalf("harmonic(%d) = %v, want %v", n, got, sum)
		}
	}
	if harmonic(0) != 0 || harmonic(-3) != 0 {
		t.Fatal("harmonic of no terms is not 0")
	}
}
