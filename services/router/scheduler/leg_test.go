package scheduler

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestDecodeLegAdmission follows a decode leg through the load record. A
// worker of 25 blocks (blocks of 16 tokens) runs requests a and b, 10
// blocks each (their outputs add none: a mean output of 0), a mean run of
// 1,200 ms; decode leg x (10 blocks) is routed there. From its handoff
// (its prefill completed on another worker) x waits for admission among
// the worker's waiting requests until a load report of the worker lists
// it decoding; only then does it hold its blocks as a running request.
// Without a sign of admission to wait for (the worker's reports list no
// requests) it runs from the handoff.
//
// The waits of a new request of 10 blocks, by hand. x waiting: the
// memory holds 20 + 10 (x) + 10 = 40 blocks against 25, 15 too many, two
// ends of 10: the first end (1200/2 = 600 ms) admits x in its place, the
// second comes 600 ms later: 1,200 ms, as the engine does it (x cannot be
// admitted beside a and b: 5 blocks free). Counted running from the
// handoff, x would make three running requests of 10 blocks each, whose
// first two ends come after 1200/3 + 1200/2 = 1,000 ms. x running:
// 30 + 10 against 25, two ends of 10 among three running: 1,000 ms. The
// slot wait with room for 2 running: x waiting takes the first end's slot
// and the request the second's: 2 ends at 1200/2, 1,200 ms; x running,
// the same 2 ends (3 running + 1 - 2) at 1200/2. x gone: 20 + 10 against
// 25 and 2 running + 1 against 2 slots, one end: 600 ms each.
func TestDecodeLegAdmission(t *testing.T) {
	now := time.Unix(1000, 0)
	const bs = 16
	blocks := func(from uint64) []uint64 {
		b := make([]uint64, 10)
		for i := range b {
			b[i] = from + uint64(i)
		}
		return b
	}
	decoding := []ReportedRequest{{ID: "a", DecodeBlocks: 10}, {ID: "b", DecodeBlocks: 10}}
	listing := func(x ...ReportedRequest) []ReportedRequest {
		return append(append([]ReportedRequest{}, decoding...), x...)
	}
	waiting := KVSpace{Total: 25, Held: 20, Holders: 2, Queued: 10, Waiting: 1, RunMs: 1200}
	running := KVSpace{Total: 25, Held: 30, Holders: 3, RunMs: 1200}
	idle := KVSpace{Total: 25, Held: 20, Holders: 2, RunMs: 1200}
	type step func(l *Load)
	done := func(l *Load) { l.PrefillDone("x") }
	free := func(l *Load) { l.Free("x") }
	report := func(reqs []ReportedRequest) step {
		return func(l *Load) { l.Report(w(1), reqs, 0, 25, bs) }
	}
	tests := []struct {
		name string
		// unlisted: the worker's reports before x give sums only.
		unlisted bool
		steps    []step
		want     KVSpace
		// decodeBlocks: the distinct blocks its running requests hold.
		decodeBlocks, decoding int
		blockWait, slotWait    float64
	}{
		{name: "routed", want: waiting, decodeBlocks: 20, decoding: 2, blockWait: 1200, slotWait: 1200},
		{name: "handed off: it waits for admission", steps: []step{done}, want: waiting, decodeBlocks: 20, decoding: 2, blockWait: 1200, slotWait: 1200},
		{name: "listed computing its last block", steps: []step{done, report(listing(ReportedRequest{ID: "x", PrefillTokens: 16}))},
			want: waiting, decodeBlocks: 20, decoding: 2, blockWait: 1200, slotWait: 1200},
		{name: "not listed: its KV still moving", steps: []step{done, report(listing())}, want: waiting, decodeBlocks: 20, decoding: 2, blockWait: 1200, slotWait: 1200},
		{name: "listed decoding: admitted", steps: []step{done, report(listing(ReportedRequest{ID: "x", DecodeBlocks: 10}))},
			want: running, decodeBlocks: 30, decoding: 3, blockWait: 1000, slotWait: 1200},
		{name: "listed decoding by another worker", steps: []step{done, func(l *Load) {
			l.Report(w(2), []ReportedRequest{{ID: "x", DecodeBlocks: 10}}, 0, 25, bs)
		}}, want: waiting, decodeBlocks: 20, decoding: 2, blockWait: 1200, slotWait: 1200},
		{name: "listed decoding before the handoff is heard: waits for it", steps: []step{report(listing(ReportedRequest{ID: "x", DecodeBlocks: 10}))},
			want: waiting, decodeBlocks: 20, decoding: 2, blockWait: 1200, slotWait: 1200},
		{name: "listed decoding, then the handoff: runs", steps: []step{report(listing(ReportedRequest{ID: "x", DecodeBlocks: 10})), done},
			want: running, decodeBlocks: 30, decoding: 3, blockWait: 1000, slotWait: 1200},
		{name: "the reports turn to sums: it runs", steps: []step{done, report(nil)}, want: running, decodeBlocks: 30, decoding: 3, blockWait: 1000, slotWait: 1200},
		{name: "reports of sums: it runs from the handoff", unlisted: true, steps: []step{done}, want: running, decodeBlocks: 30, decoding: 3, blockWait: 1000, slotWait: 1200},
		{name: "freed waiting", steps: []step{done, free}, want: idle, decodeBlocks: 20, decoding: 2, blockWait: 600, slotWait: 600},
		{name: "freed running", steps: []step{done, report(listing(ReportedRequest{ID: "x", DecodeBlocks: 10})), free}, want: idle, decodeBlocks: 20,
			decoding: 2, blockWait: 600, slotWait: 600},
	}
	tm := timingmodel.Default()
	tm.MaxRunning = 2
	req := Request{Blocks: 10, Tokens: 10 * bs, BlockSize: bs}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLoadClock(func() time.Time { return now })
			for i, id := range []string{"a", "b"} {
				l.Add(id, w(1), 10, blocks(uint64(100*i)))
				l.PrefillDone(id)
			}
			if tt.unlisted {
				l.Report(w(1), nil, 0, 25, bs)
			} else {
				l.Report(w(1), listing(), 0, 25, bs)
			}
			l.ReportRun(w(1), 1200, 0)
			if !l.AddLeg("x", w(1), 10, blocks(1000)) {
				t.Fatal("leg not counted")
			}
			for _, s := range tt.steps {
				s(l)
			}
			c := Candidate{Worker: w(1), Timing: tm}
			l.Fill(&c, bs)
			if c.KV != tt.want || c.DecodeBlocks != tt.decodeBlocks || c.Decoding != tt.decoding {
				t.Fatalf("KV %+v, %d decode blocks, %d decoding; want %+v, %d, %d", c.KV, c.DecodeBlocks, c.Decoding, tt.want, tt.decodeBlocks, tt.decoding)
			}
			cands := []Candidate{{Worker: w(1), Timing: tm}}
			l.FillAll(cands, bs)
			if cands[0].KV != tt.want || cands[0].Decoding != tt.decoding {
				t.Fatalf("FillAll: KV %+v, %d decoding; want %+v, %d", cands[0].KV, cands[0].Decoding, tt.want, tt.decoding)
			}
			if got := c.BlockWaitMs(&req); math.Abs(got-tt.blockWait) > 1e-9 {
				t.Errorf("block wait %v ms, want %v", got, tt.blockWait)
			}
			if got := c.RunSlotWaitMs(); math.Abs(got-tt.slotWait) > 1e-9 {
				t.Errorf("slot wait %v ms, want %v", got, tt.slotWait)
			}
		})
	}
}

