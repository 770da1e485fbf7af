package router

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// metricsCluster is a core with two workers of model (block size 4), each
// having reported an idle load; worker 2 holds the first 12 blocks of
// prompt, told twice (the second a duplicate).
func metricsCluster(t *testing.T, prompt []uint32) *core.Core {
	t.Helper()
	cfg := core.DefaultConfig()
	cfg.Seed = 1
	c := core.New(cfg)
	for i := uint64(1); i <= 2; i++ {
		c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
			InstanceId: i, Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}}})
		c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
			InstanceId: i, ModelName: "Qwen/Qwen3-0.6B", BlockSize: 4}}})
		c.ReportLoad(&workerv1.LoadMetrics{InstanceId: i, Requests: []*workerv1.RequestLoad{}})
	}
	ev := &workerv1.KvBlocksStored{}
	for _, b := range kvhash.Hashes(prompt[:48], 4, nil) {
		ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	for range 2 {
		c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: 2, FirstEventId: 1, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
	}
	return c
}

func modelTarget() *routerv1.Target {
	return &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}
}

func TestRouterMetricsDecorateTheCore(t *testing.T) {
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(i)*7 + 1
	}
	c := metricsCluster(t, prompt)
	reg := prometheus.NewRegistry()
	m := newRouterMetrics(reg, c)
	srv := meter(&server{core: c}, m, modeLabel(c))
	if _, err := srv.Route(context.Background(), &routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Route(context.Background(), &routerv1.RouteRequest{RequestId: "b", Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "nope"}}, TokenIds: prompt}); err == nil {
		t.Fatal("routing an unknown model succeeded")
	}
	want := `
# HELP switchyard_router_decisions_total Routing decisions, by mode and model.
# TYPE switchyard_router_decisions_total counter
switchyard_router_decisions_total{mode="kv",model="Qwen/Qwen3-0.6B"} 1
# HELP switchyard_router_kv_events_applied_total KV events applied to the index.
# TYPE switchyard_router_kv_events_applied_total counter
switchyard_router_kv_events_applied_total 1
# HELP switchyard_router_kv_events_duplicate_total KV events dropped as duplicates or late (an id already applied).
# TYPE switchyard_router_kv_events_duplicate_total counter
switchyard_router_kv_events_duplicate_total 1
# HELP switchyard_router_worker_active_requests Requests routed to the worker and not yet freed.
# TYPE switchyard_router_worker_active_requests gauge
switchyard_router_worker_active_requests{instance="1"} 0
switchyard_router_worker_active_requests{instance="2"} 1
# HELP switchyard_router_worker_indexed_blocks Blocks the index says the worker caches.
# TYPE switchyard_router_worker_indexed_blocks gauge
switchyard_router_worker_indexed_blocks{instance="1"} 0
switchyard_router_worker_indexed_blocks{instance="2"} 12
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "switchyard_router_decisions_total", "switchyard_router_kv_events_applied_total",
		"switchyard_router_kv_events_duplicate_total", "switchyard_router_worker_active_requests", "switchyard_router_worker_indexed_blocks"); err != nil {
		t.Fatal(err)
	}
	// The first token of a comes: the model's lateness is known.
	late := func() int { return testutil.CollectAndCount(reg, "switchyard_router_first_token_lateness_seconds") }
	if n := late(); n != 0 {
		t.Fatalf("%d lateness series before a first token", n)
	}
	if _, err := srv.MarkPrefillComplete(context.Background(), &routerv1.MarkPrefillCompleteRequest{RequestId: "a"}); err != nil {
		t.Fatal(err)
	}
	if n := late(); n != 1 {
		t.Fatalf("%d lateness series after a first token, want 1 (the model's)", n)
	}
	// 12 of 16 blocks cached on the chosen worker: one observation in the
	// 0.8 bucket's range.
	if got := testutil.CollectAndCount(m.cachedShare); got != 1 {
		t.Fatalf("%d cached-share series", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP switchyard_router_cached_share Share of each routed request's full blocks the chosen worker caches (0..1).
# TYPE switchyard_router_cached_share histogram
switchyard_router_cached_share_bucket{mode="kv",le="0"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.1"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.2"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.3"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.4"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.5"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.6"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.7"} 0
switchyard_router_cached_share_bucket{mode="kv",le="0.8"} 1
switchyard_router_cached_share_bucket{mode="kv",le="0.9"} 1
switchyard_router_cached_share_bucket{mode="kv",le="0.95"} 1
switchyard_router_cached_share_bucket{mode="kv",le="1"} 1
switchyard_router_cached_share_bucket{mode="kv",le="+Inf"} 1
switchyard_router_cached_share_sum{mode="kv"} 0.75
switchyard_router_cached_share_count{mode="kv"} 1
`), "switchyard_router_cached_share"); err != nil {
		t.Fatal(err)
	}
}

