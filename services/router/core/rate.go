package core

import (
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// rateWindow is how many recent arrivals the request rate is measured
// over: enough to average out a Poisson process's noise (about 1/sqrt(64),
// 12%), few enough to follow a change of load within seconds.
const rateWindow = 64

// maxBusy caps the measured prefill share of the workers' time: a window
// of rateWindow arrivals resolves no finer than one arrival's share, and
// at or above 1 (more prefill arriving than the workers can compute) the
// queues grow without bound and the wait a decision adds reaches every
// later request; the cap keeps that finite.
const maxBusy = 1 - 1.0/rateWindow

// arrivals measures the recent request rate from the times of the last
// rateWindow requests routed, by this router or (through replica sync) by
// its peers, and how busy their prefill keeps the workers. The zero value
// is ready; it is not safe for concurrent use.
type arrivals struct {
	at [rateWindow]time.Time
	// work is each arrival's prefill time in ms on the worker it went
	// to, alone, as that worker's timing model predicts it.
	work [rateWindow]float64
	// hashes are each arrival's block hashes (shared, never changed):
	// which of the recent arrivals share a request's prefix (sharers).
	hashes [rateWindow][]uint64
	// fp holds a byte of each arrival's block hashes (fingerprint), for
	// its first fpMaxBlocks blocks, transposed: fp[c][j] packs arrival
	// j's bytes of blocks 8c..8c+7. sharers reads the 64 arrivals' bytes
	// of one block in 8 lines of memory, and a hash only where its byte
	// matches: the arrivals' own arrays are 64 scattered reads, which a
	// decision paid in cache misses (a few µs at 2M indexed blocks).
	// Bytes past an arrival's length are stale; its length masks them.
	fp   [][rateWindow]uint64
	n    int // how many of at are set
	next int // where the next arrival goes
}

// fpMaxBlocks is the depth fp covers (64k tokens of 16-token blocks),
// 256 KB of it at most; a prefix deeper than that is compared hash by
// hash.
const fpMaxBlocks = 4096

// fingerprint is the byte of h that fp keeps. Different bytes mean
// different hashes; equal ones are compared in full. The multiply mixes
// every bit of h into the top byte, so hand-made hashes (1, 2, 3) differ
// too.
func fingerprint(h uint64) byte { return byte((h * 0x9e3779b97f4a7c15) >> 56) }

// add records an arrival whose prefill takes workMs.
func (a *arrivals) add(t time.Time, workMs float64, hashes []uint64) {
	a.at[a.next] = t
	a.work[a.next] = workMs
	a.hashes[a.next] = hashes
	n := min(len(hashes), fpMaxBlocks)
	for len(a.fp)*8 < n {
		a.fp = append(a.fp, [rateWindow]uint64{})
	}
	c := 0
	for ; c < n/8; c++ {
		h := hashes[c*8 : c*8+8 : c*8+8]
		a.fp[c][a.next] = uint64(fingerprint(h[0])) | uint64(fingerprint(h[1]))<<8 |
			uint64(fingerprint(h[2]))<<16 | uint64(fingerprint(h[3]))<<24 |
			uint64(fingerprint(h[4]))<<32 | uint64(fingerprint(h[5]))<<40 |
			uint64(fingerprint(h[6]))<<48 | uint64(fingerprint(h[7]))<<56
	}
	if c*8 < n {
		var w uint64
		for k, h := range hashes[c*8 : n] {
			w |= uint64(fingerprint(h)) << (8 * k)
		}
		a.fp[c][a.next] = w
	}
	a.next = (a.next + 1) % rateWindow
	a.n = min(a.n+1, rateWindow)
}

// perMs is the arrival rate in requests per millisecond as of now: the
// arrivals in the window over the time since the oldest of them, so that
// it falls when requests stop coming. Fewer than two arrivals measure
// nothing (0).
func (a *arrivals) perMs(now time.Time) float64 {
	if a.n < 2 {
		return 0
	}
	return float64(a.n) / a.spanMs(now)
}

// spanMs is the time since the window's oldest arrival, at least a
// millisecond: arrivals in one instant (or a peer's clock slightly ahead)
// span nothing, and count over a millisecond, not forever.
func (a *arrivals) spanMs(now time.Time) float64 {
	oldest := a.at[(a.next-a.n+rateWindow)%rateWindow]
	span := max(now.Sub(oldest), time.Millisecond)
	return float64(span) / float64(time.Millisecond)
}

// busy is the share of workers' time the prefill of the window's
// arrivals takes (their work over the window's span, per worker), in
// [0, maxBusy]; 0 with fewer than two arrivals.
func (a *arrivals) busy(now time.Time, workers int) float64 {
	if a.n < 2 || workers < 1 {
		return 0
	}
	sum := 0.0
	for i := range a.n {
		sum += a.work[(a.next-1-i+rateWindow)%rateWindow]
	}
	return min(max(sum/(a.spanMs(now)*float64(workers)), 0), maxBusy)
}

// waitRate is the rate (per ms) of the later requests that a decision's
// work on one of workers makes wait (scheduler.Request.Rate): each
// worker's share of the arrival rate, over 1 - busy. At a utilisation u
// a queue takes 1/(1-u) times its own work to drain, since more work keeps
// coming while it does (a busy period's length), so the work a decision
// adds delays that many times more of the requests after it than arrive
// during the work itself.
func (a *arrivals) waitRate(now time.Time, workers int) float64 {
	if workers < 1 {
		return 0
	}
	return a.perMs(now) / float64(workers) / (1 - a.busy(now, workers))
}

// sharers counts the window's arrivals whose prompts begin with the first
// shared blocks of hashes, and sums their prefill time (ms): the requests
// that follow a prefix to the workers caching it. Sequence hashes chain,
// so one comparison at the last shared block compares the whole prefix.
// An arrival whose fingerprint of that block differs from the request's
// is not one (its hash differs), without reading its hashes.
func (a *arrivals) sharers(hashes []uint64, shared int) (n int, workMs float64) {
	if shared < 1 || shared > len(hashes) {
		return 0, 0
	}
	key := hashes[shared-1]
	if shared > len(a.fp)*8 {
		// No arrival's fingerprints reach that deep (shared is past
		// fpMaxBlocks, or past every arrival's length).
		for i := range a.n {
			j := (a.next - 1 - i + rateWindow) % rateWindow
			if h := a.hashes[j]; len(h) >= shared && h[shared-1] == key {
				n++
				workMs += a.work[j]
			}
		}
		return n, workMs
	}
	// Every arrival at least shared long wrote its byte of the block.
	col, shift, f := &a.fp[(shared-1)/8], 8*uint((shared-1)%8), fingerprint(key)
	for i := range a.n {
		j := (a.next - 1 - i + rateWindow) % rateWindow
		// The byte first: it is the one of the three in the 8 lines read.
		if byte(col[j]>>shift) != f {
			continue
		}
		if h := a.hashes[j]; len(h) >= shared && h[shared-1] == key {
			n++
			workMs += a.work[j]
		}
	}
	return n, workMs
}

// shared measures the sharers of the prefix that the workers caching the
// most of hashes hold (reach: cached blocks of each of some of the total
// workers; the others cache none), as the
// scheduler's Shared: their rate, and the share of a home's time their
// prefill takes, at least the workers' mean (busy), with the homes there
// are and with one more.
func (a *arrivals) shared(now time.Time, hashes []uint64, reach []int, total int) scheduler.Shared {
	blocks, homes := 0, 0
	for _, r := range reach {
		switch {
		case r > blocks:
			blocks, homes = r, 1
		case r == blocks:
			homes++
		}
	}
	if blocks == 0 {
		// Every worker, those not in reach too, caches none of it.
		homes = total
	}
	if a.n < rateWindow || homes == total {
		// A few arrivals in a few ms are a burst, not a rate: a copy is
		// for a prefix that stays in demand, measured over a full window.
		// And where every worker holds the prefix there is none to seed.
		return scheduler.Shared{}
	}
	n, workMs := a.sharers(hashes, blocks)
	// The first of them may be the one that brought the prefix: it is
	// the repeats that measure how often requests come back to it (one
	// long document seen once is not a hot prefix).
	if n < 2 {
		return scheduler.Shared{}
	}
	span := a.spanMs(now)
	u := a.busy(now, total)
	load := workMs / span
	return scheduler.Shared{
		Blocks:   blocks,
		Rate:     float64(n-1) / span,
		HomeBusy: min(max(u, load/float64(homes)), maxBusy),
		SeedBusy: min(max(u, load/float64(homes+1)), maxBusy),
	}
}

// prefillMs is the prefill time of prefillBlocks blocks (at least one: an
// engine computes a fully cached prompt's last block) of a prompt of
// blocks blocks alone on a worker with timing model m, their attention
// over the prompt's blocks before them (its cached prefix): the work an
// arrival brings.
func prefillMs(m *timingmodel.Model, blocks, prefillBlocks, blockSize int) float64 {
	n := max(prefillBlocks, 1)
	s := m.Steps(0, 0)
	sp := s.Span(n * blockSize)
	sp.Attn = timingmodel.Attention(max(blocks-n, 0)*blockSize, n*blockSize)
	return s.PrefillMs(sp, 1)
}
