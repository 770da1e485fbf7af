package worker_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// TestLoadSampler checks which ticks publish: the first report, a report
// that changed in anything but its timestamp (counters and ranks
// included), an unchanged one once the heartbeat has passed since the last
// published, and an unchanged one whose predecessor was not published.
func TestLoadSampler(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	load := func(used uint64, ts int64, mod ...func(*workerv1.LoadMetrics)) []*workerv1.LoadMetrics {
		m := &workerv1.LoadMetrics{InstanceId: 7, KvBlocksUsed: used, KvBlocksTotal: 100, Timestamp: timestamppb.New(t0.Add(time.Duration(ts) * time.Second)),
			Requests: []*workerv1.RequestLoad{{RequestId: "a", PrefillTokens: 10}}}
		for _, f := range mod {
			f(m)
		}
		return []*workerv1.LoadMetrics{m}
	}
	type tick struct {
		at        time.Duration
		ms        []*workerv1.LoadMetrics
		published bool // the publish succeeded, when due
		due       bool
	}
	const hb = 2 * time.Second
	for _, tc := range []struct {
		name  string
		ticks []tick
	}{
		{"first report", []tick{{0, load(1, 0), true, true}}},
		{"unchanged within the heartbeat, then past it", []tick{
			{0, load(1, 0), true, true}, {time.Second, load(1, 1), true, false},
			{2 * time.Second, load(1, 2), true, true}, {3 * time.Second, load(1, 3), true, false}}},
		{"changed load", []tick{{0, load(1, 0), true, true}, {time.Second, load(2, 1), true, true}, {2 * time.Second, load(2, 2), true, false}}},
		{"a request's prefill advanced", []tick{{0, load(1, 0), true, true},
			{time.Second, load(1, 1, func(m *workerv1.LoadMetrics) { m.Requests[0].PrefillTokens = 0; m.Requests[0].DecodeBlocks = 1 }), true, true}}},
		{"counters moved (a request came and went)", []tick{{0, load(1, 0), true, true},
			{time.Second, load(1, 1, func(m *workerv1.LoadMetrics) { m.RequestsTotal = 1 }), true, true}}},
		{"a rank more", []tick{{0, load(1, 0), true, true},
			{time.Second, append(load(1, 1), &workerv1.LoadMetrics{InstanceId: 7, DpRank: 1}), true, true}}},
		{"a failed publish is retried at the next tick", []tick{
			{0, load(1, 0), true, true}, {time.Second, load(2, 1), false, true}, {1500 * time.Millisecond, load(2, 1), true, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s worker.LoadSampler
			for i, tk := range tc.ticks {
				now := t0.Add(tk.at)
				if got := s.Due(now, hb, tk.ms); got != tk.due {
					t.Fatalf("tick %d at %v: due %v, want %v", i, tk.at, got, tk.due)
				}
				if tk.due && tk.published {
					s.Published(now)
				}
			}
		})
	}
}