// TestDisaggDecisionsCounted routes requests of a model with a prefill and
// a decode worker under each --disaggregation setting: each decision is
// counted as remote_prefill or local_prefill, and an aggregated model's
// as neither.
func TestDisaggDecisionsCounted(t *testing.T) {
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(i)*7 + 1
	}
	for _, tc := range []struct {
		setting       core.Disaggregation
		roles         bool
		remote, local float64
	}{
		{core.DisaggAlways, true, 3, 0},
		{core.DisaggOff, true, 0, 3},
		{core.DisaggAuto, false, 0, 0},
	} {
		t.Run(string(tc.setting), func(t *testing.T) {
			cfg := core.DefaultConfig()
			cfg.Seed, cfg.Disaggregation = 1, tc.setting
			c := core.New(cfg)
			for i, role := range []commonv1.Role{commonv1.Role_ROLE_PREFILL, commonv1.Role_ROLE_DECODE} {
				if !tc.roles {
					role = commonv1.Role_ROLE_UNSPECIFIED
				}
				id := uint64(i + 1)
				c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
					InstanceId: id, Role: role, Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}}})
				c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
					InstanceId: id, ModelName: "Qwen/Qwen3-0.6B", BlockSize: 4}}})
			}
			reg := prometheus.NewRegistry()
			srv := meter(&server{core: c}, newRouterMetrics(reg, c), modeLabel(c))
			for _, id := range []string{"a", "b", "c"} {
				if _, err := srv.Route(context.Background(), &routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: prompt}); err != nil {
					t.Fatal(err)
				}
			}
			want := "# HELP switchyard_router_disagg_decisions_total Requests of models with prefill and decode workers routed, by where their prompt is computed: remote_prefill (a prefill worker, then the KV moves to the decode worker) or local_prefill (the worker that decodes).\n" +
				"# TYPE switchyard_router_disagg_decisions_total counter\n" +
				"switchyard_router_disagg_decisions_total{decision=\"local_prefill\"} " + ftoa(tc.local) + "\n" +
				"switchyard_router_disagg_decisions_total{decision=\"remote_prefill\"} " + ftoa(tc.remote) + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "switchyard_router_disagg_decisions_total"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestSessionMetrics routes three turns of one session and one of another
// through the metered server, then their worker leaves: the session
// series count 2 bindings made, 2 hits, and 2 bindings ended with their
// worker, none live.
func TestSessionMetrics(t *testing.T) {
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(i)*7 + 1
	}
	c := metricsCluster(t, prompt)
	reg := prometheus.NewRegistry()
	srv := meter(&server{core: c}, newRouterMetrics(reg, c), modeLabel(c))
	bound := map[string]uint64{}
	for i, s := range []string{"a", "a", "a", "b"} {
		resp, err := srv.Route(context.Background(), &routerv1.RouteRequest{RequestId: strconv.Itoa(i), Target: modelTarget(), TokenIds: prompt, SessionId: s})
		if err != nil {
			t.Fatal(err)
		}
		bound[s] = resp.InstanceId
		c.Free(strconv.Itoa(i))
	}
	if bound["a"] != bound["b"] {
		// The same prompt on an idle pair: both go to worker 2, which
		// caches it.
		t.Fatalf("sessions bound to %v", bound)
	}
	// Their worker leaves, and both bindings with it.
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Deleted: true, Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend",
		Endpoint: "generate", InstanceId: bound["a"]}}})
	want := `# HELP switchyard_router_session_binds_total Requests of a session without a live binding this replica routed, binding it to the worker chosen.
# TYPE switchyard_router_session_binds_total counter
switchyard_router_session_binds_total 2
# HELP switchyard_router_session_bindings Live session bindings (x-session-id to worker), this replica's and its peers'.
# TYPE switchyard_router_session_bindings gauge
switchyard_router_session_bindings 0
# HELP switchyard_router_session_ends_total Session bindings that ended, by reason: expired (idle past --session-ttl), evicted (past --session-max-bindings) or worker_gone (its worker left).
# TYPE switchyard_router_session_ends_total counter
switchyard_router_session_ends_total{reason="evicted"} 0
switchyard_router_session_ends_total{reason="expired"} 0
switchyard_router_session_ends_total{reason="worker_gone"} 2
# HELP switchyard_router_session_hits_total Requests of a bound session this replica routed to the bound worker.
# TYPE switchyard_router_session_hits_total counter
switchyard_router_session_hits_total 2
# HELP switchyard_router_session_moves_total Requests of a bound session this replica routed elsewhere, moving the binding, by reason: load (soft affinity: the bound worker was full, the other was not) or unavailable (the bound worker was excluded or does not serve the model).
# TYPE switchyard_router_session_moves_total counter
switchyard_router_session_moves_total{reason="load"} 0
switchyard_router_session_moves_total{reason="unavailable"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "switchyard_router_session_binds_total", "switchyard_router_session_bindings",
		"switchyard_router_session_ends_total", "switchyard_router_session_hits_total", "switchyard_router_session_moves_total"); err != nil {
		t.Fatal(err)
	}
}
