// Package backoff is the one retry delay of Switchyard's clients and
// services: exponential growth from a floor to a cap, with full jitter, so
// that the hundreds of clients a restart disconnects at the same instant do
// not come back in lockstep (every loop with the same doubling schedule hits
// the restarted server in synchronised waves).
//
// Each delay is drawn uniformly from [Min, c], where c = min(Max, Min*2^n)
// after n failures ("full jitter" in the AWS architecture blog's terms,
// floored at Min so that a call that fails at once never spins).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults used when a field of Policy is zero.
const (
	DefaultMin = 50 * time.Millisecond
	DefaultMax = 5 * time.Second
)

// Policy bounds the delays.
type Policy struct {
	// Min is the floor of every delay and the first cap; 0 is DefaultMin.
	Min time.Duration
	// Max is the largest delay; 0 is DefaultMax. A Max below Min is Min.
	Max time.Duration
}

// Backoff is the state of one retry loop. It is not safe for concurrent use:
// each loop owns its own.
type Backoff struct {
	min, max time.Duration
	cap      time.Duration
}

// New returns a Backoff at its first attempt.
func New(p Policy) *Backoff {
	b := &Backoff{min: p.Min, max: p.Max}
	if b.min <= 0 {
		b.min = DefaultMin
	}
	if b.max <= 0 {
		b.max = DefaultMax
	}
	b.max = max(b.max, b.min)
	b.cap = b.min
	return b
}

// Next returns the delay before the next attempt and doubles the cap of the
// one after (up to Max).
func (b *Backoff) Next() time.Duration {
	d := b.min
	if span := b.cap - b.min; span > 0 {
		d += rand.N(span + 1)
	}
	if b.cap < b.max {
		b.cap = min(b.cap*2, b.max)
	}
	return d
}

// Reset starts again from Min, after a success.
func (b *Backoff) Reset() { b.cap = b.min }

// Failed reports whether the loop has failed since its last Reset.
func (b *Backoff) Failed() bool { return b.cap != b.min }

// Wait sleeps for Next() or until ctx ends; it returns ctx.Err() then.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep waits for d or until ctx ends, returning ctx.Err() then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
