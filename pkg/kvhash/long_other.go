//go:build !amd64 || purego

package kvhash

// accumulate is accumulateGeneric where there is no assembly for it.
func accumulate(a *[8]uint64, p *uint32, stripes int, last *uint32) {
	accumulateGeneric(a, p, stripes, last)
}
