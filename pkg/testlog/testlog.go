// Package testlog gives tests a logger whose records are shown only when the
// test fails. The services a test starts in process log through it: a
// passing run prints nothing, and a failing one (in CI, where the log is all
// anyone sees) shows what the services said before the failure.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// DefaultLimit is how many bytes of the latest records OnFailure keeps.
const DefaultLimit = 64 << 10

// OnFailure returns a logger at level that keeps the last DefaultLimit bytes
// of its records (text form) and writes them to t's log when t has failed by
// the end of the test.
func OnFailure(t testing.TB, level slog.Level) *slog.Logger {
	t.Helper()
	return New(t).Logger(level)
}

// Buffer keeps the last DefaultLimit bytes of the records of every logger
// it gave out, and writes them to its test's log when the test has failed
// by its end. Loggers of different levels share it, so that a chatty
// service can log at Warn beside a quiet one at Info, in one timeline.
type Buffer struct{ r *ring }

// New returns a Buffer that reports to t on failure.
func New(t testing.TB) *Buffer {
	t.Helper()
	b := &Buffer{r: &ring{limit: DefaultLimit}}
	t.Cleanup(func() {
		if t.Failed() {
			if s := b.r.String(); s != "" {
				t.Logf("logs of the services under test (the last %d bytes):\n%s", DefaultLimit, s)
			}
		}
	})
	return b
}

// Logger returns a logger at level writing to b.
func (b *Buffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(b.r, &slog.HandlerOptions{Level: level}))
}

// ring is an io.Writer that keeps the last limit bytes written, cut at a
// line start.
type ring struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	cut   bool
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.limit; over > 0 {
		drop := over
		if i := bytes.IndexByte(r.buf[over:], '\n'); i >= 0 {
			drop = over + i + 1
		}
		r.buf = append(r.buf[:0], r.buf[drop:]...)
		r.cut = true
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return "[earlier records dropped]\n" + string(r.buf)
	}
	return string(r.buf)
}
