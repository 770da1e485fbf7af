package replay

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"math"
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
	last := len(CSVHeader) - 1
	if rows[0][last] != "capacity_bound_rate_scale" {
		t.Fatalf("CSV header ends %s", rows[0][last])
	}
	for _, row := range rows[1:] {
		if got, err := strconv.ParseFloat(row[last], 64); err != nil || got != round4(rep.Bounds.Capacity.Rate) {
			t.Fatalf("capacity_bound_rate_scale %q, want %v", row[last], rep.Bounds.Capacity.Rate)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if want := "capacity bound: x" + fmtRate(rep.Bounds.Capacity.Rate) + " "; !strings.Contains(table.String(), want) {
		t.Fatalf("table lacks %q:\n%s", want, table.String())
	}
	if err := WritePNG(&img, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }
