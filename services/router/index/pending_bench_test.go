package index

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// pendingLike is what the benchmarks ask of Pending and of its former
// form (pending_split_test.go), timed side by side.
type pendingLike interface {
	Add(id string, w WorkerID, hashes []uint64, now time.Time)
	Release(id string)
	ExtendAll(workers []WorkerID, hashes []uint64, overlaps []int)
}

// BenchmarkPendingBurst times a route decision's use of the predictions
// during a burst: n requests of one 128-block prefix predicted on one
// worker, a decision extending 100 workers over it (the one predicted
// reaches the end), then one more request added and released. The range
// form keeps a range per request (identical ones shared), the former form
// a reference count per block. Thousands of identical requests stay
// predicted when the worker's KV events stop (an eventbus outage: until
// Grace after each ends, or the TTL).
func BenchmarkPendingBurst(b *testing.B) {
	for _, n := range []int{1, 16, 64, 4096} {
		for _, form := range []string{"split", "range"} {
			b.Run(fmt.Sprintf("%s/n=%d", form, n), func(b *testing.B) {
				p, ws, now := newPendingForm(form), benchWorkers(), time.Unix(1, 0)
				h := make([]uint64, 128)
				for i := range h {
					h[i] = uint64(i+1) * 0x9e3779b97f4a7c15
				}
				for i := range n {
					p.Add(strconv.Itoa(i), ws[7], h, now)
				}
				timeExtendAll(b, p, ws, h, func() {
					p.Add("x", ws[7], h, now)
					p.Release("x")
				})
			})
		}
	}
}

// newPendingForm is an empty set of the named form ("split" or "range").
func newPendingForm(form string) pendingLike {
	if form == "split" {
		return newSplitPending(time.Minute)
	}
	return NewPending(time.Minute)
}

// benchWorkers are the 100 workers a benchmark's decision extends.
func benchWorkers() []WorkerID {
	ws := make([]WorkerID, 100)
	for i := range ws {
		ws[i] = WorkerID{Instance: uint64(i + 1)}
	}
	return ws
}

// timeExtendAll times a decision's ExtendAll over ws for h, whose first
// 128 blocks are predicted on ws[7], then each op's own work.
func timeExtendAll(b *testing.B, p pendingLike, ws []WorkerID, h []uint64, then func()) {
	ov := make([]int, len(ws))
	b.ResetTimer()
	for range b.N {
		clear(ov)
		p.ExtendAll(ws, h, ov)
		if ov[7] != 128 {
			b.Fatal(ov[7])
		}
		then()
	}
}

type confirmLike interface {
	pendingLike
	Confirm(w WorkerID, hashes []uint64)
}

// BenchmarkPendingConfirm times Confirm of a 16-block event on a worker
// with n requests of other prefixes (128 blocks each) predicted: the range
// form probes each request's set of its blocks (n probes a hash), the
// former form one table entry a hash. A request confirmed whole leaves the
// worker's list, so n is the requests still in prefill there.
func BenchmarkPendingConfirm(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		for _, form := range []string{"split", "range"} {
			b.Run(fmt.Sprintf("%s/n=%d", form, n), func(b *testing.B) {
				var p confirmLike
				if form == "split" {
					p = newSplitPending(time.Minute)
				} else {
					p = NewPending(time.Minute)
				}
				w := WorkerID{Instance: 7}
				now := time.Unix(1, 0)
				for i := range n {
					h := make([]uint64, 128)
					for j := range h {
						h[j] = uint64(i*1000+j+1) * 0x9e3779b97f4a7c15
					}
					p.Add(strconv.Itoa(i), w, h, now)
				}
				ev := make([]uint64, 16)
				for j := range ev {
					ev[j] = uint64(999_000+j) * 0xff51afd7ed558ccd
				}
				b.ResetTimer()
				for range b.N {
					p.Confirm(w, ev)
				}
			})
		}
	}
}

// BenchmarkPendingBranches is BenchmarkPendingBurst with requests that
// share the 128-block prefix and each end in 8 blocks of its own (one
// system prompt, different questions): no two ranges are the same, so a
// lookup in the prefix finds all n.
func BenchmarkPendingBranches(b *testing.B) {
	for _, n := range []int{16, 256, 4096} {
		for _, form := range []string{"split", "range"} {
			b.Run(fmt.Sprintf("%s/n=%d", form, n), func(b *testing.B) {
				p, ws, now := newPendingForm(form), benchWorkers(), time.Unix(1, 0)
				chain := func(branch int) []uint64 {
					h := make([]uint64, 136)
					parent := uint64(0x9e3779b97f4a7c15)
					for i := range h {
						tok := uint64(0)
						if i >= 128 {
							tok = uint64(branch + 1)
						}
						parent = (parent^tok)*0xff51afd7ed558ccd + 0xc4ceb9fe1a85ec53
						parent ^= parent >> 29
						h[i] = parent
					}
					return h
				}
				for i := range n {
					p.Add(strconv.Itoa(i), ws[7], chain(i), now)
				}
				timeExtendAll(b, p, ws, chain(n), func() {})
			})
		}
	}
}
