package cli_test

import (
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/discovery"
	"github.com/switchyard-llm/switchyard/services/cli"
)

// TestStatusPrintsPoolsAndRoles: the MODELS table shows each model's pools
// and the INSTANCES table each instance's role.
func TestStatusPrintsPoolsAndRoles(t *testing.T) {
	st := &cli.Status{
		Models: []cli.ModelStatus{
			{Name: "big", Instances: 3, BlockSize: 16, ContextLength: 8192, Pool: discovery.Pool{Model: "big", Prefill: 2, Decode: 1}},
			{Name: "small", Instances: 1, BlockSize: 16, ContextLength: 8192, Pool: discovery.Pool{Model: "small", Agg: 1}},
		},
		Instances: []cli.InstanceStatus{
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
