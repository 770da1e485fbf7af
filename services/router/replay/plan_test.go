package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/mocker/engine"
)

// TestPlanReproducesRun replays the plan a routed run made (each request on
// the worker the router chose) with no router, and gets the run's TTFT and
// E2E for every request and its hit rate: a plan replay is the same engine
// simulation, only the decisions are fixed.
func TestPlanReproducesRun(t *testing.T) {
	for _, name := range []string{"sessions", "mooncake"} {
		t.Run(name, func(t *testing.T) {
			trace, err := BuiltinTrace(name)
			if err != nil {
				t.Fatal(err)
			}
			trace = trace[:200]
			cfg := smallConfig()
			for _, mode := range []string{"kv", "round-robin"} {
				res, recs, err := RunRecorded(trace, cfg, mode)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != len(trace) {
					t.Fatalf("%s: %d of %d requests completed", mode, len(recs), len(trace))
				}
				plan := make([]int, len(trace))
				for _, r := range recs {
					plan[r.Request] = int(r.Worker) - 1
				}
				p, err := RunPlan(trace, cfg, plan)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if p.TTFT[r.Request] != r.TTFT || p.E2E[r.Request] != r.E2E {
						t.Fatalf("%s: request %d: plan TTFT/E2E %v/%v, run %v/%v", mode, r.Request, p.TTFT[r.Request], p.E2E[r.Request], r.TTFT, r.E2E)
					}
				}
				if got := p.HitRate(); got != res.HitRate {
					t.Errorf("%s: plan hit rate %v, run %v", mode, got, res.HitRate)
				}
				if got := p.Percentiles(); got != res.TTFT {
					t.Errorf("%s: plan TTFT percentiles %v, run %v", mode, got, res.TTFT)
				}
			}
		})
	}
}

// TestPlanEngineByHand checks one engine's plan replay against times the
// engine's own model gives: two requests with the same 1024-token prompt,
// the second arriving while the first's prefill step runs, waits for it
// and then finds every block but the last cached.
func TestPlanEngineByHand(t *testing.T) {
	cfg := smallConfig()
	cfg.RateScale = 1
	bs := cfg.Engine.BlockSize
	first := engine.PrefillTime(1024, 1)
	trace := []Request{
		{Arrival: 0, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
		{Arrival: first / 2, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
	}
	r, err := PlanEngine(trace, cfg, []int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests[0] != 0 || r.Requests[1] != 1 {
		t.Fatalf("requests in order %v, want arrival order", r.Requests)
	}
	// The second computes its last block only: a prompt's last token is
	// always computed.
	if want := []time.Duration{first, first - first/2 + engine.PrefillTime(bs, 1)}; r.TTFT[0] != want[0] || r.TTFT[1] != want[1] {
		t.Fatalf("TTFT %v, want %v", r.TTFT, want)
	}
	if blocks := uint64(1024 / bs); r.Hit != blocks-1 || r.Queried != 2*blocks {
		t.Fatalf("hit %d of %d blocks, want %d of %d", r.Hit, r.Queried, blocks-1, 2*blocks)
	}
}

func TestRunPlanRejectsBadPlans(t *testing.T) {
	trace := []Request{{InputLength: 1, OutputLength: 1, HashIDs: []uint64{1}}}
	cfg := smallConfig()
	for _, tt := range []struct {
		plan []int
		want string
	}{
		{nil, "plan of 0 requests"},
		{[]int{cfg.Workers}, "on engine 4 of 4"},
		{[]int{-1}, "on engine -1"},
	} {
		if _, err := RunPlan(trace, cfg, tt.plan); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("plan %v: err %v, want %q", tt.plan, err, tt.want)
		}
	}
}
