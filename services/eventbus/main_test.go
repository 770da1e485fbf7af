package eventbus_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every eventbus,
// client and nats-server a test starts is stopped and waited for.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
