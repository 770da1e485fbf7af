package eventbusbench

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// nats.go v1.55 can leave one goroutine of a closed JetStream context blocked
// forever: cleanup nils the status channel before resetPendingAcksOnReconnect
// reads it (a race in the library, not a goroutine of ours).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
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
