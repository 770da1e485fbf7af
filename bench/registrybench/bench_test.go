package registrybench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/bench/registrybench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the whole benchmark at a small size, with the registry in
// process, and checks that its table has every row.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := registrybench.Config{Registrations: 20, Concurrency: 4, WatchSamples: 10, Sessions: 20,
		SessionTTL: 5 * time.Second, CPUWindow: 100 * time.Millisecond, RegistryBin: "", Fsync: false}
	var out bytes.Buffer
	if err := registrybench.Run(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"registry process", "registrations/s (20, concurrency 4)", "write ack -> watch event p99",
		"sessions kept alive", "keep-alives/s served", "registry CPU for those sessions"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("the table lacks %q:\n%s", row, out.String())
		}
	}
}
