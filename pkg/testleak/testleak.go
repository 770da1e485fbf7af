// Package testleak checks that a test binary leaves no goroutine running,
// with goleak, less the goroutines a library leaks on its own and that no
// caller can stop.
package testleak

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Known are the goroutines the libraries leak whatever their callers do:
//
// nats-server (v2.15) can leave one JetStream file store's state-flushing
// loop running after its server's Shutdown and WaitForShutdown returned,
// with every other goroutine of that server ended; the loop ends only when
// its store is stopped, which the server's shutdown did not do, and the
// package-wide access-time ticker the store registered (ats) runs while any
// store is registered. Seen in services/router's tests, which stop and
// start servers while the eventbus creates streams. A caller holds no
// handle on that store, so these two are ignored; a server left running is
// still found by its other goroutines (its accept loops, its routes).
//
// nats.go's JetStream publisher (v1.55) starts resetPendingAcksOnReconnect
// when its first asynchronous publish sets up the reply subscription. The
// goroutine reads the connection-status channel from the publisher under
// its lock; when the JetStream context is cleaned up first (its connection
// closed right after that publish), the field is already nil and the
// goroutine blocks forever receiving from a nil channel. Nothing outside
// the library can wake it, so every package whose services publish through
// JetStream ignores it.
func Known() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	}
}

// VerifyTestMain runs the package's tests and then fails the binary if a
// goroutine is left running, less Known and the options given, once Settle
// has given the goroutines still finishing their work time to end.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Settle is how long Find waits for goroutines to end before naming them.
// goleak alone retries for about half a second; a server stopped by the
// last test (an embedded nats-server's connection handlers, which end after
// its Shutdown returns) can take longer than that on a loaded 2-core machine
// running the race detector, and is not a leak. A goroutine that never ends
// is still named, Settle later.
const Settle = 10 * time.Second

// Find returns an error naming the goroutines still running after Settle,
// less Known and the options given: for a TestMain that must clean up after
// its tests before checking.
func Find(opts ...goleak.Option) error { return find(Settle, opts...) }

func find(settle time.Duration, opts ...goleak.Option) error {
	opts = append(Known(), opts...)
	deadline := time.Now().Add(settle)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
