package frontend

import (
	"errors"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// Bounds of how long an unreachable worker is kept out of routing before it
// is tried again: long enough that a dead worker costs one failed attempt
// every few seconds at most, short enough that a worker back from a blip
// rejoins quickly even without a registry event.
const (
	fenceMin = 500 * time.Millisecond
	fenceMax = 10 * time.Second
)

// fence keeps workers the frontend cannot reach out of routing. A worker
// whose connection fails or breaks is fenced at once, without waiting for
// its lease to expire (which while etcd is away may be never): routing
// excludes it until its backoff passes. Then one request may try it; success
// (or a fresh registry event of the instance) lets it back in, another
// failure fences it again for longer.
type fence struct {
	mu    sync.Mutex
	out   map[uint64]*fenced
	count int // len(out), read without the lock to skip the common case
	now   func() time.Time
}

type fenced struct {
	until time.Time
	bo    *backoff.Backoff
}

func newFence() *fence { return &fence{out: map[uint64]*fenced{}, now: time.Now} }

// unreachable reports whether an attempt's error says the worker could not
// be reached (or went away), as opposed to a busy worker or a bad request.
func unreachable(err error) bool {
	return errors.Is(err, transport.ErrCannotConnect) || errors.Is(err, transport.ErrDisconnected) ||
		errors.Is(err, transport.ErrDraining)
}

// fail fences instance id, for longer after each failure since it was last
// seen alive. It returns the time it stays out.
func (f *fence) fail(id uint64) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.out[id]
	if e == nil {
		e = &fenced{bo: backoff.New(backoff.Policy{Min: fenceMin, Max: fenceMax})}
		f.out[id] = e
		f.count++
	}
	d := e.bo.Next()
	e.until = f.now().Add(d)
	return d
}

// alive lets instance id back in: a request to it succeeded, or the registry
// announced it anew.
func (f *fence) alive(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.out[id]; ok {
		delete(f.out, id)
		f.count--
	}
}

// any reports whether some worker is fenced or on probation.
func (f *fence) any() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count > 0
}

// exclude returns also with the instances fenced now appended.
func (f *fence) exclude(also []uint64) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count == 0 {
		return also
	}
	now := f.now()
	out := append([]uint64(nil), also...)
	for id, e := range f.out {
		if now.Before(e.until) {
			out = append(out, id)
		}
	}
	return out
}

// fencedNow returns each fenced instance (out of routing, or on probation:
// its backoff passed and the next request may try it) with how long until
// it may be tried again (0 on probation). An instance stays listed until a
// request to it succeeds or the registry announces it anew.
func (f *fence) fencedNow() map[uint64]time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count == 0 {
		return nil
	}
	now := f.now()
	out := make(map[uint64]time.Duration, len(f.out))
	for id, e := range f.out {
		out[id] = max(0, e.until.Sub(now))
	}
	return out
}
