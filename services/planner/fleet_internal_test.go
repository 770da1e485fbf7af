package planner

import (
	"flag"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

func inst(id uint64, role commonv1.Role) *registryv1.Instance {
	return &registryv1.Instance{Namespace: "ns", Component: "c", Endpoint: "generate", InstanceId: id, Role: role}
}

func card(id uint64, model string) *registryv1.ModelCard {
	return &registryv1.ModelCard{Namespace: "ns", Component: "c", Endpoint: "generate", InstanceId: id, ModelName: model, BlockSize: 16}
}

func TestMembers(t *testing.T) {
	ms := members(
		[]*registryv1.ModelCard{card(1, "a"), card(2, "a"), card(3, "b"), card(4, "a"), card(9, "gone")},
		[]*registryv1.Instance{inst(1, commonv1.Role_ROLE_UNSPECIFIED), inst(2, commonv1.Role_ROLE_PREFILL), inst(3, commonv1.Role_ROLE_AGG), inst(4, commonv1.Role_ROLE_DECODE), inst(5, commonv1.Role_ROLE_AGG)},
	)
	want := map[uint64]core.PoolKey{1: {Model: "a", Role: core.Agg}, 2: {Model: "a", Role: core.Prefill}, 3: {Model: "b", Role: core.Agg}, 4: {Model: "a", Role: core.Decode}}
	if len(ms) != len(want) {
		t.Fatalf("%d members, want %d (a card without its instance, an instance without a card: none)", len(ms), len(want))
	}
	for _, m := range ms {
		if want[m.inst.InstanceId] != m.pool || m.blockSize != 16 {
			t.Errorf("instance %d in %v, want %v", m.inst.InstanceId, m.pool, want[m.inst.InstanceId])
		}
	}
}

func TestObserveMeasuresDemand(t *testing.T) {
	f := newFleet()
	t0 := time.Unix(1000, 0)
	ms := members([]*registryv1.ModelCard{card(1, "a"), card(2, "a"), card(3, "a")},
		[]*registryv1.Instance{inst(1, 0), inst(2, 0), inst(3, 0)})
	load := func(id, req, prompt, out uint64) *workerv1.LoadMetrics {
		return &workerv1.LoadMetrics{InstanceId: id, RequestsTotal: req, PromptTokensTotal: prompt, OutputTokensTotal: out,
			RunningRequests: 2, KvBlocksUsed: 25, KvBlocksTotal: 100}
	}
	none := func(uint64) bool { return false }
	pinned := func(*registryv1.Instance) bool { return false }
	f.report(load(1, 10, 1000, 100), t0)
	f.report(load(2, 0, 0, 0), t0)
	// The first observation only starts the interval: no demand yet.
	o := f.observe(t0, ms, none, pinned, nil)
	if len(o) != 1 || len(o[0].Workers) != 3 || !o[0].Demand.At.IsZero() {
		t.Fatalf("first observation %+v", o)
	}
	// Over 2 s worker 1 takes 10 requests, worker 2 4; worker 3 never
	// reported. Worker 2 drains: its load does not count.
	f.report(load(1, 20, 3000, 300), t0.Add(2*time.Second))
	f.report(load(2, 4, 400, 40), t0.Add(2*time.Second))
	o = f.observe(t0.Add(2*time.Second), ms, func(id uint64) bool { return id == 2 }, pinned, map[core.PoolKey]int{{Model: "a", Role: core.Agg}: 1})
	d := o[0].Demand
	if d.RequestsPerSec != 5 || d.PromptTokensPerSec != 1000 || d.OutputTokensPerSec != 100 || !d.At.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("demand %+v, want 5 req/s, 1000 and 100 tokens/s", d)
	}
	if len(o[0].Workers) != 2 || o[0].Starting != 1 {
		t.Fatalf("workers %d starting %d, want 2 (one draining) and 1", len(o[0].Workers), o[0].Starting)
	}
	w := o[0].Workers[0]
	if w.ID != 1 || w.Running != 2 || w.Usage != 0.25 || w.KVBlocks != 100 || w.BlockSize != 16 || !w.Reported.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("worker %+v", w)
	}
	if o[0].Workers[1].ID != 3 || !o[0].Workers[1].Reported.IsZero() {
		t.Fatalf("worker 3 without a report: %+v", o[0].Workers[1])
	}
	// A worker whose counts go down restarted: it is measured afresh.
	f.report(load(1, 3, 300, 30), t0.Add(3*time.Second))
	o = f.observe(t0.Add(3*time.Second), ms, func(id uint64) bool { return id == 2 }, pinned, nil)
	if !o[0].Demand.At.IsZero() {
		t.Fatalf("demand %+v from a restarted worker's counts", o[0].Demand)
	}
	// Instances that left are forgotten.
	f.observe(t0.Add(4*time.Second), ms[:1], none, pinned, nil)
	if len(f.workers) != 1 {
		t.Fatalf("%d workers remembered, want 1", len(f.workers))
	}
}

