package replay

import (
	"bytes"
	"encoding/csv"
	"flag"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLRUEvictsLeastRecent(t *testing.T) {
	l := newLRU(3)
	for _, h := range []uint64{1, 2, 3, 1, 4} { // 2 is least recent when 4 comes
		l.touch(h)
	}
	for h, want := range map[uint64]bool{1: true, 2: false, 3: true, 4: true} {
		if l.has(h) != want {
			t.Errorf("has(%d) = %v, want %v", h, !want, want)
		}
	}
}

func TestBounds(t *testing.T) {
	cfg := smallConfig()
	// Two requests sharing a 512-token prefix, then a third repeating the first.
	trace := []Request{
		{InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
		{InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 3}},
		{InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
	}
	tests := []struct {
		name           string
		blocks         int
		reuse, pooled  float64
		floorBelowFull bool
	}{
		// 64 blocks per request: the second hits 32, the third 63 (as in
		// the engines, the last block of a prompt of whole blocks is
		// computed, never hit).
		{"everything fits", 1024, 95.0 / 192, 95.0 / 192, true},
		// 64 blocks in all: the third finds only the second's prefix
		// (its tail, the first's second half, was evicted first).
		{"one request fits", 64, 95.0 / 192, 64.0 / 192, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.Workers, c.Engine.NumGPUBlocks = 1, tt.blocks
			b := ComputeBounds(trace, c)
			if b.Reuse != tt.reuse || b.Pooled != tt.pooled {
				t.Fatalf("reuse %v, pooled %v; want %v, %v", b.Reuse, b.Pooled, tt.reuse, tt.pooled)
			}
			if b.FloorTTFT[0] <= 0 || b.FloorTTFT[0] > b.FloorTTFT[2] {
				t.Fatalf("floor TTFT %v", b.FloorTTFT)
			}
		})
	}
}

func TestParseRates(t *testing.T) {
	got, err := ParseRates("2, 4,6.5")
	if err != nil || !slices.Equal(got, []float64{2, 4, 6.5}) {
		t.Fatalf("ParseRates = %v, %v", got, err)
	}
	for _, bad := range []string{"", "2,,4", "0", "-1", "x", "NaN"} {
		if _, err := ParseRates(bad); err == nil {
			t.Errorf("ParseRates(%q) accepted", bad)
		}
	}
}

// TestReportSweep runs a small sweep and checks the CSV contract, the
// goodput rule and that the chart is a PNG.
func TestReportSweep(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:150]
	cfg := smallConfig()
	modes, rates := []string{"round-robin", "kv"}, []float64{2, 12}
	results, err := RunAll(trace, cfg, modes, rates, 2)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Trace: "sessions", Requests: len(trace), Config: cfg, Bounds: ComputeBounds(trace, cfg), SLO: time.Hour, Results: results}
	if rep.Bounds.Pooled > rep.Bounds.Reuse {
		t.Errorf("pooled bound %v above the reuse bound %v", rep.Bounds.Pooled, rep.Bounds.Reuse)
	}
	for _, m := range modes {
		if g := rep.Goodput(m); g != 12 {
			t.Errorf("%s goodput x%g with an hour's SLO, want x12", m, g)
		}
	}
	rep.SLO = time.Nanosecond
	if g := rep.Goodput("kv"); g != 0 {
		t.Errorf("kv goodput x%g with a nanosecond SLO, want 0", g)
	}
	rep.SetChainFloors(trace)
	var buf, img bytes.Buffer
	if err := WriteCSV(&buf, rep); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	contract := "mode,rate_scale,workers,kv_blocks,hit_rate,reuse_bound,pooled_bound,ttft_mean_ms,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,e2e_p50_ms,e2e_p99_ms"
	if got := strings.Join(rows[0][:13], ","); got != contract {
		t.Fatalf("CSV header starts %s, want %s", got, contract)
	}
	if len(rows) != 1+len(modes)*len(rates) || rows[1][0] != "round-robin" || rows[1][1] != "2" || rows[4][0] != "kv" || rows[4][1] != "12" {
		t.Fatalf("CSV rows %v", rows[1:])
	}
	last := slices.Index(rows[0], "horizon_bound_rate_scale")
	if rows[0][last-1] != "capacity_bound_rate_scale" || rows[0][last] != "horizon_bound_rate_scale" || rows[0][last+1] != "chain_floor_ttft_p90_ms" {
		t.Fatalf("CSV header ends %v", rows[0][last-1:])
	}
	horizon := rep.HorizonBound().Rate
	for _, row := range rows[1:] {
		// The chain floor at the row's own rate scale.
		rate, _ := strconv.ParseFloat(row[1], 64)
		c := cfg
		c.RateScale = rate
		if want := ms(ChainFloor(trace, c)[1]); row[last+1] != want {
			t.Fatalf("chain_floor_ttft_p90_ms %q at x%g, want %s", row[last+1], rate, want)
		}
		if got, err := strconv.ParseFloat(row[last-1], 64); err != nil || got != round4(rep.Bounds.Capacity.Rate) {
			t.Fatalf("capacity_bound_rate_scale %q, want %v", row[last-1], rep.Bounds.Capacity.Rate)
		}
		if got, err := strconv.ParseFloat(row[last], 64); err != nil || !(got == round4(horizon) || math.IsInf(horizon, 1) && math.IsInf(got, 1)) {
			t.Fatalf("horizon_bound_rate_scale %q, want %v", row[last], horizon)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if want := "capacity bound: x" + fmtRate(rep.Bounds.Capacity.Rate) + " "; !strings.Contains(table.String(), want) {
		t.Fatalf("table lacks %q:\n%s", want, table.String())
	}
	// Every row ends with its TTFT p90 over the cached floor's p90.
	for _, x := range results {
		ratio := float64(x.TTFT[1]) / float64(rep.Bounds.FloorTTFT[1])
		want := fmt.Sprintf(" x%g ", x.RateScale)
		found := false
		for _, line := range strings.Split(table.String(), "\n") {
			f := strings.Fields(line)
			if len(f) > 2 && f[0] == x.Mode && strings.Contains(" "+f[1]+" ", want) {
				found = true
				if got, wantRatio := f[len(f)-1], strconv.FormatFloat(ratio, 'f', 3, 64)+"x"; got != wantRatio {
					t.Errorf("%s x%g: p90/floor %s, want %s", x.Mode, x.RateScale, got, wantRatio)
				}
			}
		}
		if !found {
			t.Errorf("table has no row for %s x%g:\n%s", x.Mode, x.RateScale, table.String())
		}
	}
	if got := floorRatio(time.Second, 0); got != "-" {
		t.Errorf("floorRatio without a floor = %q, want -", got)
	}
	if err := WritePNG(&img, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// TestGoals checks the goal rows' verdicts and the table on a report
// made by hand: figures on both sides of each goal's line.
func TestGoals(t *testing.T) {
	res := func(mode string, rate, hit float64, p90 time.Duration) Result {
		return Result{Mode: mode, RateScale: rate, HitRate: hit, TTFT: [3]time.Duration{0, p90, 0}}
	}
	const ms = time.Millisecond
	report := func(approx, rep8 float64, kvP90 time.Duration) *Report {
		return &Report{Trace: "t", SLO: 2 * time.Second,
			Bounds: Bounds{Pooled: 0.5, FloorTTFT: [3]time.Duration{0, 100 * ms, 0}, Capacity: Capacity{Rate: 20}},
			Results: []Result{
				res("round-robin", 4, 0.2, time.Second), res("round-robin", 6, 0.2, 3*time.Second),
				res("kv", 6, 0.46, kvP90), res("kv", 9, 0.46, time.Second), res("kv", 12, 0.46, 5*time.Second),
				res("kv-approx", 6, approx, 100*ms),
				res("kv-3-replicas", 6, 0.455, kvP90*105/100), res("kv-8-replicas", 6, rep8, kvP90*105/100),
			}}
	}
	// kv 92% of pooled, approx 86%, goodput 9 / 4 (not settled: round-robin
	// could be up to 6, and 9 < 2 x 6), TTFT 140 / 100,
	// replicas -0.5 hit-rate points (-1 of pooled) and +5%.
	g := Goals(report(0.43, 0.455, 140*ms), 6)
	if !g.HitOK() || !g.ApproxOK() || !g.GoodputOK() || !g.TTFTOK() || !g.ReplicasOK() {
		t.Fatalf("all goals should pass: %+v", g)
	}
	if g.RR != 4 || g.RRFail != 6 || g.GoodputSettled() || g.KV != 9 || g.KVFail != 12 || math.Abs(g.Rep3Points+0.5) > 1e-9 || math.Abs(g.Rep3TTFT-0.05) > 1e-9 {
		t.Fatalf("row %+v", g)
	}
	// approx 84%, 8 replicas 2.5 points below, TTFT 160 / 100.
	bad := Goals(report(0.42, 0.435, 160*ms), 6)
	if !bad.HitOK() || bad.ApproxOK() || !bad.GoodputOK() || bad.TTFTOK() || bad.ReplicasOK() {
		t.Fatalf("approx, ttft and replicas should fail: %+v", bad)
	}
	// Without the replica runs their goal fails and the table says why.
	r := report(0.43, 0.455, 140*ms)
	r.Results = r.Results[:6]
	missing := Goals(r, 6)
	if missing.ReplicasOK() || !slices.Equal(missing.Missing, []string{"kv-3-replicas", "kv-8-replicas"}) {
		t.Fatalf("missing replicas: %+v", missing)
	}
	// Twice round-robin above the capacity bound: not sustainable; above
	// the finite-horizon bound too: out of reach.
	r = report(0.43, 0.455, 140*ms)
	r.Bounds.Capacity.Rate = 7
	r.Horizon = &Horizon{Rate: 12}
	r.Results[0].RateScale, r.Results[1].RateScale = 4.5, 5 // rr x4.5, kv x9: 2x is 9 > 7
	far := Goals(r, 6)
	if !far.GoodputOK() || !far.GoodputUnsustainable() || far.GoodputUnreachable() {
		t.Fatalf("goodput 9 vs 2 x 4.5 at capacity 7, horizon 12: %+v", far)
	}
	r.Horizon = &Horizon{Rate: 8.5}
	if far = Goals(r, 6); !far.GoodputUnreachable() {
		t.Fatalf("goodput 9 vs 2 x 4.5 at horizon 8.5: %+v", far)
	}
	// kv below 2x rr: the verdict says which bound 2x rr is above.
	r.Results[3].RateScale = 8 // kv x8
	r.Horizon = &Horizon{Rate: 12}
	cap := Goals(r, 6)
	r2 := report(0.43, 0.455, 140*ms)
	r2.Bounds.Capacity.Rate = 7
	r2.Horizon = &Horizon{Rate: 8.5}
	r2.Results[0].RateScale, r2.Results[1].RateScale, r2.Results[3].RateScale = 4.5, 5, 8
	unreachable := Goals(r2, 6)
	// Round-robin in [4.5, 5), kv in [8, 12): not settled by the brackets,
	// but 2 x 4.5 is above the horizon 8.5, which kv cannot pass.
	if cap.GoodputOK() || unreachable.GoodputOK() || cap.GoodputSettled() || !unreachable.GoodputSettled() {
		t.Fatalf("kv x8 vs 2 x 4.5 passed: %+v, %+v", cap, unreachable)
	}
	// The brackets settle it either way: kv at least twice round-robin's
	// bracket end, or twice round-robin's at least kv's.
	inf := math.Inf(1)
	for _, tt := range []struct {
		row     GoalRow
		settled bool
	}{
		{GoalRow{RR: 4, RRFail: 4.5, KV: 9, KVFail: 12, Horizon: inf}, true},
		{GoalRow{RR: 4, RRFail: 4.6, KV: 9, KVFail: 12, Horizon: inf}, false},
		{GoalRow{RR: 4, RRFail: 4.5, KV: 7, KVFail: 8, Horizon: inf}, true},
		{GoalRow{RR: 4, RRFail: 4.5, KV: 7, KVFail: 8.5, Horizon: inf}, false},
		{GoalRow{RR: 4, RRFail: 4.5, KV: 7, KVFail: 8.5, Horizon: 7.9}, true},
		{GoalRow{KV: 7, KVFail: 8.5, Horizon: inf}, true}, // no round-robin goodput
	} {
		if got := tt.row.GoodputSettled(); got != tt.settled {
			t.Errorf("%+v settled %v, want %v", tt.row, got, tt.settled)
		}
	}
	// The chain floor decides the TTFT verdict only when its p90 is above
	// 1.5 x the cached floor's (100 ms here): kv's TTFT p90 cannot be
	// below it then. Set at another rate scale only, it is not the
	// default rate's.
	chainRows := map[string]GoalRow{}
	for _, tt := range []struct {
		name        string
		chain       map[float64][3]time.Duration
		kvP90       time.Duration
		unreachable bool
		verdict     string
	}{
		{"none computed", nil, 160 * ms, false, "| 160.0 / 100.0 | - | 1.60x | FAIL |"},
		{"other rate only", map[float64][3]time.Duration{9: {0, 300 * ms, 0}}, 160 * ms, false, "| 160.0 / 100.0 | - | 1.60x | FAIL |"},
		{"below 1.5x, kv meets the goal", map[float64][3]time.Duration{6: {0, 120 * ms, 0}}, 140 * ms, false, "| 140.0 / 100.0 | 120.0 | 1.40x | ok |"},
		{"below 1.5x, kv misses it", map[float64][3]time.Duration{6: {0, 149 * ms, 0}}, 160 * ms, false, "| 160.0 / 100.0 | 149.0 | 1.60x | FAIL |"},
		{"at 1.5x", map[float64][3]time.Duration{6: {0, 150 * ms, 0}}, 160 * ms, false, "| 160.0 / 100.0 | 150.0 | 1.60x | FAIL |"},
		{"above 1.5x", map[float64][3]time.Duration{6: {0, 329 * ms, 0}}, 340 * ms, true, "| 340.0 / 100.0 | 329.0 | 3.40x | FAIL (>chain) |"},
	} {
		r := report(0.43, 0.455, tt.kvP90)
		r.Trace = tt.name
		r.ChainFloors = tt.chain
		row := Goals(r, 6)
		if row.TTFTUnreachable() != tt.unreachable || row.TTFTUnreachable() && row.TTFTOK() {
			t.Errorf("%s: TTFT unreachable %v (ok %v), want %v: %+v", tt.name, row.TTFTUnreachable(), row.TTFTOK(), tt.unreachable, row)
		}
		var one strings.Builder
		if err := WriteGoals(&one, []GoalRow{row}, 6, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(one.String(), tt.verdict) {
			t.Errorf("%s: goal table lacks %q:\n%s", tt.name, tt.verdict, one.String())
		}
		if listed := strings.Contains(one.String(), "ttft out of reach for any router (FAIL (>chain)) on 1 traces: "+tt.name+"\n"); listed != tt.unreachable {
			t.Errorf("%s: listed out of reach %v, want %v:\n%s", tt.name, listed, tt.unreachable, one.String())
		}
		chainRows[tt.name] = row
	}
	var out strings.Builder
	if err := WriteGoals(&out, []GoalRow{g, bad, missing, cap, unreachable, chainRows["above 1.5x"], chainRows["below 1.5x, kv misses it"]}, 6, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| t | 0.500 | 92.0 | ok | 86.0 | ok | x4 (<x6) | x9 (<x12) | 2.25x | x20 | none | ok ? | 140.0 / 100.0 | - | 1.40x | ok | -0.5 (-1.0), +5.0% | -0.5 (-1.0), +5.0% | ok |",
		"| x4.5 (<x5) | x8 (<x12) | 1.78x | x7 | x12 | FAIL (>cap) ? |", "| x4.5 (<x5) | x8 (<x12) | 1.78x | x7 | x8.5 | FAIL (>bound) |",
		"| 84.0 | FAIL |", "| 1.60x | FAIL |", "-2.5 (-5.0), +5.0% | FAIL |",
		"goals met on 7 traces: hit 7, approx 6, goodput 5, ttft 4, replicas 5",
		"ttft out of reach for any router (FAIL (>chain)) on 1 traces: above 1.5x\n",
		"FAIL (>chain): it is above 1.5x the cached floor's p90",
		"t: no result at x6 for kv-3-replicas, kv-8-replicas",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("goal table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCommandGoals runs --goals on a small trace file: round-robin, kv and
// the peers over the sweep and refined, the other goal modes at the
// default rate only, and one goal table (with the peer tables) at the end,
// also written under --out; the seed-spread runs add no CSV rows.
func TestCommandGoals(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "small.jsonl")
	var buf bytes.Buffer
	if err := WriteTrace(&buf, trace[:120]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var c CommandConfig
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--goals", "--trace", path, "--rate-scales", "2,4", "--goals-rate", "4", "--goodput-steps", "0",
		"--slo-ttft-p90", "1h", "--workers", "4", "--kv-blocks", "16384", "--parallel", "2", "--out", filepath.Join(dir, "out")}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Command(c, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| small | ") || !strings.Contains(out.String(), "goals met on 1 traces") ||
		!strings.Contains(out.String(), "peer goals met on 1 traces") {
		t.Fatalf("no goal table:\n%s", out.String())
	}
	f, err := os.Open(filepath.Join(dir, "out", "router-replay.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// With an hour's SLO both goodput modes go on above the sweep's top
	// (x4, then x6 and up); the others ran at x4 only.
	ran := map[string][]string{}
	for _, row := range rows[1:] {
		if slices.Contains(ran[row[0]], row[1]) {
			t.Errorf("%s at x%s has two rows", row[0], row[1])
		}
		ran[row[0]] = append(ran[row[0]], row[1])
	}
	for _, m := range []string{"round-robin", "kv", "dynamo", "llm-d", "sglang"} {
		if r := ran[m]; len(r) < 3 || r[0] != "2" || r[1] != "4" || r[2] != "6" {
			t.Errorf("%s ran at %v, want 2, 4, 6 and up", m, r)
		}
	}
	for _, m := range []string{"kv-approx", "kv-3-replicas", "kv-8-replicas"} {
		if r := ran[m]; !slices.Equal(r, []string{"4"}) {
			t.Errorf("%s ran at %v, want 4 only", m, r)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "out", "router-replay-goals.md"))
	if err != nil || !strings.Contains(string(md), "| small | ") {
		t.Fatalf("router-replay-goals.md: %v\n%s", err, md)
	}
}
