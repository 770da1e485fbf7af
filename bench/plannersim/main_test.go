package plannersim

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/testleak"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}
