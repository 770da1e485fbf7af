package replay

import (
	"strings"
	"testing"
)

// TestRankModes replays a generated multi-turn trace over two workers of
// two data-parallel ranks each (four engines) in kv, which routes to
// ranks, and kv-rank-blind, which routes to workers and lets each worker
// pick the rank: every request completes in both, and kv's hit rate is
// the higher (a conversation's next turn goes to the rank that holds its
// prefix, not to whichever rank the worker picks). With one rank per
// worker the two modes are the same router and give the same figures.
// Modes that cannot take ranks say so.
func TestRankModes(t *testing.T) {
	g := Presets["sessions"]
	g.Requests = 120
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		dpSize int
	}{{"two ranks", 2}, {"one rank", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Workers, cfg.DPSize = 2, tc.dpSize
			results, err := RunAll(trace, cfg, []string{"kv", "kv-rank-blind"}, []float64{cfg.RateScale}, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				if r.Completed != len(trace) || r.Rejected != 0 {
					t.Errorf("%s: %d completed, %d rejected (%s); want all %d", r.Mode, r.Completed, r.Rejected, r.LastReject, len(trace))
				}
				t.Logf("%s: hit rate %.3f, TTFT p90 %v, later turns away from their worker %d of %d", r.Mode, r.HitRate, r.TTFT[1], r.TurnsAway, r.LaterTurns)
			}
			kv, blind := results[0], results[1]
			if tc.dpSize > 1 && !(kv.HitRate > blind.HitRate) {
				t.Errorf("kv hit rate %.3f, rank-blind %.3f: routing to ranks should hit more", kv.HitRate, blind.HitRate)
			}
			if tc.dpSize <= 1 && (kv.HitRate != blind.HitRate || kv.TTFT != blind.TTFT || kv.E2E != blind.E2E) {
				t.Errorf("one rank per worker: kv %+v and kv-rank-blind %+v differ", kv, blind)
			}
		})
	}
	cfg := smallConfig()
	cfg.DPSize = 2
	for _, mode := range []string{"dynamo", "disagg"} {
		if _, err := Run(trace[:4], cfg, mode); err == nil || !strings.Contains(err.Error(), "does not take --dp-size") {
			t.Errorf("%s with --dp-size 2: %v, want a refusal", mode, err)
		}
	}
	cfg.DPSize = maxDPSize + 1
	if err := cfg.Validate(); err == nil {
		t.Errorf("--dp-size %d validated", cfg.DPSize)
	}
}
