package simengine

import "github.com/switchyard-llm/switchyard/pkg/kvhash"

// tokenSeed derives the seed of a request's output tokens from its prompt and
// sampling seed, so that the same request produces the same answer on any
// engine, host and run, like greedy decoding of a real model.
func tokenSeed(prompt []uint32, seed uint64) uint64 {
	return splitmix64(kvhash.LocalHash(prompt) ^ seed)
}

// outputToken returns the token generated at position pos (0 for the first
// generated token) of a request, uniformly in [lo, hi).
func outputToken(seed uint64, pos int, lo, hi uint32) uint32 {
	return lo + uint32(splitmix64(seed+uint64(pos)*0x9e3779b97f4a7c15)%uint64(hi-lo))
}

// splitmix64 is a fast, well-mixed bijection of 64-bit values.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// textToken returns the token at position pos of a request whose output is
// read from text, starting at an offset the seed picks.
func textToken(seed uint64, pos int, text []uint32) uint32 {
	return text[(seed%uint64(len(text))+uint64(pos))%uint64(len(text))]
}
