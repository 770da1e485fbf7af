package eventbus

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPublishRateTarget is the default Config.PublishRateTarget: batches
// a second the publishing streams together may send before the eventbus
// asks them to hold and merge theirs. The eventbus and NATS spend their CPU
// per batch received more than per event in it (bench/fleet at 10,000
// publishers: about 32 µs of the two together for a batch of one KV batch,
// 60 µs for one of several merged), so this keeps them within about
// two-thirds of a core however many workers publish, until a worker's
// share falls under one batch a second (maxPublishInterval); below it
// nobody waits.
const DefaultPublishRateTarget = 10_000

// maxPublishInterval bounds the interval asked of a publisher: a worker's
// KV events reach the routers at most this much later than they would
// unpaced. Past the fleet size at which a second's share is below one
// batch a second, the rate goes over the target instead.
const maxPublishInterval = time.Second

// pacePeriod is how often the pacer measures the streams' rates.
const pacePeriod = time.Second

// pacer keeps the rate of batches the publishing streams send under a
// target by asking each to hold its batches for an interval (the answers'
// publish_interval), which a worker's SDK uses to merge its KV batches.
// Every period it measures each stream's rate and finds the level c (batches
// a second) such that the streams sending under it keep their rates and the
// others are held to c, the rates then summing to the target (max-min fair
// sharing, "water-filling"); the interval asked is 1/c. A stream sending at
// half the level it was held to or more counts as wanting more (its own
// rate is not seen while it is held), so the level rises again as the
// others quiet down, and when nobody is held and the rates sum to no more
// than the target, nobody is asked to wait.
type pacer struct {
	target float64 // batches a second; 0 never paces

	interval atomic.Int64 // nanoseconds; 0: publish at once
	next     atomic.Int64 // when to measure next, Unix nanoseconds

	mu      sync.Mutex
	streams map[*paceStream]struct{}
	since   time.Time // the last measurement
	level   float64   // batches a second the held streams were held to; 0: none held
	rates   []paceRate
}

// paceStream counts one publishing stream's batches.
type paceStream struct {
	batches atomic.Uint64
	last    uint64 // batches at the last measurement; under pacer.mu
}

type paceRate struct {
	rate float64
	held bool
}

func newPacer(target int, now time.Time) *pacer {
	p := &pacer{target: float64(max(target, 0)), streams: map[*paceStream]struct{}{}, since: now}
	p.next.Store(now.Add(pacePeriod).UnixNano())
	return p
}

// open registers a publishing stream; close it with done. With no target
// the stream is not registered: nothing ever measures it.
func (p *pacer) open() *paceStream {
	s := &paceStream{}
	if p.target <= 0 {
		return s
	}
	p.mu.Lock()
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	return s
}

func (p *pacer) done(s *paceStream) {
	p.mu.Lock()
	delete(p.streams, s)
	p.mu.Unlock()
}

// received counts a batch of s and returns the interval to answer it with,
// measuring the rates first when a period has passed.
func (p *pacer) received(s *paceStream, now time.Time) time.Duration {
	s.batches.Add(1)
	if p.target > 0 && now.UnixNano() >= p.next.Load() && p.mu.TryLock() {
		if now.UnixNano() >= p.next.Load() {
			p.measure(now)
			p.next.Store(now.Add(pacePeriod).UnixNano())
		}
		p.mu.Unlock()
	}
	return time.Duration(p.interval.Load())
}

// measure takes each stream's rate over the period ending now and sets the
// interval; p.mu is held.
func (p *pacer) measure(now time.Time) {
	dt := now.Sub(p.since).Seconds()
	if dt <= 0 {
		return
	}
	p.since = now
	p.rates = p.rates[:0]
	for s := range p.streams {
		n := s.batches.Load()
		if d := n - s.last; d > 0 {
			r := float64(d) / dt
			// A held stream sends once the interval has passed and a batch
			// has come: one wanting the level c or more sends at least c/2
			// (1/(1/c + 1/c)). From half the level on, it is taken to want
			// more: one wanting less than c but more than c/2 keeps its
			// interval, a delay of at most 1/c, rather than be let go and
			// held again the next period.
			p.rates = append(p.rates, paceRate{rate: r, held: p.level > 0 && r >= p.level/2})
		}
		s.last = n
	}
	p.level = fairLevel(p.rates, p.target)
	var iv time.Duration
	if p.level > 0 {
		iv = min(time.Duration(float64(time.Second)/p.level), maxPublishInterval)
	}
	p.interval.Store(int64(iv))
}

// fairLevel is the rate c at which the streams' rates, each cut to c, sum to
// target, a held stream counting as wanting any rate; 0 when they need no
// cut (they sum to no more than target and none is held). rates is
// reordered.
func fairLevel(rates []paceRate, target float64) float64 {
	if target <= 0 || len(rates) == 0 {
		return 0
	}
	held, sum := 0, 0.0
	for _, r := range rates {
		if r.held {
			held++
		} else {
			sum += r.rate
		}
	}
	if held == 0 && sum <= target {
		return 0
	}
	// Fill from the quietest stream up: each keeps its rate while the
	// target left, shared by it and those above it, allows it.
	slices.SortFunc(rates, func(a, b paceRate) int {
		switch {
		case a.held != b.held:
			if a.held {
				return 1
			}
			return -1
		case a.rate < b.rate:
			return -1
		case a.rate > b.rate:
			return 1
		}
		return 0
	})
	left := target
	for i, r := range rates {
		share := left / float64(len(rates)-i)
		if r.held || r.rate > share {
			return share
		}
		left -= r.rate
	}
	return 0 // not reached: the rates sum to more than target, or one is held
}
