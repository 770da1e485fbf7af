package kvhash

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
	"pgregory.net/rapid"
)

// seq returns the tokens from..to inclusive.
func seq(from, to uint32) []uint32 {
	var out []uint32
	for t := from; t <= to; t++ {
		out = append(out, t)
	}
	return out
}

// TestGoldenLocalHash pins local hashes to values computed with the reference
// C implementation (libxxhash 0.8.1, XXH3_64bits_withSeed, seed 1337) over the
// little-endian uint32 encoding, so a change of seed, endianness or algorithm
// fails here.
func TestGoldenLocalHash(t *testing.T) {
	big := make([]uint32, 16)
	for i := range big {
		big[i] = 151643 - uint32(i)*7
	}
	tests := []struct {
		name   string
		tokens []uint32
		want   uint64
	}{
		{"empty", nil, 0xd1f3e77444430ab9},
		{"1..16", seq(1, 16), 0xea06fc71a5ee6e88},
		{"zeros16", make([]uint32, 16), 0x4ca6490661395090},
		{"1..64", seq(1, 64), 0xf617bf3b93a1d900},
		{"qwen-range", big, 0xfd1c17532c57254a},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LocalHash(tt.tokens); got != tt.want {
				t.Errorf("LocalHash = %#x, want %#x", got, tt.want)
			}
			if got := localHashPortable(tt.tokens); got != tt.want {
				t.Errorf("localHashPortable = %#x, want %#x", got, tt.want)
			}
		})
	}
}

// TestGoldenHashes pins a three-block chain, computed with the reference C
// implementation.
func TestGoldenHashes(t *testing.T) {
	want := []Block{
		{Local: 0xea06fc71a5ee6e88, Sequence: 0xea06fc71a5ee6e88},
		{Local: 0x1fbf39bd106be0b5, Sequence: 0xad01835a37dd294c},
		{Local: 0xa8562fe663b7a097, Sequence: 0x0d55e56c2bccbd1a},
	}
	// 50 tokens: three full blocks and a partial one that must be ignored.
	got := Hashes(seq(1, 50), 16, nil)
	if !slices.Equal(got, want) {
		t.Errorf("Hashes = %#v, want %#v", got, want)
	}
}

func TestValidateBlockSize(t *testing.T) {
	tests := []struct {
		n       int
		wantErr bool
	}{{-1, true}, {0, true}, {1, false}, {16, false}, {1 << 20, false}}
	for _, tt := range tests {
		err := ValidateBlockSize(tt.n)
		if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrInvalidBlockSize)) {
			t.Errorf("ValidateBlockSize(%d) = %v, wantErr %v", tt.n, err, tt.wantErr)
		}
	}
}

func TestInvalidBlockSizePanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"Hashes", func() { Hashes(seq(1, 4), 0, nil) }},
		{"NewHasher", func() { NewHasher(-3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tt.f()
		})
	}
}

func TestHashesAppendsToDst(t *testing.T) {
	prefix := []Block{{Local: 1, Sequence: 2}}
	got := Hashes(seq(1, 32), 16, prefix)
	if len(got) != 3 || got[0] != prefix[0] {
		t.Fatalf("Hashes did not append after dst: %v", got)
	}
	if got[1] != Hashes(seq(1, 16), 16, nil)[0] {
		t.Error("the chain must not start from dst's last block")
	}
}

// genTokens draws a token sequence in a small alphabet, so that equal blocks
// happen.
func genTokens(t *rapid.T, label string) []uint32 {
	return rapid.SliceOfN(rapid.Uint32Range(0, 7), 0, 200).Draw(t, label)
}

// manual recomputes block identities with the portable encoder and the
// definition, independently of Hashes.
func manual(tokens []uint32, bs int) []Block {
	var out []Block
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		l := localHashPortable(tokens[i*bs : (i+1)*bs])
		s := l
		if i > 0 {
			s = SequenceHash(out[i-1].Sequence, l)
		}
		out = append(out, Block{Local: l, Sequence: s})
	}
	return out
}

