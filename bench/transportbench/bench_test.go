package transportbench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/bench/transportbench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the benchmark with a few calls per row and checks that the
// table has a column per system and the targets line.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := transportbench.Run(ctx, &out, 20, 20*time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(out.String(), "\n")
	if got := strings.Fields(header); strings.Join(got, " ") != "floor tcp http nats grpc" {
		t.Errorf("columns %q, want floor tcp http nats grpc", got)
	}
	for _, want := range []string{"frames/s, concurrency 64", "targets: tcp p50 1->1 = "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
}
