package scheduler

import (
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestSlotWait: hand-worked waits for a running slot. A worker that runs
// at most 4 requests, a mean run of 1,200 ms: with 4 running, an end
// comes every 1200/4 = 300 ms (memoryless remainders, and each end admits
// the next request waiting, so 4 keep running); a request behind w more
// waits for w+1 ends. The memory has room (no block wait) unless a case
// says otherwise, and nothing is queued for prefill unless it says so.
func TestSlotWait(t *testing.T) {
	tm := timingmodel.Default()
	tm.MaxRunning = 4
	kv := func(holders, waiting int) KVSpace {
		return KVSpace{Total: 100000, Held: 100 * holders, Holders: holders, Waiting: waiting, RunMs: 1200}
	}
	req := Request{Blocks: 10, Tokens: 160, BlockSize: 16}
	tests := []struct {
		name   string
		kv     KVSpace
		most   int
		queued int // prompt tokens queued for prefill, uncached
		want   float64
	}{
		{name: "a slot free", kv: kv(3, 0), most: 4, want: 0},
		{name: "the last slot taken by one waiting", kv: kv(3, 1), most: 4, want: 1200.0 / 3},
		{name: "full: the first end", kv: kv(4, 0), most: 4, want: 300},
		{name: "full, two waiting ahead: the third end", kv: kv(4, 2), most: 4, want: 900},
		// The router may count more running than the slots (a decode
		// leg on a worker whose reports list no requests runs from its
		// handoff): six counted on four slots are two waiting.
		{name: "more counted running than slots", kv: kv(6, 0), most: 4, want: 900},
		{name: "limit unknown", kv: kv(6, 0), most: 0, want: 0},
		{name: "run unknown", kv: KVSpace{Total: 100000, Held: 600, Holders: 6}, most: 4, want: 0},
		{name: "nothing running", kv: KVSpace{Total: 100000, Waiting: 6, RunMs: 1200}, most: 4, want: 0},
		// The queue's compute (20,000 tokens, over a second) outlasts the
		// slot wait: nothing more.
		{name: "a queue longer than the wait", kv: kv(4, 0), most: 4, queued: 20000, want: 0},
		// A full memory of 400 blocks, 100 a running request: the
		// request's 10 blocks free at the first end (BlockWait's 300 ms),
		// as does its slot: nothing more. With two waiting ahead (10
		// blocks each) the blocks still free at the first end, which
		// admits one of them; the slot comes at the third end (900 ms),
		// 600 past the blocks.
		{name: "within the wait for blocks", kv: KVSpace{Total: 400, Held: 400, Holders: 4, RunMs: 1200}, most: 4, want: 0},
		{name: "past the wait for blocks", kv: KVSpace{Total: 400, Held: 400, Holders: 4, Queued: 20, Waiting: 2, RunMs: 1200}, most: 4, want: 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tm
			m.MaxRunning = tt.most
			c := Candidate{Cost: 10, KV: tt.kv, Timing: m, QueuedTokens: tt.queued, QueuedAttn: float64(tt.queued) * float64(tt.queued)}
			cands := []Candidate{c}
			SlotWait{}.Add(cands, req, Params{})
			if got := cands[0].Cost - 10; math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("added %v, want %v", got, tt.want)
			}
			if c.RunSlotWaitMs() == 0 && math.Float64bits(cands[0].Cost) != math.Float64bits(10) {
				t.Errorf("cost %v changed with a slot free", cands[0].Cost)
			}
		})
	}
}