func TestProperties(t *testing.T) {
	tests := []struct {
		name string
		prop func(*rapid.T)
	}{
		{"PrefixStable", func(t *rapid.T) {
			tokens := genTokens(t, "tokens")
			bs := rapid.IntRange(1, 20).Draw(t, "bs")
			cut := rapid.IntRange(0, len(tokens)).Draw(t, "cut")
			full := Hashes(tokens, bs, nil)
			pre := Hashes(tokens[:cut], bs, nil)
			if !slices.Equal(full[:len(pre)], pre) {
				t.Fatalf("hashes of a prefix are not a prefix of the hashes")
			}
		}},
		{"Chaining", func(t *rapid.T) {
			bs := rapid.IntRange(1, 20).Draw(t, "bs")
			tokens := rapid.SliceOfN(rapid.Uint32(), bs, 200).Draw(t, "tokens")
			pos := rapid.IntRange(0, len(tokens)/bs*bs-1).Draw(t, "pos")
			changed := slices.Clone(tokens)
			changed[pos] ^= rapid.Uint32Range(1, 1<<31).Draw(t, "xor")
			a, b := Hashes(tokens, bs, nil), Hashes(changed, bs, nil)
			blk := pos / bs
			for i := range a {
				if i < blk && a[i] != b[i] {
					t.Fatalf("block %d before the change at block %d changed", i, blk)
				}
				if i >= blk && a[i].Sequence == b[i].Sequence {
					t.Fatalf("block %d at or after the change at block %d kept its sequence hash", i, blk)
				}
			}
			if a[blk].Local == b[blk].Local {
				t.Fatalf("the changed block kept its local hash")
			}
		}},
		{"PartialBlockIgnored", func(t *rapid.T) {
			bs := rapid.IntRange(1, 20).Draw(t, "bs")
			tokens := genTokens(t, "tokens")
			extra := rapid.SliceOfN(rapid.Uint32(), 0, bs-1).Draw(t, "extra")
			full := tokens[:len(tokens)/bs*bs]
			got := Hashes(append(slices.Clone(full), extra...), bs, nil)
			if !slices.Equal(got, Hashes(full, bs, nil)) || len(got) != len(full)/bs {
				t.Fatalf("a partial block changed the hashes")
			}
		}},
		{"MatchesManual", func(t *rapid.T) {
			bs := rapid.IntRange(1, 300).Draw(t, "bs")
			tokens := rapid.SliceOfN(rapid.Uint32(), 0, 700).Draw(t, "tokens")
			if got, want := Hashes(tokens, bs, nil), manual(tokens, bs); !slices.Equal(got, want) {
				t.Fatalf("Hashes = %v, manual = %v", got, want)
			}
		}},
		{"HasherMatchesHashes", func(t *rapid.T) {
			bs := rapid.IntRange(1, 20).Draw(t, "bs")
			tokens := genTokens(t, "tokens")
			h := NewHasher(bs)
			var got []Block
			for rest := tokens; len(rest) > 0; {
				k := rapid.IntRange(1, len(rest)).Draw(t, "chunk")
				got = h.Append(rest[:k], got)
				rest = rest[k:]
			}
			want := Hashes(tokens, bs, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("Hasher = %v, Hashes = %v", got, want)
			}
			if h.Blocks() != len(want) || h.Pending() != len(tokens)%bs {
				t.Fatalf("Blocks/Pending = %d/%d, want %d/%d", h.Blocks(), h.Pending(), len(want), len(tokens)%bs)
			}
			last, ok := h.Last()
			if ok != (len(want) > 0) || (ok && last != want[len(want)-1].Sequence) {
				t.Fatalf("Last = %#x, %v", last, ok)
			}
			h.Reset()
			if got := h.Append(tokens, nil); !slices.Equal(got, want) {
				t.Fatalf("after Reset, Hasher = %v, want %v", got, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { rapid.Check(t, tt.prop) })
	}
}

func TestHashesAllocations(t *testing.T) {
	tokens := seq(1, 64*16)
	dst := make([]Block, 0, 16)
	if n := testing.AllocsPerRun(100, func() { dst = Hashes(tokens, 64, dst[:0]) }); n != 0 {
		t.Errorf("Hashes with a reused dst allocates %v times per run", n)
	}
	h := NewHasher(16)
	if n := testing.AllocsPerRun(100, func() { dst = h.Append(tokens[:7], dst[:0]) }); n != 0 {
		t.Errorf("Hasher.Append with a reused dst allocates %v times per run", n)
	}
}

func BenchmarkHashes(b *testing.B) {
	for _, bs := range []int{16, 64} {
		b.Run(map[int]string{16: "block16", 64: "block64"}[bs], func(b *testing.B) {
			const blocks = 128
			tokens := make([]uint32, bs*blocks)
			for i := range tokens {
				tokens[i] = uint32(i*7919) % 150000
			}
			dst := make([]Block, 0, blocks)
			b.SetBytes(int64(4 * len(tokens)))
			b.ReportAllocs()
			for b.Loop() {
				dst = Hashes(tokens, bs, dst[:0])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
		})
	}
}

func BenchmarkHasherAppendToken(b *testing.B) {
	h := NewHasher(16)
	dst := make([]Block, 0, 1)
	tok := []uint32{42}
	b.ReportAllocs()
	for b.Loop() {
		dst = h.Append(tok, dst[:0])
	}
}

func TestSequenceHashMatchesTheLibrary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parent, local := rapid.Uint64().Draw(t, "parent"), rapid.Uint64().Draw(t, "local")
		if got, want := SequenceHash(parent, local), sequenceHashReference(parent, local); got != want {
			t.Fatalf("SequenceHash(%x, %x) = %x, want %x", parent, local, got, want)
		}
	})
}

func TestLongMatchesTheLibrary(t *testing.T) {
	// Every length around and inside the precomputed-secret path, including
	// its bounds and the lengths on either side of them.
	for n := longMin - 2; n <= longMax+2; n++ {
		tokens := make([]uint32, n)
		for i := range tokens {
			tokens[i] = uint32(i*2654435761) ^ uint32(n)
		}
		if got, want := LocalHash(tokens), localHashPortable(tokens); got != want {
			t.Fatalf("LocalHash of %d tokens = %x, want %x", n, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		tokens := rapid.SliceOfN(rapid.Uint32(), longMin, longMax).Draw(t, "tokens")
		if got, want := localHashLong(tokens), localHashPortable(tokens); got != want {
			t.Fatalf("localHashLong of %d tokens = %x, want %x", len(tokens), got, want)
		}
	})
}

func TestAccumulateMatchesGeneric(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tokens := rapid.SliceOfN(rapid.Uint32(), longMin, longMax).Draw(t, "tokens")
		n := len(tokens)
		var start [8]uint64
		for i := range start {
			start[i] = rapid.Uint64().Draw(t, "acc")
		}
		a, g := start, start
		accumulate(&a, &tokens[0], (4*n-1)/64, &tokens[n-16])
		accumulateGeneric(&g, &tokens[0], (4*n-1)/64, &tokens[n-16])
		if a != g {
			t.Fatalf("accumulate of %d tokens = %x, generic = %x", n, a, g)
		}
	})
}

