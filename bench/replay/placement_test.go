package replay

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSearchPlacement: the first round is kv's routed run, and every
// round's figures are its plan's replay, with Changed the requests it
// placed elsewhere than the round before.
func TestSearchPlacement(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:60]
	cfg := smallConfig()
	floor := ComputeBounds(trace, cfg).FloorTTFT[1]
	rounds, err := SearchPlacement(trace, cfg, floor, 2, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 3 {
		t.Fatalf("%d rounds, want kv's and 2", len(rounds))
	}
	kv, err := Run(trace, cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rounds[0].TTFT != kv.TTFT || rounds[0].HitRate != kv.HitRate || rounds[0].Changed != 0 {
		t.Fatalf("kv's round %+v, the routed run TTFT %v hit %v", rounds[0], kv.TTFT, kv.HitRate)
	}
	threshold := time.Duration(goalTTFTFloor * float64(floor))
	for i, r := range rounds {
		p, err := RunPlan(trace, cfg, r.Plan)
		if err != nil {
			t.Fatal(err)
		}
		over := 0
		for _, x := range p.TTFT {
			if x > threshold {
				over++
			}
		}
		if p.Percentiles() != r.TTFT || p.HitRate() != r.HitRate || over != r.Over {
			t.Errorf("round %d: %v, %v, %d over; its plan's replay %v, %v, %d", i, r.TTFT, r.HitRate, r.Over, p.Percentiles(), p.HitRate(), over)
		}
		if i == 0 {
			continue
		}
		changed := 0
		for n := range r.Plan {
			if r.Plan[n] != rounds[i-1].Plan[n] {
				changed++
			}
		}
		if changed != r.Changed {
			t.Errorf("round %d: %d requests moved, it says %d", i, changed, r.Changed)
		}
	}
	var buf bytes.Buffer
	if err := WritePlacementSearch(&buf, "t", len(trace), cfg.RateScale, floor, 0.5, time.Second, rounds); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"placement search of t at x6", "at most 6 of 60", "kv's placement: TTFT p90", "round 2 ("} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestCommandPlacementSearch runs the command with --placement-search and
// refuses a negative one.
func TestCommandPlacementSearch(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "small.jsonl")
	var buf bytes.Buffer
	if err := WriteTrace(&buf, trace[:30]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var c CommandConfig
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(append([]string{"--trace", path, "--modes", "kv", "--rate-scales", "6", "--goodput-steps", "0",
			"--workers", "4", "--kv-blocks", "16384", "--parallel", "1", "--out", ""}, args...)); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := Command(c, &out)
		return out.String(), err
	}
	out, err := run("--placement-search", "1", "--placement-window", "300ms")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "placement search of small at x6") || !strings.Contains(out, "look-ahead 300ms") || !strings.Contains(out, "round 1 (") {
		t.Errorf("no placement search in the output:\n%s", out)
	}
	if _, err := run("--placement-search", "-1"); err == nil {
		t.Error("--placement-search -1: no error")
	}
}
