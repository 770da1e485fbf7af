package index

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOverlapsMatchOld compares AppendOverlaps with the lookup it replaced
// (oldAppendOverlaps, kept below as it was at 16e6d91), to the order of its
// results, over random indexes: workers hold prefixes of a few long chains
// (deep walks that one worker ends alone, past every batch boundary), with
// holes, shared prefixes held by a few workers (lists) or by many (bitsets),
// and workers that leave or clear (retired slots, reclaimed lazily or at
// once). The route decision reads its overlaps in this order.
func TestOverlapsMatchOld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		lazy    bool
	}{{"few workers", 6, false}, {"many workers", 150, false}, {"many workers, lazy reclaim", 150, true}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lazy {
				defer func(n, k int) { reclaimAtOnce, reclaimShards = n, k }(reclaimAtOnce, reclaimShards)
				reclaimAtOnce, reclaimShards = -1, 97
			}
			r := rand.New(rand.NewPCG(uint64(tc.workers), 7))
			x := New()
			chains := make([][]uint64, 8)
			for c := range chains {
				chains[c] = make([]uint64, 300)
				for i := range chains[c] {
					// Chains share their first blocks by pairs, so that
					// prefixes have several holders.
					chains[c][i] = uint64(c/2)<<32 | uint64(i) + 1
					if i >= 20 {
						chains[c][i] = uint64(c)<<40 | uint64(i) + 1
					}
				}
			}
			worker := func() WorkerID { return WorkerID{Instance: uint64(r.IntN(tc.workers) + 1), DPRank: uint32(r.IntN(2))} }
			steps := 6000
			if testing.Short() {
				steps = 1500
			}
			checked := 0
			for step := range steps {
				w := worker()
				c := chains[r.IntN(len(chains))]
				switch op := r.IntN(24); {
				case op < 8:
					x.Store(w, c[:1+r.IntN(len(c))])
				case op < 13:
					// A hole.
					i := r.IntN(len(c))
					x.Remove(w, c[i:min(i+1+r.IntN(3), len(c))])
				case op == 13 && step%7 == 0:
					x.Apply(w, 0, func(tx Tx) { tx.Clear() })
				case op == 14 && step%5 == 0:
					x.RemoveWorker(w)
				default:
					q := c[:1+r.IntN(len(c))]
					if r.IntN(4) == 0 {
						// A request that leaves the chain.
						q = append(slices.Clone(q), uint64(step)<<48|1)
					}
					got := x.AppendOverlaps(nil, q)
					want := x.oldAppendOverlaps(nil, q)
					if d := cmp.Diff(want, got); d != "" {
						t.Fatalf("step %d: AppendOverlaps of %d blocks (-old +new):\n%s", step, len(q), d)
					}
					checkGrouped(t, x, q, got, []WorkerID{w})
					checked++
				}
			}
			if checked < steps/6 {
				t.Fatalf("only %d lookups compared", checked)
			}
		})
	}
}

// TestOverlapsLoneWorkerThroughShared walks one worker alone through blocks
// that others hold too, as lists and as bitsets, to a hole of its own there.
func TestOverlapsLoneWorkerThroughShared(t *testing.T) {
	req := make([]uint64, 200)
	for i := range req {
		req[i] = uint64(i) + 1
	}
	for _, others := range []int{3, maxList + 8} {
		x := New()
		lone := WorkerID{Instance: 1}
		x.Store(lone, req)
		x.Remove(lone, req[150:151])
		for i := range others {
			x.Store(WorkerID{Instance: uint64(i + 2)}, req[10:])
		}
		want := []Overlap{{Worker: lone, Blocks: 150}}
		for _, q := range [][]uint64{req, req[:151], req[:149]} {
			got := x.AppendOverlaps(nil, q)
			if len(q) < 150 {
				want[0].Blocks = len(q)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("%d others, %d blocks (-want +got):\n%s", others, len(q), d)
			}
			if d := cmp.Diff(x.oldAppendOverlaps(nil, q), got); d != "" {
				t.Fatalf("%d others, %d blocks (-old +new):\n%s", others, len(q), d)
			}
		}
	}
}

// oldAppendOverlaps is AppendOverlaps as it was before it followed a
// lone worker by itself.
func (x *Index) oldAppendOverlaps(dst []Overlap, hashes []uint64) []Overlap {
	if len(hashes) == 0 {
		return dst
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	// A request whose first block nobody holds ends at depth 0, in the
	// first batch (a probe of that block alone first was a round trip to
	// memory before the batch's).
	//
	// active is the bitset of slots holding every block so far; at each
	// block, the slots that fall out are reported with the depth reached.
	words := (len(x.workers) + 63) / 64
	var buf [2 * 32]uint64
	var active, next []uint64
	if words <= 32 {
		active, next = buf[:words], buf[32:32+words]
	} else {
		active, next = make([]uint64, words), make([]uint64, words)
	}
	for i := range active {
		active[i] = ^uint64(0)
		if i < len(x.dead) {
			active[i] = ^x.dead[i] // retired slots hold nothing
		}
	}
	// Blocks are looked up in batches whose misses overlap; a batch is
	// one round trip to memory, whatever its size up to what the core
	// keeps in flight. They double from firstBatch, so that a request
	// matched for d blocks takes about log2(d/firstBatch) round trips
	// and looks up at most twice the blocks it needed (or firstBatch).
	var vals [batch]uint32
	var oks [batch]bool
	from, to, size := 0, 0, firstBatch
	for depth := range hashes {
		if depth == to {
			from, to = depth, min(depth+size, len(hashes))
			x.holders.getAll(hashes[from:to], vals[:], oks[:])
			size = min(2*size, batch)
		}
		if oks[depth-from] {
			x.intersect(next, active, vals[depth-from])
		} else {
			clearWords(next)
		}
		live := false
		for wi := range active {
			gone := active[wi] &^ next[wi]
			if depth > 0 {
				for gone != 0 {
					s := wi*64 + bits.TrailingZeros64(gone)
					dst = append(dst, Overlap{Worker: x.ids[s], Blocks: depth})
					gone &= gone - 1
				}
			}
			if next[wi] != 0 {
				live = true
			}
		}
		active, next = next, active
		if !live {
			return dst
		}
	}
	for wi, word := range active {
		for word != 0 {
			s := wi*64 + bits.TrailingZeros64(word)
			dst = append(dst, Overlap{Worker: x.ids[s], Blocks: len(hashes)})
			word &= word - 1
		}
	}
	return dst
}