// TestSaltedHashes pins the salt's mixing: the first block chains from the
// salt's root (the library's XXH3 of the tag and the salt), later blocks
// chain as before, local hashes stay the tokens' own, an empty salt is
// none, and no sequence hash is shared between two salts or with none.
func TestSaltedHashes(t *testing.T) {
	tokens := make([]uint32, 4*16+5)
	for i := range tokens {
		tokens[i] = uint32(i * 7919)
	}
	plain := Hashes(tokens, 16, nil)
	for _, tc := range []struct {
		name, salt string
	}{
		{"empty is none", ""},
		{"short", "tenant-a"},
		{"other", "tenant-b"},
		{"one byte", "x"},
		{"long", strings.Repeat("salt", 300)},
		{"utf-8", "sël✓"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SaltedHashes(tokens, 16, tc.salt, nil)
			if len(got) != len(plain) {
				t.Fatalf("%d blocks, want %d", len(got), len(plain))
			}
			h := NewSaltedHasher(16, tc.salt)
			inc := h.Append(tokens[:3], nil)
			inc = h.Append(tokens[3:], inc)
			if !slices.Equal(inc, got) {
				t.Fatalf("the salted Hasher gave %v, SaltedHashes %v", inc, got)
			}
			if tc.salt == "" {
				if !slices.Equal(got, plain) {
					t.Fatalf("an empty salt changed the hashes")
				}
				return
			}
			root := xxh3.HashSeed([]byte("switchyard.cache_salt:"+tc.salt), Seed)
			if r := SaltRoot(tc.salt); r != root {
				t.Fatalf("SaltRoot = %x, want %x", r, root)
			}
			if want := sequenceHashReference(root, plain[0].Local); got[0].Sequence != want {
				t.Fatalf("first block %x, want %x", got[0].Sequence, want)
			}
			for i := range got {
				if got[i].Local != plain[i].Local {
					t.Errorf("block %d: local hash changed", i)
				}
				if got[i].Sequence == plain[i].Sequence {
					t.Errorf("block %d: the salted sequence hash is the unsalted one", i)
				}
				if i > 0 && got[i].Sequence != SequenceHash(got[i-1].Sequence, got[i].Local) {
					t.Errorf("block %d does not chain from its parent", i)
				}
			}
			other := SaltedHashes(tokens, 16, tc.salt+"'", nil)
			for i := range got {
				if got[i].Sequence == other[i].Sequence {
					t.Errorf("block %d: two salts share a sequence hash", i)
				}
			}
			h.Reset()
			if again := h.Append(tokens, nil); !slices.Equal(again, got) {
				t.Fatalf("a reset Hasher forgot its salt")
			}
		})
	}
}

