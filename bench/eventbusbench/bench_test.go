package eventbusbench

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

func startEnv(b *testing.B) *Env {
	b.Helper()
	dir := b.TempDir()
	e, err := Start(dir, true, eventbustest.Logger())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	return e
}

// BenchmarkPublishDeliver publishes b.N batches of 500 200-byte events, each
// with a message id, and reports delivered events per second, through the
// eventbus and directly.
func BenchmarkPublishDeliver(b *testing.B) {
	e := startEnv(b)
	for _, p := range []Path{ViaEventbus, DirectNATS} {
		b.Run(string(p), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.ResetTimer()
			rate, err := e.Throughput(ctx, p, 500*b.N, 500, 16, true)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rate, "events/s")
		})
	}
}

// BenchmarkLatency publishes b.N events one at a time and reports the
// publish -> deliver latency percentiles, through the eventbus and directly.
func BenchmarkLatency(b *testing.B) {
	e := startEnv(b)
	for _, p := range []Path{ViaEventbus, DirectNATS} {
		b.Run(string(p), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.ResetTimer()
			lat, err := e.Latency(ctx, p, max(b.N, 100))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(Percentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(Percentile(lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}
