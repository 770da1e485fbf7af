// Package kvhash defines the identity of KV cache blocks, shared by workers,
// the router and the frontend so that all three name a cached prefix the same
// way.
//
// A token sequence is cut into blocks of a fixed number of tokens (the model
// card's block size). A block's local hash is XXH3-64 with seed 1337 of its
// token ids encoded as little-endian uint32. Its sequence hash identifies the
// whole prefix ending with it: the first block's sequence hash is its local
// hash, and every later block's is XXH3-64 with seed 1337 of the parent's
// sequence hash followed by the block's local hash, both as little-endian
// uint64. A partial last block is never hashed: it cannot be shared until it
// is full. Local hashes are Dynamo's canonical block hashes (its router's
// compute_block_hash_for_seq), so blocks reported by engines that Dynamo
// routes to can be matched by token content here too.
//
// A tenant's cache salt (the OpenAI-compatible cache_salt) is mixed into the
// first block only, as vLLM mixes it into its first block's extra keys: the
// salted first block's sequence hash is SequenceHash(SaltRoot(salt), local),
// the salt's root standing as its parent, and later blocks chain from it.
// Every sequence hash of a salted prompt then differs from the unsalted
// prompt's and from those under another salt, while local hashes stay the
// tokens' own. The root's bytes start with a tag, so that a salt can never
// be mistaken for another input mixed the same way.
//
// A LoRA adapter is mixed into every block, as vLLM puts the adapter's name
// (lora_name, since vLLM 0.11.1: vllm/v1/core/kv_cache_utils.py
// _gen_lora_extra_hash_keys, before the salt in generate_block_hash_extra_keys)
// in every block's extra hash keys: a block's sequence hash is
// SequenceHash(SequenceHash(parent, LoRAKey(name)), local), parent being the
// previous block's sequence hash, and for the first block the salt's root
// when salted and 0 otherwise. Caches of two adapters, or of an adapter and
// its base model, then share no block, and the adapter's key is tagged apart
// from a salt's root (vLLM's flat tuple of extra keys lets an adapter's name
// and a salt collide).
package kvhash

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of every hash in this package.
const Seed = 1337

// DefaultBlockSize is the block size engines use when a model card gives none.
const DefaultBlockSize = 16

// ErrInvalidBlockSize is returned by ValidateBlockSize for a block size that
// is not positive.
var ErrInvalidBlockSize = errors.New("kvhash: block size must be positive")

// Block is the identity of one full KV block.
type Block struct {
	// Local is the hash of the block's own tokens.
	Local uint64
	// Sequence is the hash of the prefix ending with this block.
	Sequence uint64
}

// ValidateBlockSize reports whether n can be used as a block size. Callers
// that take a block size from configuration validate it with this before
// calling Hashes or NewHasher, which panic on an invalid one.
func ValidateBlockSize(n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: got %d", ErrInvalidBlockSize, n)
	}
	return nil
}

// LocalHash returns the local hash of one block's tokens. It hashes whatever
// it is given; use it on full blocks only.
func LocalHash(tokens []uint32) uint64 {
	if len(tokens) == 0 {
		return xxh3.HashSeed(nil, Seed)
	}
	if len(tokens) >= longMin && len(tokens) <= longMax {
		return localHashLong(tokens)
	}
	if nativeLittleEndian {
		// The in-memory layout of []uint32 already is the wire layout, so
		// hash it in place instead of copying it.
		b := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens))
		return xxh3.HashSeed(b, Seed)
	}
	return localHashPortable(tokens)
}

// localHashPortable encodes tokens explicitly as little-endian; it is the
// path of big-endian hosts and the reference the in-place path is tested
// against.
func localHashPortable(tokens []uint32) uint64 {
	var stack [1024]byte
	var b []byte
	if n := 4 * len(tokens); n <= len(stack) {
		b = stack[:0]
	} else {
		b = make([]byte, 0, n)
	}
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return xxh3.HashSeed(b, Seed)
}

