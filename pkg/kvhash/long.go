package kvhash

import (
	"encoding/binary"
	"unsafe"
)

// XXH3-64 of inputs of 241 to 1024 bytes (blocks of 61 to 256 tokens), with
// the seeded secret derived once instead of on every call. The library
// derives the 192-byte secret from the seed each time it hashes a long input,
// which is most of the cost of a 64-token block. Inputs up to 1024 bytes are
// one partial XXH3 block: their stripes never reach a scramble, so the
// algorithm reduces to accumulating 64-byte stripes, one last overlapping
// stripe, and the merge. It reads tokens as little-endian pairs, so it needs
// no byte copy on any host. On amd64 the stripes are accumulated in SSE2
// assembly (long_amd64.s; SSE2 is part of the amd64 baseline), elsewhere in
// Go. TestLongMatchesTheLibrary pins it to the library.

// longMin and longMax bound the token counts hashed by localHashLong.
const (
	longMin = 241/4 + 1 // 61 tokens, the first length past the 240-byte path
	longMax = 1024 / 4  // 256 tokens, one XXH3 block
)

// defaultSecret is XXH3's kSecret from the specification.
var defaultSecret = [192]byte{
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
}

// The seeded secret, as the 64-bit words each step reads.
var (
	// stripeKey[s+i] is lane i's key for stripe s (secret offset 8*(s+i)).
	stripeKey [longMax/16 - 1 + 8]uint64
	// lastKey is the key of the last stripe (secret offset 192-64-7).
	lastKey [8]uint64
	// mergeKey is the key of the merge (secret offset 11).
	mergeKey [8]uint64
)

func init() {
	var secret [192]byte
	for i := 0; i < len(secret); i += 16 {
		binary.LittleEndian.PutUint64(secret[i:], binary.LittleEndian.Uint64(defaultSecret[i:])+Seed)
		binary.LittleEndian.PutUint64(secret[i+8:], binary.LittleEndian.Uint64(defaultSecret[i+8:])-Seed)
	}
	word := func(off int) uint64 { return binary.LittleEndian.Uint64(secret[off:]) }
	for i := range stripeKey {
		stripeKey[i] = word(8 * i)
	}
	for i := range 8 {
		lastKey[i] = word(192 - 64 - 7 + 8*i)
		mergeKey[i] = word(11 + 8*i)
	}
}

// XXH3's primes.
const (
	prime32_1 = 0x9E3779B1
	prime32_2 = 0x85EBCA77
	prime32_3 = 0xC2B2AE3D
	prime64_1 = 0x9E3779B185EBCA87
	prime64_2 = 0xC2B2AE3D27D4EB4F
	prime64_3 = 0x165667B19E3779F9
	prime64_4 = 0x85EBCA77C2B2AE63
	prime64_5 = 0x27D4EB2F165667C5
)

// accumulateGeneric is accumulate in Go: it accumulates stripes 64-byte
// stripes from p, then the 64-byte stripe at last with lastKey.
func accumulateGeneric(a *[8]uint64, p *uint32, stripes int, last *uint32) {
	tokens := unsafe.Slice(p, 16*stripes)
	for s := range stripes {
		stripe(a, (*[16]uint32)(tokens[16*s:]), stripeKey[s:])
	}
	stripe(a, (*[16]uint32)(unsafe.Slice(last, 16)), lastKey[:])
}

// stripe accumulates one 64-byte stripe: 16 tokens, read as eight
// little-endian 64-bit words, with the eight keys from key. It is written
// out lane by lane: the compiler keeps the accumulators in registers that
// way, which it does not for a loop over the array.
func stripe(a *[8]uint64, t *[16]uint32, key []uint64) {
	_ = key[7]
	v0 := uint64(t[0]) | uint64(t[1])<<32
	v1 := uint64(t[2]) | uint64(t[3])<<32
	v2 := uint64(t[4]) | uint64(t[5])<<32
	v3 := uint64(t[6]) | uint64(t[7])<<32
	v4 := uint64(t[8]) | uint64(t[9])<<32
	v5 := uint64(t[10]) | uint64(t[11])<<32
	v6 := uint64(t[12]) | uint64(t[13])<<32
	v7 := uint64(t[14]) | uint64(t[15])<<32
	k0, k1, k2, k3 := v0^key[0], v1^key[1], v2^key[2], v3^key[3]
	k4, k5, k6, k7 := v4^key[4], v5^key[5], v6^key[6], v7^key[7]
	a[0] += v1 + uint64(uint32(k0))*(k0>>32)
	a[1] += v0 + uint64(uint32(k1))*(k1>>32)
	a[2] += v3 + uint64(uint32(k2))*(k2>>32)
	a[3] += v2 + uint64(uint32(k3))*(k3>>32)
	a[4] += v5 + uint64(uint32(k4))*(k4>>32)
	a[5] += v4 + uint64(uint32(k5))*(k5>>32)
	a[6] += v7 + uint64(uint32(k6))*(k6>>32)
	a[7] += v6 + uint64(uint32(k7))*(k7>>32)
}

// localHashLong is LocalHash for longMin to longMax tokens.
func localHashLong(tokens []uint32) uint64 {
	a := [8]uint64{prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1}
	n := len(tokens)
	// Every whole stripe before the last byte, then the last 64 bytes,
	// which may overlap the stripe before them.
	accumulate(&a, &tokens[0], (4*n-1)/64, &tokens[n-16])
	acc := uint64(4*n) * prime64_1
	for i := 0; i < 8; i += 2 {
		acc += mulFold64(a[i]^mergeKey[i], a[i+1]^mergeKey[i+1])
	}
	return avalanche(acc)
}
