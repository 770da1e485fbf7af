package frontend

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
)

// TestCatalogAdapters: the catalog lists each LoRA adapter a card names as
// a model whose parent is the card's model (with its path as root), a
// model name stays a model even when a card also lists it as an adapter,
// and card() of an adapter is a card of its base that lists it, live
// first.
func TestCatalogAdapters(t *testing.T) {
	c := newCatalog()
	card := func(id uint64, model string, loras ...*registryv1.LoraAdapter) registryclient.Change[*registryv1.ModelCard] {
		return registryclient.Change[*registryv1.ModelCard]{Item: &registryv1.ModelCard{Namespace: "ns", Component: "c", Endpoint: "e",
			InstanceId: id, ModelName: model, BlockSize: 16, LoraAdapters: loras}}
	}
	c.onModels([]registryclient.Change[*registryv1.ModelCard]{
		card(1, "base", &registryv1.LoraAdapter{Name: "sql"}, &registryv1.LoraAdapter{Name: "other"}),
		card(2, "base", &registryv1.LoraAdapter{Name: "sql", Path: "/adapters/sql"}),
		card(3, "other"),
	})
	c.onInstances([]registryclient.Change[*registryv1.Instance]{{Item: &registryv1.Instance{InstanceId: 2}}, {Item: &registryv1.Instance{InstanceId: 3}}})
	want := []listedModel{{id: "base"}, {id: "other"}, {id: "sql", parent: "base", root: "/adapters/sql"}}
	if d := cmp.Diff(want, c.models(), cmp.AllowUnexported(listedModel{})); d != "" {
		t.Fatalf("models (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		model string
		base  string
		id    uint64
	}{{"sql", "base", 2}, {"other", "other", 3}, {"base", "base", 2}, {"none", "", 0}} {
		got := c.card(tc.model)
		if got.GetModelName() != tc.base || got.GetInstanceId() != tc.id {
			t.Errorf("card(%q) = %s on %d, want %q on %d", tc.model, got.GetModelName(), got.GetInstanceId(), tc.base, tc.id)
		}
	}
}
