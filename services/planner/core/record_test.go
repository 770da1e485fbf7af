package core

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func sampleDecision() Decision {
	return Decision{ID: 7, At: t0, Pools: []PoolDecision{{
		PoolKey: PoolKey{Model: "Qwen/Qwen3-0.6B", Role: Agg}, Current: 3, Target: 2, Drain: []uint64{9},
		Reason: "throughput", Inputs: Inputs{Observed: Demand{RequestsPerSec: 1, PromptTokensPerSec: 2, OutputTokensPerSec: 3, CachedPromptTokensPerSec: 1}, Forecast: Demand{RequestsPerSec: 1, PromptTokensPerSec: 2, OutputTokensPerSec: 3, CachedPromptTokensPerSec: 0}, CapacityRPS: 4, TTFTMs: 5, ITLMs: 6, Workers: 3, Fresh: 3},
	}}}
}

func TestDecisionRoundTrip(t *testing.T) {
	b, err := sampleDecision().Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"id":7`, `"pools":[`, `"model":"Qwen/Qwen3-0.6B"`, `"role":"agg"`, `"current":3`, `"target":2`, `"drain":[9]`, `"reason":"throughput"`, `"capacity_rps":4`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("record %s lacks %s", b, field)
		}
	}
	d, err := DecodeDecision(b)
	if err != nil || d.ID != 7 || !d.At.Equal(t0) || len(d.Pools) != 1 || d.Pools[0].Target != 2 || d.Pools[0].Inputs.ITLMs != 6 {
		t.Fatalf("decode = %+v, %v", d, err)
	}
}

func TestDecodeDecisionRefuses(t *testing.T) {
	good := string(must(sampleDecision().Encode()))
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", "{", "decision record"},
		{"no id", `{"pools":[]}`, "no id"},
		// A newer writer's fields, at the top or in a pool's inputs,
		// are skipped.
		{"unknown field", `{"id":1,"extra":1}`, ""},
		{"unknown input", strings.Replace(good, `"capacity_rps":4`, `"capacity_rps":4,"burst_rps":{"level":2}`, 1), ""},
		{"trailing data", `{"id":1} {}`, "after the object"},
		{"bad role", strings.Replace(good, `"agg"`, `"mixed"`, 1), "valid roles"},
		{"empty model", strings.Replace(good, `"Qwen/Qwen3-0.6B"`, `""`, 1), "model name"},
		{"model at 256 bytes", strings.Replace(good, `"Qwen/Qwen3-0.6B"`, `"`+strings.Repeat("m", 256)+`"`, 1), ""},
		{"model past 256 bytes", strings.Replace(good, `"Qwen/Qwen3-0.6B"`, `"`+strings.Repeat("m", 257)+`"`, 1), "model name"},
		{"negative target", strings.Replace(good, `"target":2`, `"target":-1`, 1), "negative"},
		{"more to drain than workers", strings.Replace(good, `"drain":[9]`, `"drain":[9,10,11,12]`, 1), "to drain"},
		{"negative capacity", strings.Replace(good, `"capacity_rps":4`, `"capacity_rps":-4`, 1), "finite"},
		{"too big", `{"id":1,"pools":[],"at":"` + strings.Repeat("x", MaxRecordBytes) + `"}`, "over the limit"},
	} {
		_, err := DecodeDecision([]byte(tc.in))
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// MaxPools pools decode; one more does not.
	pools := func(n int) []byte {
		d := Decision{ID: 1}
		for i := range n {
			d.Pools = append(d.Pools, PoolDecision{PoolKey: PoolKey{Model: fmt.Sprint(i), Role: Decode}})
		}
		b, _ := d.Encode()
		return b
	}
	if _, err := DecodeDecision(pools(MaxPools)); err != nil {
		t.Errorf("%d pools: %v", MaxPools, err)
	}
	if _, err := DecodeDecision(pools(MaxPools + 1)); err == nil {
		t.Errorf("%d pools decoded", MaxPools+1)
	}
}

func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"7", 7, true}, {" 42\n", 42, true}, {"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, {"0", 0, false}, {"", 0, false}, {"-1", 0, false}, {"+1", 0, false},
		{"1e3", 0, false}, {"0x10", 0, false}, {"123456789012345678901", 0, false},
	} {
		got, err := ParseAck([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseAck(%q) = %v, %v; want %v ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func FuzzDecodeDecision(f *testing.F) {
	f.Add(must(sampleDecision().Encode()))
	f.Add([]byte(`{"id":1,"pools":[{"model":"m","role":"decode","current":0,"target":0,"reason":"","inputs":{}}]}`))
	f.Add([]byte(`{"id":1,"at":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDecision(b)
		if err != nil {
			return
		}
		// What decodes encodes, and decodes again to the same record.
		b2, err := d.Encode()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", d, err)
		}
		d2, err := DecodeDecision(b2)
		if err != nil {
			t.Fatalf("re-encoded record refused: %v", err)
		}
		b3, _ := d2.Encode()
		if !bytes.Equal(b2, b3) {
			t.Fatalf("round trip changed the record:\n%s\n%s", b2, b3)
		}
	})
}

