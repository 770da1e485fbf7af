package replay

import (
	"strings"
	"testing"
)

// TestAdapterModes replays a generated trace whose requests carry one of
// six LoRA adapters over four engines of two slots (each adapter served by
// three of the four: adapterPlacement) in kv and kv-adapter-blind: every
// request completes, none reaches an engine that cannot serve its adapter,
// and engines load adapters.
func TestAdapterModes(t *testing.T) {
	g := Presets["sessions"]
	g.Requests = 60
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	AssignLoRAs(trace, 6)
	cfg := smallConfig()
	cfg.Engine.MaxLoras, cfg.Engine.LoraLoadMs = 2, 25
	results, err := RunAll(trace, cfg, []string{"kv", "kv-adapter-blind"}, []float64{cfg.RateScale}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Completed != len(trace) || r.Rejected != 0 {
			t.Errorf("%s: %d completed, %d rejected (%s); want all %d", r.Mode, r.Completed, r.Rejected, r.LastReject, len(trace))
		}
		if r.AdapterRequests != len(trace) || r.AdapterMisrouted != 0 || r.LoraLoads == 0 {
			t.Errorf("%s: %d of %d adapter requests misrouted, %d loads", r.Mode, r.AdapterMisrouted, r.AdapterRequests, r.LoraLoads)
		}
		t.Logf("%s: hit rate %.3f, TTFT p90 %v, %d loads", r.Mode, r.HitRate, r.TTFT[1], r.LoraLoads)
	}
}

// TestAssignLoRAs: requests get adapters by their first block, keep one
// they name, and 0 adapters changes nothing; a trace line's lora_name is
// read and checked.
func TestAssignLoRAs(t *testing.T) {
	trace := []Request{{HashIDs: []uint64{7, 1}}, {HashIDs: []uint64{7, 2}}, {HashIDs: []uint64{3}}, {HashIDs: []uint64{9}, LoRA: "own"}}
	AssignLoRAs(trace, 0)
	if trace[0].LoRA != "" {
		t.Fatal("0 adapters assigned one")
	}
	AssignLoRAs(trace, 4)
	if got := []string{trace[0].LoRA, trace[1].LoRA, trace[2].LoRA, trace[3].LoRA}; strings.Join(got, " ") != "lora-3 lora-3 lora-3 own" {
		t.Fatalf("assigned %v", got)
	}
	line := `{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1], "lora_name": "sql"}`
	tr, err := ParseTrace(strings.NewReader(line), 512)
	if err != nil || tr[0].LoRA != "sql" {
		t.Fatalf("lora_name: %v, %+v", err, tr)
	}
	if _, err := ParseTrace(strings.NewReader(strings.Replace(line, `"sql"`, `"a\nb"`, 1)), 512); err == nil {
		t.Fatal("a lora_name with a control character was read")
	}
}