// TestObserveCachedPrompt checks the cached prompt tokens' rate: summed
// over the workers that count them; a worker that does not (its reports
// have no cached_prompt_tokens_total) adds its prompts as all computed.
func TestObserveCachedPrompt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := members([]*registryv1.ModelCard{card(1, "a"), card(2, "a")}, []*registryv1.Instance{inst(1, 0), inst(2, 0)})
	none := func(uint64) bool { return false }
	pinned := func(*registryv1.Instance) bool { return false }
	for _, tc := range []struct {
		name string
		// cached1 and cached2 are the workers' counts at the start and
		// 2 s later; 0, 0 is a worker that does not count them.
		cached1, cached2 [2]uint64
		want             float64
	}{
		{"no worker counts them", [2]uint64{}, [2]uint64{}, 0},
		{"one worker counts them", [2]uint64{100, 900}, [2]uint64{}, 400},
		{"both", [2]uint64{100, 900}, [2]uint64{0, 200}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet()
			var o []core.PoolObservation
			for i, at := range []time.Time{t0, t0.Add(2 * time.Second)} {
				f.report(&workerv1.LoadMetrics{InstanceId: 1, RequestsTotal: uint64(10 * i), PromptTokensTotal: uint64(1000 * i), CachedPromptTokensTotal: tc.cached1[i]}, at)
				f.report(&workerv1.LoadMetrics{InstanceId: 2, RequestsTotal: uint64(10 * i), PromptTokensTotal: uint64(1000 * i), CachedPromptTokensTotal: tc.cached2[i]}, at)
				o = f.observe(at, ms, none, pinned, nil)
			}
			// 10 requests of 100 tokens a second in all.
			d := o[0].Demand
			if d.RequestsPerSec != 10 || d.PromptTokensPerSec != 1000 || d.CachedPromptTokensPerSec != tc.want {
				t.Fatalf("demand %+v, want 10 req/s, 1000 prompt tokens/s, %v of them cached", d, tc.want)
			}
			if d.ComputedPromptRequestsPerSec != ([wire.ComputedPromptBuckets]float64{}) {
				t.Fatalf("computed prompts %v, want none counted", d.ComputedPromptRequestsPerSec)
			}
		})
	}
}

// TestObserveComputedPrompts checks the requests' rates by computed
// prompt size: each bucket's rate summed over the workers that count them.
func TestObserveComputedPrompts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := members([]*registryv1.ModelCard{card(1, "a"), card(2, "a")}, []*registryv1.Instance{inst(1, 0), inst(2, 0)})
	none := func(uint64) bool { return false }
	pinned := func(*registryv1.Instance) bool { return false }
	buckets := func(small, large uint64) []uint64 {
		b := make([]uint64, wire.ComputedPromptBuckets)
		b[2], b[wire.ComputedPromptBuckets-1] = small, large
		return b
	}
	f := newFleet()
	var o []core.PoolObservation
	for i, at := range []time.Time{t0, t0.Add(2 * time.Second)} {
		n := uint64(i)
		f.report(&workerv1.LoadMetrics{InstanceId: 1, RequestsTotal: 10 * n, ComputedPromptRequestsTotal: buckets(8*n, 2*n)}, at)
		// A worker that does not count them adds nothing.
		f.report(&workerv1.LoadMetrics{InstanceId: 2, RequestsTotal: 10 * n}, at)
		o = f.observe(at, ms, none, pinned, nil)
	}
	var want [wire.ComputedPromptBuckets]float64
	want[2], want[wire.ComputedPromptBuckets-1] = 4, 1
	if d := o[0].Demand; d.RequestsPerSec != 10 || d.ComputedPromptRequestsPerSec != want {
		t.Fatalf("demand %+v, want 10 req/s and computed prompts %v", d, want)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // part of the error; empty: valid
	}{
		{nil, ""},
		{[]string{"--connector", "local"}, ""},
		{[]string{"--connector", "docker"}, "valid values are local, kubernetes, virtual"},
		{[]string{"--ttft-slo", "0"}, "objectives"},
		{[]string{"--min-replicas", "5", "--max-replicas", "4"}, "replicas"},
		{[]string{"--min-replicas", "4", "--max-replicas", "4"}, ""},
		{[]string{"--predictor", "prophet"}, "valid values are trend, window"},
		{[]string{"--adjustment-interval", "0s"}, "interval"},
		{[]string{"--eventbus-addr", ""}, "--eventbus-addr"},
		{[]string{"--gpus-per-worker", "0"}, "--gpus-per-worker"},
		{[]string{"--connector", "local", "--worker-command", ""}, "--worker-command"},
		{[]string{"--connector", "kubernetes"}, "--kubernetes-deployments"},
		{[]string{"--worker-startup", "-1s"}, "start-up"},
		{[]string{"--worker-startup", "2m"}, ""},
		{[]string{"--demand-quantile", "0.5"}, ""},
		{[]string{"--demand-quantile", "0.99"}, ""},
		{[]string{"--demand-quantile", "0.4"}, "quantile"},
		{[]string{"--demand-quantile", "1"}, "quantile"},
		{[]string{"--objective-window", "0s"}, ""},
		{[]string{"--objective-window", "-30s"}, "window the objectives are judged over"},
		{[]string{"--connector", "kubernetes", "--kubernetes-deployments", "agg=switchyard-worker,decode=dec"}, ""},
		{[]string{"--connector", "kubernetes", "--kubernetes-deployments", "mixed=w"}, "valid roles"},
		{[]string{"--connector", "kubernetes", "--kubernetes-deployments", "agg=a,agg=b"}, "twice"},
		{[]string{"--connector", "kubernetes", "--kubernetes-deployments", "agg=Worker_1"}, "not a Deployment name"},
		{[]string{"--connector", "kubernetes", "--kubernetes-deployments", "agg"}, "role=NAME"},
	} {
		var c Config
		fs := flag.NewFlagSet("planner", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
