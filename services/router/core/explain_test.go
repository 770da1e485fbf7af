package core

import (
	"errors"
	"strings"
	"testing"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// TestExplainDecidesLikeRouteAndRecordsNothing: the pick and the candidates
// are Route's, and after any number of explanations the load, the predicted
// blocks and the round-robin turn are as before.
func TestExplainDecidesLikeRouteAndRecordsNothing(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		wantReason string
		// deterministic: no tie to break at random, so every explanation and
		// the Route after them pick the same worker.
		deterministic bool
	}{
		{name: "kv", cfg: Config{Mode: ModeKV}, wantReason: "kv: lowest cost", deterministic: true},
		{name: "approximate", cfg: Config{Mode: ModeKV, Approximate: true, TTL: 1e12, MaxTreeSize: 1 << 10, PruneTargetRatio: .8}, wantReason: "approximate"},
		{name: "round-robin", cfg: Config{Mode: ModeRoundRobin}, wantReason: "round-robin", deterministic: true},
		{name: "least-loaded", cfg: Config{Mode: ModeLeastLoaded}, wantReason: "least-loaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster(t, tt.cfg, 3)
			prompt := tokens(64, 1)
			if !tt.cfg.Approximate {
				stored(c, 2, 1, prompt[:48])
			}
			req := &routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: prompt}
			before := c.Stats()
			var first *routerv1.ExplainRouteResponse
			for range 5 {
				ex, err := c.Explain(req)
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = ex
				} else if tt.deterministic && ex.InstanceId != first.InstanceId {
					t.Fatalf("explanations differ: %x then %x; Explain must not take a turn", first.InstanceId, ex.InstanceId)
				}
			}
			after := c.Stats()
			for i, w := range after.Workers {
				if w.Requests != before.Workers[i].Requests || w.CachedBlocks != before.Workers[i].CachedBlocks {
					t.Fatalf("Explain recorded something: worker %x %v -> %v", w.InstanceId, before.Workers[i], w)
				}
			}
			if !strings.Contains(first.Reason, tt.wantReason) {
				t.Fatalf("reason %q lacks %q", first.Reason, tt.wantReason)
			}
			if first.RequestBlocks != 16 || first.BlockSize != 4 || len(first.Candidates) != 3 {
				t.Fatalf("explanation = %v", first)
			}
			for _, cd := range first.Candidates {
				if cd.Transport.GetTcp() == "" || cd.Endpoint.GetEndpoint() != "generate" {
					t.Fatalf("candidate without its address: %v", cd)
				}
			}
			// Route picks what Explain said.
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), TokenIds: prompt})
			if err != nil {
				t.Fatal(err)
			}
			if tt.deterministic && resp.InstanceId != first.InstanceId {
				t.Fatalf("Route chose %x, Explain said %x", resp.InstanceId, first.InstanceId)
			}
			if tt.cfg.Mode == ModeKV && !tt.cfg.Approximate && (first.InstanceId != 2 || first.Candidates[1].Candidate.OverlapBlocks != 12) {
				t.Fatalf("kv explanation picked %x with overlaps %v; want worker 2 with 12 blocks", first.InstanceId, first.Candidates)
			}
		})
	}
}

func TestExplainReasons(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 2)
	// Nothing cached: both cost the same.
	ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(16, 5)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ex.Reason, "tied with 1 other") {
		t.Fatalf("reason %q does not name the tie", ex.Reason)
	}
	stored(c, 1, 1, tokens(16, 5))
	ex, err = c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(16, 5)})
	if err != nil {
		t.Fatal(err)
	}
	if ex.InstanceId != 1 || !strings.Contains(ex.Reason, "next best 2") || !strings.Contains(ex.Reason, "caches 4 of the request's 4 blocks") {
		t.Fatalf("picked %x because %q", ex.InstanceId, ex.Reason)
	}
	temp := 0.5
	ex, err = c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(16, 5), Temperature: &temp})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ex.Reason, "softmax") || ex.Temperature != temp {
		t.Fatalf("reason %q at temperature %v", ex.Reason, ex.Temperature)
	}
}

func TestExplainErrorsAreRoutes(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 1)
	for name, tt := range map[string]struct {
		req  *routerv1.ExplainRouteRequest
		want error
	}{
		"no tokens":     {&routerv1.ExplainRouteRequest{Target: modelTarget()}, ErrInvalid},
		"unknown model": {&routerv1.ExplainRouteRequest{Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "nope"}}, TokenIds: []uint32{1}}, ErrUnknownTarget},
		"all excluded":  {&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: []uint32{1}, ExcludeInstanceIds: []uint64{1}}, ErrNoWorker},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := c.Explain(tt.req); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}