// SequenceHash returns the sequence hash of a block from its parent's
// sequence hash and its own local hash. The first block of a sequence has no
// parent: its sequence hash is its local hash, and SequenceHash is not used.
func SequenceHash(parent, local uint64) uint64 {
	// XXH3-64 of 16 bytes (parent, local as little-endian uint64) with the
	// seed, written out: the 9-16 byte path of the algorithm, with its
	// seeded secret words folded into constants. The golden tests pin it
	// to the reference implementation.
	lo := parent ^ seqLo
	hi := local ^ seqHi
	return avalanche(16 + bits.ReverseBytes64(lo) + hi + mulFold64(lo, hi))
}

// mulFold64 is XXH3's 128-bit multiply folded to 64 bits.
func mulFold64(a, b uint64) uint64 {
	h, l := bits.Mul64(a, b)
	return h ^ l
}

// avalanche is XXH3's final mix.
func avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= 0x165667919e3779f9
	return h ^ h>>32
}

// The XXH3 secret words the 16-byte path mixes in, with the seed applied.
const (
	seqLo = (0x1f67b3b7a4a44072 ^ 0x78e5c0cc4ee679cb) + Seed
	seqHi = (0x2172ffcc7dd05a82 ^ 0x8e2443f7744608b8) - Seed
)

