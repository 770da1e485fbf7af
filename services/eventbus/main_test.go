package eventbus_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every eventbus,
// client and nats-server a test starts is stopped and waited for.
//
// nats.go v1.55 can leave one goroutine of a closed JetStream context blocked
// forever: cleanup nils the status channel before resetPendingAcksOnReconnect
// reads it (a race in the library, not a goroutine of ours).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
