package adapter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStatsAreExported(t *testing.T) {
	var s Stats
	s.Gaps.Add(2)
	s.Replayed.Add(5)
	s.Restarts.Add(1)
	s.BlockSizeMismatches.Add(3)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStatsCollector(&s))
	want := `
# HELP switchyard_adapter_kv_gaps_total Gaps in the engine's KV message sequence numbers.
# TYPE switchyard_adapter_kv_gaps_total counter
switchyard_adapter_kv_gaps_total 2
# HELP switchyard_adapter_kv_replayed_messages_total KV messages recovered from the engine's replay socket after a gap.
# TYPE switchyard_adapter_kv_replayed_messages_total counter
switchyard_adapter_kv_replayed_messages_total 5
# HELP switchyard_adapter_engine_restarts_total Engine restarts seen (sequence numbers going back).
# TYPE switchyard_adapter_engine_restarts_total counter
switchyard_adapter_engine_restarts_total 1
# HELP switchyard_adapter_block_size_mismatches_total Stored events whose block size is not --block-size (not published).
# TYPE switchyard_adapter_block_size_mismatches_total counter
switchyard_adapter_block_size_mismatches_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "switchyard_adapter_kv_gaps_total", "switchyard_adapter_kv_replayed_messages_total",
		"switchyard_adapter_engine_restarts_total", "switchyard_adapter_block_size_mismatches_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(newStatsCollector(&s)); n != len(statsMetrics) {
		t.Fatalf("%d series, want %d", n, len(statsMetrics))
	}
}
