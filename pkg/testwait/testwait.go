// Package testwait waits in tests for a condition that no event announces:
// state behind a round trip (a watch caught up, a lease refreshed, a load
// report applied). It polls, bounded in time, and fails the test with what it
// waited for. Where an event or a channel says the condition holds, wait on
// that instead.
package testwait

import (
	"errors"
	"flag"
	"strconv"
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

// AtLeastParallel raises -test.parallel to n unless the command line set it:
// for a TestMain (before m.Run; it parses the flags if they are not yet) of a
// package whose parallel tests spend their time waiting out leases,
// timeouts, restarts and cuts rather than computing, so that they overlap
// where go test's default (as many at once as cores) would run them two by
// two on a 2-core machine. An explicit -parallel always wins. It panics
// outside a test binary.
func AtLeastParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.parallel")
	if f == nil {
		panic("testwait: AtLeastParallel outside a test binary (no -test.parallel flag)")
	}
	explicit := false
	flag.Visit(func(v *flag.Flag) { explicit = explicit || v.Name == "test.parallel" })
	if cur, err := strconv.Atoi(f.Value.String()); explicit || (err == nil && cur >= n) {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic("testwait: " + err.Error())
	}
}