func FuzzParseAck(f *testing.F) {
	for _, s := range []string{"1", " 7 ", "18446744073709551615", "-1", "x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := ParseAck(b)
		if err != nil {
			return
		}
		if id == 0 {
			t.Fatal("acknowledged id 0")
		}
		if again, err := ParseAck(fmt.Appendf(nil, "%d", id)); err != nil || again != id {
			t.Fatalf("%d does not parse back: %v %v", id, again, err)
		}
	})
}

// FuzzDecide feeds the planner arbitrary observations: it never panics,
// stays within its bounds, drains only workers it was shown, and its
// decisions encode.
func FuzzDecide(f *testing.F) {
	f.Add(100.0, 100.0, 10.0, 3, 0, 2000, 5, 0.5, int64(0))
	f.Add(0.0, 0.0, 0.0, 0, 2, 0, 0, 0.0, int64(-40))
	f.Add(1e9, 1e12, 1e9, 50, 0, 1<<30, 1000, 1.0, int64(3))
	f.Fuzz(func(t *testing.T, rps, prompt, output float64, workers, starting, queued, running int, usage float64, ageSec int64) {
		workers, starting = min(max(workers, 0), 64), min(max(starting, 0), 64)
		p, _ := New(DefaultConfig(), 0)
		now := t0.Add(time.Hour)
		o := PoolObservation{Key: pool, Starting: starting,
			Demand: Sample{At: now.Add(time.Duration(ageSec) * time.Second), Demand: Demand{RequestsPerSec: rps, PromptTokensPerSec: prompt, OutputTokensPerSec: output, CachedPromptTokensPerSec: prompt / 3}}}
		ids := map[uint64]bool{}
		for i := range workers {
			o.Workers = append(o.Workers, Worker{ID: uint64(i + 1), Engine: Engine{Model: simple, KVBlocks: 100, BlockSize: 16},
				Reported: now.Add(time.Duration(ageSec) * time.Second), Queued: queued, Running: running, Usage: usage})
			ids[uint64(i+1)] = true
		}
		for range 3 {
			d := p.Decide(now, []PoolObservation{o})
			pd := d.Pools[0]
			if pd.Target < 1 || pd.Target > 8 {
				t.Fatalf("target %d outside 1..8", pd.Target)
			}
			for _, id := range pd.Drain {
				if !ids[id] {
					t.Fatalf("drains %d, not a worker of the pool", id)
				}
			}
			if len(pd.Drain) > max(pd.Current-pd.Target, 0) {
				t.Fatalf("drains %d for %d -> %d", len(pd.Drain), pd.Current, pd.Target)
			}
			b, err := d.Encode()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if _, err := DecodeDecision(b); err != nil {
				t.Fatalf("decode: %v\n%s", err, b)
			}
			now = now.Add(10 * time.Second)
		}
	})
}