// sequenceHashReference is SequenceHash through the library, for tests.
func sequenceHashReference(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

// Hashes appends to dst the identity of every full block of tokens and
// returns the extended slice; a trailing partial block is ignored. Passing a
// dst with enough capacity makes it allocation-free. It panics if blockSize is
// not positive (see ValidateBlockSize).
func Hashes(tokens []uint32, blockSize int, dst []Block) []Block {
	return SaltedHashes(tokens, blockSize, "", dst)
}

// saltTag starts the bytes of every salt's root.
const saltTag = "switchyard.cache_salt:"

// SaltRoot is the parent hash a salted sequence's first block chains
// from: XXH3-64, seeded with Seed, of saltTag followed by the salt's bytes.
func SaltRoot(salt string) uint64 {
	var stack [256]byte
	b := append(stack[:0], saltTag...)
	return xxh3.HashSeed(append(b, salt...), Seed)
}

// loraTag starts the bytes of every adapter's key.
const loraTag = "switchyard.lora:"

// LoRAKey is what a LoRA adapter mixes into each block's sequence hash:
// XXH3-64, seeded with Seed, of loraTag followed by the adapter's name.
func LoRAKey(name string) uint64 {
	var stack [256]byte
	b := append(stack[:0], loraTag...)
	return xxh3.HashSeed(append(b, name...), Seed)
}

// Extra is what a request mixes into its blocks' hashes besides its
// tokens. The zero value mixes nothing.
type Extra struct {
	// Salt is the tenant's cache salt, mixed into the first block.
	Salt string
	// LoRA is the adapter's name, mixed into every block.
	LoRA string
}

// SaltedHashes is Hashes for a request with a cache salt: the first
// block's sequence hash chains from SaltRoot(salt). An empty salt is
// none: the result is Hashes'.
func SaltedHashes(tokens []uint32, blockSize int, salt string, dst []Block) []Block {
	return ExtraHashes(tokens, blockSize, Extra{Salt: salt}, dst)
}

// ExtraHashes is Hashes for a request with a cache salt and a LoRA
// adapter, either or both empty (see the package doc for how each is
// mixed). With neither, the result is Hashes'.
func ExtraHashes(tokens []uint32, blockSize int, e Extra, dst []Block) []Block {
	if blockSize <= 0 {
		panic(fmt.Sprintf("kvhash: block size must be positive, got %d", blockSize))
	}
	n := len(tokens) / blockSize
	if n == 0 {
		return dst
	}
	dst = grow(dst, n)
	var parent, key uint64
	chained, keyed := e.Salt != "", e.LoRA != ""
	if chained {
		parent = SaltRoot(e.Salt)
	}
	if keyed {
		key = LoRAKey(e.LoRA)
	}
	for i := range n {
		local := LocalHash(tokens[i*blockSize : (i+1)*blockSize])
		seq := local
		switch {
		case keyed:
			seq = SequenceHash(SequenceHash(parent, key), local)
		case i > 0 || chained:
			seq = SequenceHash(parent, local)
		}
		dst = append(dst, Block{Local: local, Sequence: seq})
		parent = seq
	}
	return dst
}

// grow makes room for n more elements in dst with at most one allocation.
func grow(dst []Block, n int) []Block {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	out := make([]Block, len(dst), len(dst)+n)
	copy(out, dst)
	return out
}

// Hasher computes block identities incrementally as the tokens of one
// sequence arrive, as during decode, without rehashing what it has seen. The
// zero value is not usable; create one with NewHasher. A Hasher is not safe
// for concurrent use.
type Hasher struct {
	blockSize int
	pending   []uint32
	parent    uint64
	blocks    int
	// root is the salt's root, which the first block chains from when
	// salted (see SaltedHashes); key is the adapter's, mixed into every
	// block when keyed (see ExtraHashes).
	root   uint64
	salted bool
	key    uint64
	keyed  bool
}

// NewHasher returns a Hasher for blocks of blockSize tokens. It panics if
// blockSize is not positive (see ValidateBlockSize).
func NewHasher(blockSize int) *Hasher {
	if blockSize <= 0 {
		panic(fmt.Sprintf("kvhash: block size must be positive, got %d", blockSize))
	}
	return &Hasher{blockSize: blockSize, pending: make([]uint32, 0, blockSize)}
}

// NewSaltedHasher is NewHasher for a sequence with a cache salt, whose
// blocks it names as SaltedHashes does; an empty salt is none.
func NewSaltedHasher(blockSize int, salt string) *Hasher {
	return NewExtraHasher(blockSize, Extra{Salt: salt})
}

// NewExtraHasher is NewHasher for a sequence with a cache salt and a LoRA
// adapter, whose blocks it names as ExtraHashes does.
func NewExtraHasher(blockSize int, e Extra) *Hasher {
	h := NewHasher(blockSize)
	if e.Salt != "" {
		h.root, h.salted = SaltRoot(e.Salt), true
	}
	if e.LoRA != "" {
		h.key, h.keyed = LoRAKey(e.LoRA), true
	}
	return h
}

// BlockSize returns the block size the Hasher was created with.
func (h *Hasher) BlockSize() int { return h.blockSize }

// Append adds tokens to the sequence and appends to dst the identity of
// every block they complete, returning the extended slice. Tokens that do not
// complete a block are kept until later calls do.
func (h *Hasher) Append(tokens []uint32, dst []Block) []Block {
	for len(tokens) > 0 {
		if len(h.pending) == 0 && len(tokens) >= h.blockSize {
			// A whole block straight from the input: no copy.
			dst = append(dst, h.complete(tokens[:h.blockSize]))
			tokens = tokens[h.blockSize:]
			continue
		}
		k := min(h.blockSize-len(h.pending), len(tokens))
		h.pending = append(h.pending, tokens[:k]...)
		tokens = tokens[k:]
		if len(h.pending) == h.blockSize {
			dst = append(dst, h.complete(h.pending))
			h.pending = h.pending[:0]
		}
	}
	return dst
}

// complete hashes one full block and makes it the parent of the next.
func (h *Hasher) complete(block []uint32) Block {
	local := LocalHash(block)
	seq := local
	switch {
	case h.keyed:
		parent := h.parent
		if h.blocks == 0 {
			parent = h.root // 0 when not salted
		}
		seq = SequenceHash(SequenceHash(parent, h.key), local)
	case h.blocks > 0:
		seq = SequenceHash(h.parent, local)
	case h.salted:
		seq = SequenceHash(h.root, local)
	}
	h.parent = seq
	h.blocks++
	return Block{Local: local, Sequence: seq}
}

// Blocks returns how many full blocks the sequence has so far.
func (h *Hasher) Blocks() int { return h.blocks }

// Pending returns how many tokens of the partial last block are held.
func (h *Hasher) Pending() int { return len(h.pending) }

// Last returns the sequence hash of the last full block, and false when there
// is none yet. It is the parent hash of the next block.
func (h *Hasher) Last() (uint64, bool) { return h.parent, h.blocks > 0 }

// Clone returns a Hasher in the same state that goes on independently.
func (h *Hasher) Clone() *Hasher {
	c := *h
	c.pending = append(make([]uint32, 0, h.blockSize), h.pending...)
	return &c
}

// Reset empties the Hasher so that it starts a new sequence (under the
// same salt and adapter).
func (h *Hasher) Reset() {
	h.pending = h.pending[:0]
	h.parent = 0
	h.blocks = 0
}
