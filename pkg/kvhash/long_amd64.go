//go:build !purego

package kvhash

// accumulate accumulates stripes 64-byte stripes from p with the seeded
// secret, then the 64-byte stripe at last with lastKey. It is
// accumulateGeneric in SSE2.
//
//go:noescape
func accumulate(a *[8]uint64, p *uint32, stripes int, last *uint32)
