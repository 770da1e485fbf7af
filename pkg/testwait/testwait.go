// Package testwait waits in tests for a condition that no event announces:
// state behind a round trip (a watch caught up, a lease refreshed, a load
// report applied). It polls, bounded in time, and fails the test with what it
// waited for. Where an event or a channel says the condition holds, wait on
// that instead.
package testwait

import (
	"errors"
	"testing"
	"time"
)

// Interval is the time between two checks of a condition. Short enough that
// a test waits little past the moment its condition holds, long enough that a
// condition doing a round trip per check does not load the machine.
const Interval = 10 * time.Millisecond

// Until checks cond every Interval until it holds, and fails the test (from
// the caller's goroutine: t.Fatalf) when it has not held within d. what names
// the condition in the failure: "timed out after 20s waiting for <what>".
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// UntilNil is Until for a condition that can say why it does not hold yet:
// cond returns nil once it holds, and the failure after d carries the last
// error it returned: "timed out after 20s waiting for <what>: <err>".
func UntilNil(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	var err error
	if !poll(d, func() error { err = cond(); return err }) {
		t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
	}
}

var errNotYet = errors.New("not yet")

// poll checks cond every Interval until it returns nil (true) or d has
// passed since the first check (false).
func poll(d time.Duration, cond func() error) bool {
	deadline := time.Now().Add(d)
	for cond() != nil {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}
