package replay

import (
	"bytes"
	"errors"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

func TestParseTraceErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not json", "{", "line 1"},
		{"missing field", `{"timestamp":0,"input_length":10}`, "required"},
		{"negative timestamp", `{"timestamp":-1,"input_length":10,"output_length":1,"hash_ids":[1]}`, "timestamp -1"},
		{"zero input", `{"timestamp":0,"input_length":0,"output_length":1,"hash_ids":[]}`, "input_length 0"},
		{"huge output", `{"timestamp":0,"input_length":1,"output_length":100000,"hash_ids":[1]}`, "output_length 100000"},
		{"too few hash ids", `{"timestamp":0,"input_length":1025,"output_length":1,"hash_ids":[1,2]}`, "fewer than input_length 1025"},
		{"empty", "\n\n", "no requests"},
		{"second line bad", "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n[]", "line 2"},
		{"line over maxLine", `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[1],"pad":"` + strings.Repeat("a", maxLine) + `"}`, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(tt.in), 512)
			if !errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrBadTrace mentioning %q", err, tt.want)
			}
		})
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 600, "output_length": 6, "hash_ids": [0, 1]}`)
	f.Add(`{"timestamp": 1e300, "input_length": 1, "output_length": 1, "hash_ids": [1]}`)
	f.Add(`{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1], "lora_name": "sql-lora"}`)
	f.Add("{}\n{}")
	f.Fuzz(func(t *testing.T, in string) {
		reqs, err := ParseTrace(strings.NewReader(in), 512)
		if err != nil {
			if !errors.Is(err, ErrBadTrace) {
				t.Fatalf("error %v is not ErrBadTrace", err)
			}
			return
		}
		for _, r := range reqs {
			if toks := Tokens(r, 512, nil); len(toks) != r.InputLength {
				t.Fatalf("Tokens gave %d tokens for input_length %d", len(toks), r.InputLength)
			}
		}
	})
}

func TestTokensShareBlocksAsTheTraceSays(t *testing.T) {
	a := Tokens(Request{InputLength: 1000, HashIDs: []uint64{7, 8}}, 512, nil)
	b := Tokens(Request{InputLength: 600, HashIDs: []uint64{7, 9}}, 512, nil)
	if len(a) != 1000 || len(b) != 600 {
		t.Fatalf("lengths %d, %d", len(a), len(b))
	}
	if !slices.Equal(a[:512], b[:512]) {
		t.Fatal("equal hash ids gave different tokens")
	}
	if slices.Equal(a[512:600], b[512:600]) {
		t.Fatal("different hash ids gave equal tokens")
	}
	for _, tok := range a {
		if tok < 1000 || tok >= 150000 {
			t.Fatalf("token %d outside the ordinary range", tok)
		}
	}
}

func smallConfig() Config {
	ec := simengine.DefaultConfig()
	ec.NumGPUBlocks = 16384
	return Config{Workers: 4, Engine: ec, TraceBlockSize: 512, RateScale: 6, OverlapWeight: 1,
		ApproxTTL: 2 * time.Minute, ApproxMaxEntries: 1 << 20, Seed: 1,
		EventDelay: 5 * time.Millisecond, SyncDelay: 5 * time.Millisecond, LoadInterval: time.Second, RequestTTL: 30 * time.Minute}
}

// TestModesOnTheShippedTrace replays the start of the shipped trace in
// every mode. The simulation is deterministic (virtual time, seeded), so it
// can check outcomes, not timings: every request completes, and KV-aware
// routing hits the cache more than cache-blind routing.
func TestModesOnTheShippedTrace(t *testing.T) {
	trace, err := SyntheticTrace()
	if err != nil {
		t.Fatal(err)
	}
	if len(trace) != 3993 {
		t.Fatalf("shipped trace has %d requests, want 3993", len(trace))
	}
	n, modes := 600, Modes
	if testing.Short() {
		// make test runs with the race detector on a shared machine: the
		// modes that differ in kind, on a shorter prefix.
		n, modes = 150, []string{"round-robin", "kv", "kv-approx", "kv-3-replicas"}
	}
	trace = trace[:n]
	cfg := smallConfig()
	results, err := RunAll(trace, cfg, modes, []float64{cfg.RateScale}, 2)
	if err != nil {
		t.Fatal(err)
	}
	byMode := map[string]Result{}
	for _, r := range results {
		if r.Completed != n || r.Rejected != 0 {
			t.Errorf("%s: %d completed, %d rejected; want all %d", r.Mode, r.Completed, r.Rejected, n)
		}
		byMode[r.Mode] = r
	}
	bounds := ComputeBounds(trace, cfg)
	bound := bounds.Reuse
	for _, kv := range []string{"kv", "kv-approx", "kv-3-replicas"} {
		if byMode[kv].HitRate <= byMode["round-robin"].HitRate || byMode[kv].HitRate > bound {
			t.Errorf("%s hit rate %.3f, round-robin %.3f, bound %.3f: want round-robin < %s <= bound",
				kv, byMode[kv].HitRate, byMode["round-robin"].HitRate, bound, kv)
		}
	}
	rep := &Report{Trace: "mooncake", Requests: n, Config: cfg, Bounds: bounds, SLO: 2 * time.Second, Results: results}
	var table, csv, img bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteCSV(&csv, rep); err != nil {
		t.Fatal(err)
	}
	if err := WritePNG(&img, rep); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(csv.String(), "\n"); got != len(modes)+1 {
		t.Errorf("CSV has %d lines, want %d", got, len(modes)+1)
	}
	for _, m := range modes {
		if !strings.Contains(table.String(), m) {
			t.Errorf("table lacks mode %s", m)
		}
	}
	if _, err := png.Decode(&img); err != nil {
		t.Errorf("chart is not a PNG: %v", err)
	}
}

func TestDeterministic(t *testing.T) {
	trace, err := SyntheticTrace()
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:120]
	a, err := Run(trace, smallConfig(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(trace, smallConfig(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	a.Wall, b.Wall = 0, 0
	if a != b {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"no workers", func(c *Config) { c.Workers = 0 }},
		{"zero speed-up", func(c *Config) { c.Engine.SpeedupRatio = 0 }},
		{"zero rate", func(c *Config) { c.RateScale = 0 }},
		{"negative weight", func(c *Config) { c.OverlapWeight = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := smallConfig()
			tt.mod(&c)
			if _, err := Run([]Request{{InputLength: 1, OutputLength: 1, HashIDs: []uint64{1}}}, c, "kv"); err == nil {
				t.Fatal("Run accepted an invalid config")
			}
		})
	}
	if _, err := Run([]Request{{InputLength: 1, OutputLength: 1, HashIDs: []uint64{1}}}, smallConfig(), "nope"); err == nil {
		t.Fatal("Run accepted an unknown mode")
	}
}
