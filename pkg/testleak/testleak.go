// Package testleak checks that a test binary leaves no goroutine running,
// with goleak, less the goroutines a library leaks on its own and that no
// caller can stop.
package testleak

import (
	"testing"

	"go.uber.org/goleak"
)

// Known are the goroutines the libraries leak whatever their callers do:
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
	}
}

// VerifyTestMain runs the package's tests and then fails the binary if a
// goroutine is left running, less Known and the options given.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(Known(), opts...)...)
}

// Find returns an error naming the goroutines still running, less Known and
// the options given: for a TestMain that must clean up after its tests
// before checking.
func Find(opts ...goleak.Option) error {
	return goleak.Find(append(Known(), opts...)...)
}
