package replay

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// TestPlanReproducesRun replays the plan a routed run made (each request on
// the worker the router chose) with no router, and gets the run's TTFT and
// E2E for every request and its hit rate: a plan replay is the same engine
// simulation, only the decisions are fixed.
func TestPlanReproducesRun(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 100
	}
	for _, name := range []string{"sessions", "mooncake"} {
		t.Run(name, func(t *testing.T) {
			trace, err := BuiltinTrace(name)
			if err != nil {
				t.Fatal(err)
			}
			trace = trace[:n]
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
// and then finds every block but the last cached, which it computes after
// them.
func TestPlanEngineByHand(t *testing.T) {
	cfg := smallConfig()
	cfg.RateScale = 1
	bs := cfg.Engine.BlockSize
	first := simengine.PrefillTime(1024, 1)
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
	if want := []time.Duration{first, first - first/2 + simengine.PrefillAfter(1024-bs, bs, 1)}; r.TTFT[0] != want[0] || r.TTFT[1] != want[1] {
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

// TestRolloutLooksAhead: a long cold prompt arrives at the engine that
// caches a short request's prefix just before that request. Placed there
// (as the base plan has it) it makes the short one wait past the
// threshold; a rollout that sees the short one coming sends the long one
// to the idle engine. One that looks no further than each request keeps
// the long one there, and then sends the short one away from its cache.
func TestRolloutLooksAhead(t *testing.T) {
	cfg := smallConfig()
	cfg.Workers, cfg.RateScale = 2, 1
	ms := time.Millisecond
	cold := make([]uint64, 16)
	for i := range cold {
		cold[i] = uint64(10 + i)
	}
	trace := []Request{
		{Arrival: 0, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
		{Arrival: 100 * ms, InputLength: 8192, OutputLength: 1, HashIDs: cold},
		{Arrival: 110 * ms, InputLength: 1536, OutputLength: 1, HashIDs: []uint64{1, 2, 3}},
	}
	base := []int{0, 0, 0}
	for _, tt := range []struct {
		window time.Duration
		want   []int
	}{
		{time.Second, []int{0, 1, 0}},
		{0, []int{0, 0, 1}},
	} {
		t.Run(tt.window.String(), func(t *testing.T) {
			r, err := Rollout(trace, cfg, base, tt.window, 100*ms)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Plan, tt.want) {
				t.Fatalf("plan %v, want %v", r.Plan, tt.want)
			}
			if r.Changed != 1 {
				t.Errorf("changed %d, want 1", r.Changed)
			}
			p, err := RunPlan(trace, cfg, r.Plan)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.TTFT, r.TTFT) {
				t.Fatalf("rollout's TTFTs %v, its plan's replay %v", r.TTFT, p.TTFT)
			}
			if short := simengine.PrefillAfter(1024, 512, 1) + simengine.RequestOverhead(1); tt.want[1] == 1 && r.TTFT[2] != short {
				t.Errorf("short request's TTFT %v, want its 512 new tokens' prefill after its cached 1024, and its overhead, %v", r.TTFT[2], short)
			}
		})
	}
}

// TestRolloutPlanIsItsReplay runs a rollout from round-robin's placement
// on the start of the sessions trace: it moves requests, the TTFTs it
// built its plan with are the plan's replay, request by request, and a
// second run gives the same plan.
func TestRolloutPlanIsItsReplay(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:50]
	cfg := smallConfig()
	base := make([]int, len(trace))
	for n := range base {
		base[n] = n % cfg.Workers
	}
	b := ComputeBounds(trace, cfg)
	threshold := b.FloorTTFT[1] * 3 / 2
	r, err := Rollout(trace, cfg, base, 500*time.Millisecond, threshold)
	if err != nil {
		t.Fatal(err)
	}
	if r.Changed == 0 {
		t.Fatal("the rollout kept round-robin's placement")
	}
	p, err := RunPlan(trace, cfg, r.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.TTFT, r.TTFT) {
		t.Fatal("the rollout's TTFTs are not its plan's replay")
	}
	again, err := Rollout(trace, cfg, base, 500*time.Millisecond, threshold)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Plan, r.Plan) {
		t.Fatal("two rollouts from one base differ")
	}
}

func TestRolloutRejectsBadInput(t *testing.T) {
	trace := []Request{{InputLength: 1, OutputLength: 1, HashIDs: []uint64{1}}}
	cfg := smallConfig()
	for _, tt := range []struct {
		plan              []int
		window, threshold time.Duration
		want              string
	}{
		{nil, 0, time.Second, "plan of 0 requests"},
		{[]int{cfg.Workers}, 0, time.Second, "on engine 4 of 4"},
		{[]int{0}, -1, time.Second, "window must not be negative"},
		{[]int{0}, 0, 0, "threshold must be positive"},
	} {
		if _, err := Rollout(trace, cfg, tt.plan, tt.window, tt.threshold); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("plan %v window %v threshold %v: err %v, want %q", tt.plan, tt.window, tt.threshold, err, tt.want)
		}
	}
}
