// Package testwait waits in tests for a condition that no event announces:
// state behind a round trip (a watch caught up, a lease refreshed, a load
// report applied). It polls, bounded in time, and fails the test with what it
// waited for. Where an event or a channel says the condition holds, wait on
// that instead.
package testwait

import (
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
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
			return // for a testing.TB whose Fatalf returns
		}
		time.Sleep(Interval)
	}
}
