package worker

import (
	"errors"
	"slices"
	"testing"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

func stored(hs ...uint64) *workerv1.KvCacheEvent {
	bs := make([]*workerv1.KvBlock, len(hs))
	for i, h := range hs {
		bs[i] = &workerv1.KvBlock{SequenceHash: h}
	}
	return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Blocks: bs}}}
}

func removed(hs ...uint64) *workerv1.KvCacheEvent {
	return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: hs}}}
}

func cleared() *workerv1.KvCacheEvent {
	return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}
}

func stateOf(x *KVIndex, rank uint32) (uint64, []uint64) {
	for _, r := range x.State() {
		if r.DPRank == rank {
			slices.Sort(r.Hashes)
			return r.EventID, r.Hashes
		}
	}
	return 0, nil
}

// TestKVIndexState applies events and reads the state they leave, per rank.
func TestKVIndexState(t *testing.T) {
	tests := []struct {
		name    string
		batches []*workerv1.KvEventBatch
		rank    uint32
		wantID  uint64
		want    []uint64
	}{
		{"stores", []*workerv1.KvEventBatch{{Events: []*workerv1.KvCacheEvent{stored(1, 2), stored(3)}}}, 0, 2, []uint64{1, 2, 3}},
		{"remove", []*workerv1.KvEventBatch{{Events: []*workerv1.KvCacheEvent{stored(1, 2, 3), removed(2, 9)}}}, 0, 2, []uint64{1, 3}},
		{"clear then store", []*workerv1.KvEventBatch{{Events: []*workerv1.KvCacheEvent{stored(1, 2), cleared(), stored(5)}}}, 0, 3, []uint64{5}},
		{"engine ids kept", []*workerv1.KvEventBatch{{FirstEventId: 1, Events: []*workerv1.KvCacheEvent{stored(1)}}, {FirstEventId: 2, Events: []*workerv1.KvCacheEvent{stored(2)}}}, 0, 2, []uint64{1, 2}},
		{"ranks apart", []*workerv1.KvEventBatch{{DpRank: 1, Events: []*workerv1.KvCacheEvent{stored(7)}}, {Events: []*workerv1.KvCacheEvent{stored(1), stored(2)}}}, 1, 1, []uint64{7}},
		{"unknown rank", nil, 3, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := NewKVIndex(8)
			for _, b := range tc.batches {
				x.Apply(b)
			}
			id, got := stateOf(x, tc.rank)
			if id != tc.wantID || !slices.Equal(got, tc.want) {
				t.Fatalf("state = %d %v; want %d %v", id, got, tc.wantID, tc.want)
			}
		})
	}
}

