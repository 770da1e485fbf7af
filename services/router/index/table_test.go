package index

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// checkTable compares a table with the map it should equal.
func checkTable(t *testing.T, tb *table[uint32], want map[uint64]uint32) {
	t.Helper()
	if tb.len() != len(want) {
		t.Fatalf("len %d, want %d", tb.len(), len(want))
	}
	for k, v := range want {
		if got, ok := tb.get(k); !ok || got != v {
			t.Fatalf("get(%d) = %d, %v; want %d", k, got, ok, v)
		}
	}
	n := 0
	tb.each(func(k uint64, v uint32) {
		n++
		if w, ok := want[k]; !ok || w != v {
			t.Fatalf("each gave %d=%d, want %d (present %v)", k, v, w, ok)
		}
	})
	if n != len(want) {
		t.Fatalf("each gave %d entries, want %d", n, len(want))
	}
	checkGetAll(t, tb, want)
}

// checkGetAll compares getAll with get, in batches of every size up to
// batch, over the table's keys, keys next to them (absent, mostly) and the
// zero key.
func checkGetAll(t *testing.T, tb *table[uint32], want map[uint64]uint32) {
	t.Helper()
	keys := []uint64{0}
	for k := range want {
		keys = append(keys, k, k+1, k^1<<40)
	}
	var vals [batch]uint32
	var oks [batch]bool
	for size := 1; len(keys) > 0; size = size%batch + 1 {
		b := keys[:min(size, len(keys))]
		keys = keys[len(b):]
		tb.getAll(b, vals[:], oks[:])
		for j, k := range b {
			if v, ok := tb.get(k); vals[j] != v || oks[j] != ok {
				t.Fatalf("getAll: key %d = %d, %v; get says %d, %v", k, vals[j], oks[j], v, ok)
			}
		}
	}
}

// applyOps runs a byte string as table operations (set, delete, get) on
// keys from a small space, so that probe runs collide, wrap and shift.
func applyOps(t *testing.T, ops []byte, keySpace uint64) {
	tb := &table[uint32]{}
	want := map[uint64]uint32{}
	for len(ops) >= 5 {
		op, k, v := ops[0]%6, uint64(binary.LittleEndian.Uint16(ops[1:3]))%keySpace, uint32(binary.LittleEndian.Uint16(ops[3:5]))
		ops = ops[5:]
		switch op {
		case 0, 1:
			tb.set(k, v)
			want[k] = v
		case 2:
			tb.del(k)
			delete(want, k)
		case 3:
			got, ok := tb.get(k)
			if w, wok := want[k]; ok != wok || got != w {
				t.Fatalf("get(%d) = %d, %v; want %d, %v", k, got, ok, w, wok)
			}
		case 4:
			// refOrAdd adds when absent and gives the value in place
			// either way (changed through it here).
			w, present := want[k]
			p, added := tb.refOrAdd(k, v)
			if added == present || !added && *p != w || added && *p != v {
				t.Fatalf("refOrAdd(%d, %d) = %d, %v; had %d, %v", k, v, *p, added, w, present)
			}
			*p = v ^ 0x5a5a
			want[k] = v ^ 0x5a5a
		case 5:
			// find, then delFound where it found it.
			p, sh, i := tb.find(k)
			if w, wok := want[k]; (p != nil) != wok || wok && *p != w {
				t.Fatalf("find(%d) = %v; want %d, %v", k, p, w, wok)
			}
			if p != nil {
				tb.delFound(k, sh, i)
				delete(want, k)
			}
		}
	}
	checkTable(t, tb, want)
}

func TestTableMatchesMap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      int
		keySpace uint64
	}{
		{"few keys, much churn", 20_000, 50},
		{"growth past many shards", 200_000, 1 << 16},
		{"zero key among others", 2_000, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.ops)))
			ops := make([]byte, 5*tc.ops)
			for i := range ops {
				ops[i] = byte(r.Uint32())
			}
			applyOps(t, ops, tc.keySpace)
		})
	}
}

// TestTableShardCollisions puts every key in one shard, so that its probe
// runs are long and wrap around: deletions must keep every other key
// reachable.
func TestTableShardCollisions(t *testing.T) {
	tb := &table[uint32]{}
	want := map[uint64]uint32{}
	var keys []uint64
	for k := uint64(1); len(keys) < 3000; k++ {
		if hashOf(k)>>(64-tableShardBits) == 7 {
			keys = append(keys, k)
		}
	}
	for i, k := range keys {
		tb.set(k, uint32(i))
		want[k] = uint32(i)
	}
	checkTable(t, tb, want)
	for i, k := range keys {
		if i%3 != 0 {
			tb.del(k)
			delete(want, k)
		}
	}
	checkTable(t, tb, want)
	for _, k := range keys {
		tb.del(k)
	}
	checkTable(t, tb, map[uint64]uint32{})
}

func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 0, 5, 0, 2, 1, 0, 0, 0, 3, 1, 0, 0, 0}, uint8(8))
	f.Fuzz(func(t *testing.T, ops []byte, space uint8) {
		applyOps(t, ops, uint64(space)+1)
	})
}

// TestTableRef checks that ref changes a value in place, with values of
// Pending's type, and that a slot of either kind stays 16 bytes (one cache
// line holds four).
func TestTableRef(t *testing.T) {
	tb := &table[splitRef]{}
	for k := uint64(0); k < 5000; k++ {
		tb.set(k, splitRef{w: uint32(k), refs: 1})
	}
	for k := uint64(0); k < 5000; k += 2 {
		tb.ref(k).refs += 10
	}
	if tb.ref(5000) != nil {
		t.Fatal("ref of an absent key is not nil")
	}
	for k := uint64(0); k < 5000; k++ {
		want := splitRef{w: uint32(k), refs: 1}
		if k%2 == 0 {
			want.refs = 11
		}
		if got, ok := tb.get(k); !ok || got != want {
			t.Fatalf("get(%d) = %+v, %v; want %+v", k, got, ok, want)
		}
	}
	if a, b := unsafe.Sizeof(tslot[uint32]{}), unsafe.Sizeof(tslot[splitRef]{}); a != 16 || b != 16 {
		t.Fatalf("slots of %d and %d bytes, want 16", a, b)
	}
}