// TestDecodeLegLifecycle: a decode leg's record ends as any request's: a
// free before its handoff or after its admission leaves nothing, its
// handoff's lateness is measured as a first token's (the relayed token
// reaches the caller then), and a free that came before it was routed
// leaves it uncounted.
func TestDecodeLegLifecycle(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLoadClock(func() time.Time { return now })
	l.Report(w(1), []ReportedRequest{}, 0, 100, 16)
	l.AddLeg("x", w(1), 3, []uint64{1, 2, 3})
	l.Expect("x", "m", now.Add(-time.Second), true)
	if key, late, ok := l.PrefillDone("x"); !ok || key != "m" || late != time.Second {
		t.Fatalf("handoff lateness %q %v %v, want m 1s true", key, late, ok)
	}
	if _, _, ok := l.PrefillDone("x"); ok {
		t.Fatal("a repeated handoff measured again")
	}
	if prefilled := l.Free("x"); !prefilled {
		t.Fatal("a leg freed after its handoff is not prefilled")
	}
	if p, d, n := l.Of(w(1)); p != 0 || d != 0 || n != 0 {
		t.Fatalf("after the free: %d prefill blocks, %d decode blocks, %d requests; want none", p, d, n)
	}
	l.Free("y")
	if l.AddLeg("y", w(1), 3, []uint64{1, 2, 3}) {
		t.Fatal("a leg freed before its route was counted")
	}
	if _, _, n := l.Of(w(1)); n != 0 {
		t.Fatalf("%d requests after a leg freed before its route, want 0", n)
	}
}
