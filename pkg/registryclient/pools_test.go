package registryclient

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

func TestPools(t *testing.T) {
	in := func(comp string, id uint64, role commonv1.Role) *registryv1.Instance {
		return &registryv1.Instance{Namespace: "ns", Component: comp, Endpoint: "generate", InstanceId: id, Role: role}
	}
	card := func(comp string, id uint64, model string) *registryv1.ModelCard {
		return &registryv1.ModelCard{Namespace: "ns", Component: comp, Endpoint: "generate", InstanceId: id, ModelName: model}
	}
	instances := []*registryv1.Instance{
		in("prefill", 1, commonv1.Role_ROLE_PREFILL), in("prefill", 2, commonv1.Role_ROLE_PREFILL),
		in("decode", 3, commonv1.Role_ROLE_DECODE),
		in("backend", 4, commonv1.Role_ROLE_UNSPECIFIED), in("backend", 5, commonv1.Role_ROLE_AGG),
	}
	cards := []*registryv1.ModelCard{
		card("prefill", 1, "big"), card("prefill", 2, "big"), card("decode", 3, "big"),
		card("backend", 4, "small"), card("backend", 5, "small"),
		card("backend", 9, "orphan"), // its instance is not listed
		card("decode", 1, "small"),   // instance 1 is prefill under component "prefill", not this one
	}
	got := Pools(cards, instances)
	want := []Pool{{Model: "big", Prefill: 2, Decode: 1}, {Model: "orphan", Agg: 1}, {Model: "small", Agg: 3}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Pools (-want +got):\n%s", d)
	}
	strs := map[string]string{"big": "prefill 2, decode 1", "orphan": "agg 1", "small": "agg 3"}
	for _, p := range got {
		if p.String() != strs[p.Model] {
			t.Errorf("%s: %q, want %q", p.Model, p.String(), strs[p.Model])
		}
	}
	if !got[0].Disaggregated() || got[2].Disaggregated() {
		t.Error("Disaggregated: big has both pools, small has none")
	}
	if (Pool{}).String() != "-" || (Pool{Agg: 12}).String() != "agg 12" {
		t.Error("empty and two-digit pools")
	}
}
