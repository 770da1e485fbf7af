package kvbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/kvbench"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

// TestRunSmall runs the benchmark small in every mode: each restarted
// router is exact again over every block published.
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := kvbench.DefaultOptions()
	o.Workers, o.Batches, o.Probes = 2, 10, 10
	res, err := kvbench.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(o.Modes) {
		t.Fatalf("%d results for %d modes", len(res), len(o.Modes))
	}
	want := o.Workers * o.Batches * o.EventsPerBatch * o.BlocksPerEvent
	for i, r := range res {
		if r.Mode != o.Modes[i] || !r.Exact || r.Blocks < want || r.BlockEventsPerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("%s: %+v; want exact over at least %d blocks", o.Modes[i], r, want)
		}
	}
	if res[0].Mode != kvevents.JetStream {
		t.Errorf("first mode %s", res[0].Mode)
	}
}

// BenchmarkDirect is the direct mode's figures at the command's sizes but
// fewer batches, as a Go benchmark (block events per second).
func BenchmarkDirect(b *testing.B) {
	o := kvbench.DefaultOptions()
	o.Modes, o.Batches, o.Probes = []kvevents.Mode{kvevents.Direct}, 200, 50
	for b.Loop() {
		res, err := kvbench.Run(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res[0].BlockEventsPerSec, "block-events/s")
		b.ReportMetric(float64(res[0].P50.Microseconds()), "p50-µs")
	}
}
