package ctl_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/ctl"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// TestStatusPrintsPoolsAndRoles: the MODELS table shows each model's pools
// and the INSTANCES table each instance's role.
func TestStatusPrintsPoolsAndRoles(t *testing.T) {
	st := &ctl.Status{
		Models: []ctl.ModelStatus{
			{Name: "big", Instances: 3, BlockSize: 16, ContextLength: 8192, Pool: registryclient.Pool{Model: "big", Prefill: 2, Decode: 1}},
			{Name: "small", Instances: 1, BlockSize: 16, ContextLength: 8192, Pool: registryclient.Pool{Model: "small", Agg: 1}},
		},
		Instances: []ctl.InstanceStatus{
			{ID: "1a", Namespace: "ns", Component: "prefill", Endpoint: "generate", Transport: "tcp", Address: "h:1", Role: "prefill", State: "live", Models: "big"},
			{ID: "2b", Namespace: "ns", Component: "decode", Endpoint: "generate", Transport: "tcp", Address: "h:2", Role: "decode", State: "live", Models: "big"},
		},
	}
	var b strings.Builder
	st.Print(&b)
	out := b.String()
	lines := strings.Split(out, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Fatalf("no line starting with %q in\n%s", prefix, out)
		return ""
	}
	for _, c := range []struct{ line, want string }{
		{"NAME", "POOLS"},
		{"big", "prefill 2, decode 1"},
		{"small", "agg 1"},
		{"ID", "ROLE"},
		{"1a", "prefill"},
		{"2b", "decode"},
	} {
		if l := find(c.line); !strings.Contains(l, c.want) {
			t.Errorf("line %q lacks %q", l, c.want)
		}
	}
}

// TestStatusPrintsThePlannersDecision: with a decision in the registry,
// status shows each pool's workers, target and the reason.
func TestStatusPrintsThePlannersDecision(t *testing.T) {
	st := &ctl.Status{Planner: &core.Decision{ID: 42, At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Pools: []core.PoolDecision{{
		PoolKey: core.PoolKey{Model: "big", Role: core.Decode}, Current: 2, Target: 3, Reason: "throughput: 9 req/s forecast",
		Inputs: core.Inputs{Forecast: core.Demand{RequestsPerSec: 9}, CapacityRPS: 4},
	}}}}
	var b strings.Builder
	st.Print(&b)
	out := b.String()
	for _, want := range []string{"PLANNER (decision 42, 2026-01-02T03:04:05Z)", "REASON", "big", "decode", "9.00", "4.00", "throughput: 9 req/s forecast"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	var none strings.Builder
	(&ctl.Status{}).Print(&none)
	if strings.Contains(none.String(), "PLANNER") {
		t.Error("a PLANNER section without a planner")
	}
}