// TestKVIndexRing reads the ring from ids in and out of its range, after it
// wrapped, and after the engine's ids jumped.
func TestKVIndexRing(t *testing.T) {
	x := NewKVIndex(4)
	for i := range 10 {
		x.Apply(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{stored(uint64(i + 1))}})
	}
	tests := []struct {
		from    uint64
		max     int
		wantIDs []uint64 // the stored hash of each event returned (= its id here)
		err     error
		held    uint64 // what a backlog from there still has to publish
	}{
		{from: 7, wantIDs: []uint64{7, 8, 9, 10}, held: 4},
		{from: 9, wantIDs: []uint64{9, 10}, held: 2},
		{from: 8, max: 2, wantIDs: []uint64{8, 9}, held: 3},
		{from: 11, wantIDs: nil, held: 0},
		// Overrun: backfill goes on from the oldest held, 7..10.
		{from: 6, err: ErrOutOfRange, held: 4},
		{from: 1, err: ErrOutOfRange, held: 4},
	}
	for _, tc := range tests {
		b, last, err := x.Events(0, tc.from, tc.max)
		if !errors.Is(err, tc.err) {
			t.Fatalf("Events(%d): %v; want %v", tc.from, err, tc.err)
		}
		if last != 10 {
			t.Fatalf("Events(%d): last %d; want 10", tc.from, last)
		}
		// held is KVEventsWaiting's count of a backlog: what the ring
		// holds from there on, or from its oldest event when it no longer
		// holds from (where backfill goes on).
		if got := x.held(0, tc.from); got != tc.held {
			t.Errorf("held(%d) = %d; want %d", tc.from, got, tc.held)
		}
		if err != nil {
			continue
		}
		var got []uint64
		for _, ev := range b.Events {
			got = append(got, ev.GetStored().GetBlocks()[0].GetSequenceHash())
		}
		if b.FirstEventId != tc.from || !slices.Equal(got, tc.wantIDs) {
			t.Fatalf("Events(%d) = first %d %v; want %v", tc.from, b.FirstEventId, got, tc.wantIDs)
		}
	}
	if got := x.oldest(0); got != 7 {
		t.Fatalf("oldest = %d; want 7", got)
	}
	// An engine that restarted its ids: the ring starts over there.
	if !x.Apply(&workerv1.KvEventBatch{FirstEventId: 3, Events: []*workerv1.KvCacheEvent{cleared()}}) {
		t.Fatal("a jump back in ids was not reported")
	}
	if _, _, err := x.Events(0, 2, 0); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("before the restart: %v; want out of range", err)
	}
	if b, last, err := x.Events(0, 3, 0); err != nil || last != 3 || len(b.Events) != 1 {
		t.Fatalf("after the restart: %v %d %v", b, last, err)
	}
	if id, hs := stateOf(x, 0); id != 3 || len(hs) != 0 {
		t.Fatalf("state after clear = %d %v", id, hs)
	}
}

// FuzzKVIndex checks that the state always equals the events from the ring
// replayed onto the state at the ring's start, for any sequence of events.
func FuzzKVIndex(f *testing.F) {
	f.Add([]byte{1, 2, 3, 0x81, 0x40, 5}, uint8(3))
	f.Fuzz(func(t *testing.T, ops []byte, ring uint8) {
		x := NewKVIndex(int(ring%16) + 1)
		want := map[uint64]bool{}
		for _, op := range ops {
			h := uint64(op & 0x1f)
			var ev *workerv1.KvCacheEvent
			switch {
			case op&0xe0 == 0x40:
				ev = cleared()
				clear(want)
			case op&0x80 != 0:
				ev = removed(h)
				delete(want, h)
			default:
				ev = stored(h)
				want[h] = true
			}
			x.Apply(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{ev}})
		}
		id, got := stateOf(x, 0)
		if id != uint64(len(ops)) || len(got) != len(want) {
			t.Fatalf("state %d %v; want id %d, %d blocks", id, got, len(ops), len(want))
		}
		for _, h := range got {
			if !want[h] {
				t.Fatalf("state holds %d; want %v", h, want)
			}
		}
		if len(ops) > 0 {
			oldest := uint64(len(ops)) - uint64(min(len(ops), int(ring%16)+1)) + 1
			b, _, err := x.Events(0, oldest, 0)
			if err != nil || uint64(len(b.Events)) != uint64(len(ops))-oldest+1 {
				t.Fatalf("ring from %d: %v %v", oldest, b, err)
			}
		}
	})
}

// TestKVIndexEventsPerCallLimit: one GetKvEvents answer holds at most
// maxEventsPerCall events, whatever max asks (0 is the limit).
func TestKVIndexEventsPerCallLimit(t *testing.T) {
	x := NewKVIndex(2 * maxEventsPerCall)
	for i := range maxEventsPerCall + 10 {
		x.Apply(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Removed{
			Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{uint64(i)}}}}}})
	}
	for _, tc := range []struct{ max, want int }{{0, maxEventsPerCall}, {maxEventsPerCall + 5, maxEventsPerCall}, {maxEventsPerCall, maxEventsPerCall}, {7, 7}} {
		b, last, err := x.Events(0, 1, tc.max)
		if err != nil || last != maxEventsPerCall+10 || len(b.Events) != tc.want {
			t.Fatalf("Events(max %d) = %d events, last %d, %v; want %d", tc.max, len(b.GetEvents()), last, err, tc.want)
		}
	}
}
