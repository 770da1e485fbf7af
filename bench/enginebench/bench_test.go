package enginebench

import (
	"strings"
	"testing"
)

func TestRunPrintsTable(t *testing.T) {
	var out strings.Builder
	cfg := Config{Requests: 20, Concurrency: []int{1, 4}, SharedPrefix: 32, UniqueTokens: 16, OutputTokens: 5}
	if err := Run(cfg, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "sim output tok/s") {
		t.Fatalf("table:\n%s", out.String())
	}
	// 32 of 48 prompt tokens are shared: 2 of 3 blocks hit after the first
	// request (whose last block is recomputed anyway).
	for _, l := range lines[1:] {
		if !strings.Contains(l, "%") || strings.Contains(l, " 0.0%") {
			t.Errorf("row without prefix hits: %q", l)
		}
	}
}