// TestLoRAHashes pins the adapter's mixing: every block's sequence hash is
// SequenceHash(SequenceHash(parent, key), local) with the key the library's
// XXH3 of the tag and the name and the first parent the salt's root or 0;
// local hashes stay the tokens' own; the Hasher agrees; and no sequence
// hash is shared between two adapters, an adapter and the base model, or
// an adapter under a salt and the same adapter without.
func TestLoRAHashes(t *testing.T) {
	tokens := make([]uint32, 5*16+3)
	for i := range tokens {
		tokens[i] = uint32(i*104729 + 3)
	}
	plain := Hashes(tokens, 16, nil)
	for _, tc := range []struct {
		name string
		e    Extra
	}{
		{"none", Extra{}},
		{"adapter", Extra{LoRA: "sql-lora"}},
		{"other adapter", Extra{LoRA: "sql-lora2"}},
		{"one byte", Extra{LoRA: "a"}},
		{"adapter and salt", Extra{LoRA: "sql-lora", Salt: "tenant-a"}},
		{"salt only", Extra{Salt: "tenant-a"}},
		{"name equal to a salt", Extra{LoRA: "tenant-a"}},
		{"long", Extra{LoRA: strings.Repeat("lora", 100)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ExtraHashes(tokens, 16, tc.e, nil)
			if len(got) != len(plain) {
				t.Fatalf("%d blocks, want %d", len(got), len(plain))
			}
			h := NewExtraHasher(16, tc.e)
			inc := h.Append(tokens[:7], nil)
			inc = h.Append(tokens[7:], inc)
			if !slices.Equal(inc, got) {
				t.Fatalf("the Hasher gave %v, ExtraHashes %v", inc, got)
			}
			if tc.e.LoRA == "" {
				if want := SaltedHashes(tokens, 16, tc.e.Salt, nil); !slices.Equal(got, want) {
					t.Fatalf("without an adapter ExtraHashes is not SaltedHashes")
				}
				return
			}
			key := xxh3.HashSeed([]byte("switchyard.lora:"+tc.e.LoRA), Seed)
			if k := LoRAKey(tc.e.LoRA); k != key {
				t.Fatalf("LoRAKey = %x, want %x", k, key)
			}
			var parent uint64
			if tc.e.Salt != "" {
				parent = SaltRoot(tc.e.Salt)
			}
			for i := range got {
				if got[i].Local != plain[i].Local {
					t.Errorf("block %d: local hash changed", i)
				}
				if want := sequenceHashReference(sequenceHashReference(parent, key), plain[i].Local); got[i].Sequence != want {
					t.Errorf("block %d: %x, want %x", i, got[i].Sequence, want)
				}
				parent = got[i].Sequence
			}
			for _, other := range []Extra{{}, {LoRA: tc.e.LoRA + "'"}, {LoRA: tc.e.LoRA, Salt: tc.e.Salt + "'"}, {Salt: tc.e.LoRA}} {
				o := ExtraHashes(tokens, 16, other, nil)
				for i := range got {
					if got[i].Sequence == o[i].Sequence {
						t.Errorf("block %d: shared with %+v", i, other)
					}
				}
			}
			h.Reset()
			if again := h.Append(tokens, nil); !slices.Equal(again, got) {
				t.Fatalf("a reset Hasher forgot its adapter")
			}
		})
	}
}
