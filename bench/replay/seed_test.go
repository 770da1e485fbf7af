package replay

import (
	"testing"
	"time"
)

// TestHotPrefixGetsASecondHome replays one application's requests, all
// sharing a 12,000-token system prompt, on 4 engines. At a low rate the
// prompt's one home serves them all. When that home queues, the router
// pays one cold prefill to copy the prompt to another engine, which the
// requests after it share: no request would for its own time to first
// token, since each is cheaper where the prompt is (without the copy's
// credit, all 400 stay on one engine at every one of these rates). From
// about 5 requests a second the home's decoding requests, which wait for
// every prompt it computes, make the copy worth its cold prefill before
// the home queues (DecodeStall): the cases below stay under that.
func TestHotPrefixGetsASecondHome(t *testing.T) {
	tests := []struct {
		name  string
		rate  float64 // requests per second
		homes bool    // more than one engine serves them
	}{
		{name: "low load: one home", rate: 1},
		{name: "light load, short queues: one home", rate: 3},
		{name: "the home queues: a second home", rate: 40, homes: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trace, err := Generate(GenConfig{Requests: 400, Rate: tt.rate, BlockSize: 512, Groups: 1,
				System: Dist{Median: 12000, Min: 1, Max: 12000}, User: Dist{Median: 250, Sigma: 0.5, Min: 16, Max: 4000},
				Output: Dist{Median: 60, Sigma: 0.5, Min: 4, Max: 500}, Turns: 1, Think: time.Second, MaxInput: 100000, Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			cfg := smallConfig()
			cfg.RateScale = 1
			r, err := Run(trace, cfg, "kv")
			if err != nil {
				t.Fatal(err)
			}
			if r.Completed != len(trace) {
				t.Fatalf("%d of %d completed", r.Completed, len(trace))
			}
			// Spread is the busiest engine's prompt tokens over the mean:
			// 4 when one engine takes them all, 2 when two share them.
			if one := r.Spread > 3.99; one == tt.homes {
				t.Fatalf("spread %.2f over %d engines: want a second home %v", r.Spread, cfg.Workers, tt.homes)
			}
			// A copy costs one cold prefill, and the requests keep
			// hitting it.
			if r.HitRate < 0.95 {
				t.Fatalf("hit rate %.3f, want >= 0.95", r.HitRate)
			}
		})
	}
}
