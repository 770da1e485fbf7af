package replay

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

func TestChainFloor(t *testing.T) {
	cfg := smallConfig()
	cfg.RateScale = 1
	ec := cfg.Engine
	m := ec.Timing()
	_, perTokenMs := cheapestPrefill(m, cheapestDecode(m))
	perBlock := time.Duration(perTokenMs * float64(ec.BlockSize) * float64(time.Millisecond))
	// Hash ids of 512 tokens: a turn is the one before and 512 more.
	turn := func(at time.Duration, ids ...uint64) Request {
		return Request{Arrival: at, InputLength: 512 * len(ids), OutputLength: 8, HashIDs: ids}
	}
	cold := func(r Request) time.Duration { return prefillTime(r.InputLength, ec) }
	tests := []struct {
		name  string
		trace []Request
		want  []time.Duration
	}{
		{
			name:  "nothing shared: each computes its prompt",
			trace: []Request{turn(0, 1, 2), turn(time.Millisecond, 3, 4, 5)},
			want:  []time.Duration{cold(turn(0, 1, 2)), cold(turn(0, 3, 4, 5))},
		},
		{
			// The first turn's 4 x 32 blocks exist long before the second
			// comes: it computes its own 512 tokens, as on the floor.
			name:  "a turn long after the one before: the cached floor",
			trace: []Request{turn(0, 1, 2, 3, 4), turn(10*time.Second, 1, 2, 3, 4, 5)},
			want:  []time.Duration{cold(turn(0, 1, 2, 3, 4)), prefillTime(512, ec)},
		},
		{
			// A nanosecond later: the second waits for the first's i
			// blocks (at the cheapest rate, at best: i x perBlock from the
			// first's arrival) and computes the rest of its 2560 tokens,
			// for the best i of 0..128.
			name:  "a turn right after the one before waits for it",
			trace: []Request{turn(0, 1, 2, 3, 4), turn(1, 1, 2, 3, 4, 5)},
			want:  []time.Duration{cold(turn(0, 1, 2, 3, 4)), bestWait(128, ec.BlockSize, 2560, perBlock, ec) - 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chainFloors(tt.trace, cfg)
			for i := range tt.want {
				if got[i] != tt.want[i] {
					t.Fatalf("request %d: %v, want %v (all %v)", i, got[i], tt.want[i], got)
				}
			}
			// Out of order in the slice, the same bound per request:
			// earlier is earlier in arrival.
			rev := slices.Clone(tt.trace)
			slices.Reverse(rev)
			back := chainFloors(rev, cfg)
			slices.Reverse(back)
			if !slices.Equal(back, got) {
				t.Fatalf("reversed trace: %v, want %v", back, got)
			}
		})
	}
	// A burst of a conversation's turns, each 512 tokens more than the
	// last: the floor finds each one's predecessor cached, the chain
	// floor cannot, and is never below the floor.
	var burst []Request
	var ids []uint64
	for i := range 8 {
		ids = append(ids, uint64(100+i))
		burst = append(burst, turn(time.Duration(i)*time.Millisecond, append([]uint64{1, 2, 3, 4, 5, 6, 7, 8}, ids...)...))
	}
	chain, floor := ChainFloor(burst, cfg), ComputeBounds(burst, cfg).FloorTTFT
	for i := range chain {
		if chain[i] < floor[i] {
			t.Fatalf("chain floor %v below the cached floor %v", chain, floor)
		}
	}
	if chain[1] <= floor[1] {
		t.Fatalf("chain floor p90 %v, cached floor %v: want the wait for each turn's predecessor to show", chain[1], floor[1])
	}
}

// bestWait is the least over i = 0..blocks of waiting i x perBlock for i
// blocks of bs tokens and then prefilling the rest of n tokens cold.
func bestWait(blocks, bs, n int, perBlock time.Duration, ec simengine.Config) time.Duration {
	best := prefillTime(n, ec)
	for i := 1; i <= blocks; i++ {
		best = min(best, time.Duration(i)*perBlock+prefillTime(n-i*bs, ec))
	}
	return best
}
