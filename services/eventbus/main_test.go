package eventbus_test

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/testleak"
)

// TestMain checks that no test leaves a goroutine behind: every eventbus,
// client and nats-server a test starts is stopped and waited for.
func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}
