package adapter

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/obs"
)

// statsCollector exports Stats, read at each scrape.
type statsCollector struct {
	stats *Stats
	descs []*prometheus.Desc
}

var statsMetrics = []struct {
	name, help string
	value      func(*Stats) uint64
}{
	{"switchyard_adapter_kv_messages_total", "KV event messages decoded from the engine.", func(s *Stats) uint64 { return s.Messages.Load() }},
	{"switchyard_adapter_kv_malformed_messages_total", "KV event messages from the engine that did not decode.", func(s *Stats) uint64 { return s.Malformed.Load() }},
	{"switchyard_adapter_kv_gaps_total", "Gaps in the engine's KV message sequence numbers.", func(s *Stats) uint64 { return s.Gaps.Load() }},
	{"switchyard_adapter_kv_lost_messages_total", "KV messages lost in gaps.", func(s *Stats) uint64 { return s.LostMessages.Load() }},
	{"switchyard_adapter_kv_replayed_messages_total", "KV messages recovered from the engine's replay socket after a gap.", func(s *Stats) uint64 { return s.Replayed.Load() }},
	{"switchyard_adapter_engine_restarts_total", "Engine restarts seen (sequence numbers going back).", func(s *Stats) uint64 { return s.Restarts.Load() }},
	{"switchyard_adapter_block_size_mismatches_total", "Stored events whose block size is not --block-size (not published).", func(s *Stats) uint64 { return s.BlockSizeMismatches.Load() }},
	{"switchyard_adapter_kv_skipped_events_total", "Engine KV events skipped (not on the GPU, LoRA, partial blocks, unknown parent).", func(s *Stats) uint64 { return s.Skipped.Load() }},
	{"switchyard_adapter_kv_unknown_removals_total", "Removed engine hashes the adapter never stored.", func(s *Stats) uint64 { return s.UnknownRemovals.Load() }},
	{"switchyard_adapter_kv_published_events_total", "KV events published to the eventbus.", func(s *Stats) uint64 { return s.Published.Load() }},
}

func newStatsCollector(s *Stats) *statsCollector {
	c := &statsCollector{stats: s}
	for _, m := range statsMetrics {
		c.descs = append(c.descs, prometheus.NewDesc(m.name, m.help, nil, nil))
	}
	return c
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	for i, m := range statsMetrics {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(m.value(c.stats)))
	}
}

// serveMetrics starts --metrics-addr and --debug-addr when set: the KV event
// counters and the engine's load as last scraped (switchyard_engine_*,
// summed over its data-parallel ranks).
func serveMetrics(ctx context.Context, cfg Config, load *atomic.Pointer[[]*workerv1.LoadMetrics], log *slog.Logger) (stop func(), err error) {
	stop, _, err = obs.ServeMetrics(ctx, cfg.MetricsAddr, cfg.DebugAddr, log,
		newStatsCollector(cfg.Stats), obs.NewEngineCollector(func() obs.EngineSnapshot {
			var s obs.EngineSnapshot
			for _, m := range *load.Load() {
				s.Running += int(m.GetRunningRequests())
				s.Waiting += int(m.GetWaitingRequests())
				s.KVBlocksUsed += int(m.GetKvBlocksUsed())
				s.KVBlocksTotal += int(m.GetKvBlocksTotal())
			}
			return s
		}))
	return stop, err
}
