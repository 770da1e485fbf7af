package replay

import (
	"bytes"
	"encoding/csv"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// TestRecordingChangesNothing checks that a recorded replay is the replay:
// the same result to the field, and one record per completed request whose
// times are the result's.
func TestRecordingChangesNothing(t *testing.T) {
	trace, err := SyntheticTrace()
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:120]
	cfg := smallConfig()
	for _, mode := range []string{"kv", "kv-3-replicas", "round-robin", "disagg-always"} {
		t.Run(mode, func(t *testing.T) {
			plain, err := Run(trace, cfg, mode)
			if err != nil {
				t.Fatal(err)
			}
			rec, recs, err := RunRecorded(trace, cfg, mode)
			if err != nil {
				t.Fatal(err)
			}
			plain.Wall, rec.Wall = 0, 0
			if plain != rec {
				t.Fatalf("recording changed the run:\n%+v\n%+v", plain, rec)
			}
			if len(recs) != rec.Completed {
				t.Fatalf("%d records of %d completed requests", len(recs), rec.Completed)
			}
			var ttft, e2e []time.Duration
			for i, r := range recs {
				if i > 0 && recs[i-1].Request >= r.Request {
					t.Fatalf("records out of trace order at %d: %d after %d", i, r.Request, recs[i-1].Request)
				}
				bs := cfg.Engine.BlockSize
				if r.Wait < 0 || r.Wait > r.TTFT || r.TTFT > r.E2E || r.Worker < 1 || r.Worker > uint64(cfg.Workers) ||
					r.Overlap > r.BestOverlap || r.Cached > r.PromptTokens/bs || r.StepLeft < 0 || r.QueuedTokens < 0 {
					t.Fatalf("record %+v is inconsistent", r)
				}
				if want := time.Duration(float64(trace[r.Request].Arrival) / cfg.RateScale); r.Arrival != want {
					t.Fatalf("request %d arrived at %v, the trace says %v", r.Request, r.Arrival, want)
				}
				ttft, e2e = append(ttft, r.TTFT), append(e2e, r.E2E)
			}
			if got := percentiles(ttft); got != rec.TTFT {
				t.Errorf("records' TTFT percentiles %v, result's %v", got, rec.TTFT)
			}
			if got := percentiles(e2e); got != rec.E2E {
				t.Errorf("records' E2E percentiles %v, result's %v", got, rec.E2E)
			}
		})
	}
}

// TestRequestRecordSeesTheStepInFlight replays two requests on one engine:
// a 2048-token prompt at 0, and at 10 ms a 600-token one sharing its first
// 512 tokens, while the first one's only prefill step is in flight. The
// second waits out that step (it cannot join it), and then finds the shared
// blocks in the engine's cache, which the router predicted.
func TestRequestRecordSeesTheStepInFlight(t *testing.T) {
	cfg := smallConfig()
	cfg.Workers, cfg.RateScale = 1, 1
	trace := []Request{
		{Arrival: 0, InputLength: 2048, OutputLength: 4, HashIDs: []uint64{1, 2, 3, 4}},
		{Arrival: 10 * time.Millisecond, InputLength: 600, OutputLength: 4, HashIDs: []uint64{1, 9}},
	}
	_, recs, err := RunRecorded(trace, cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	a, b := recs[0], recs[1]
	// The step is a prefill step alone; the first request's TTFT adds
	// its overhead, which no step pays.
	step := simengine.StepTime(2048, false, 0, cfg.Engine.SpeedupRatio)
	ttft := simengine.PrefillTime(2048, cfg.Engine.SpeedupRatio)
	shared := 512 / cfg.Engine.BlockSize
	if a.Wait != 0 || a.StepLeft != 0 || a.QueuedTokens != 0 || a.Decoding != 0 || a.TTFT != ttft || a.Overlap != 0 || a.Cached != 0 {
		t.Errorf("first request: %+v; want admitted at once on an idle engine, TTFT %v, nothing cached", a, ttft)
	}
	if b.StepLeft != step-10*time.Millisecond || b.Wait != b.StepLeft {
		t.Errorf("second request: step left %v, wait %v; want both %v", b.StepLeft, b.Wait, step-10*time.Millisecond)
	}
	// The first request's step has computed its prompt and its first
	// token when it starts: after it, it decodes and nothing is queued.
	if b.QueuedTokens != 0 || b.Decoding != 1 {
		t.Errorf("second request: %d queued tokens, %d decoding; want 0 and 1", b.QueuedTokens, b.Decoding)
	}
	if b.Overlap != shared || b.BestOverlap != shared || b.Cached != shared {
		t.Errorf("second request: router overlap %d (best %d), engine cached %d; want %d each", b.Overlap, b.BestOverlap, b.Cached, shared)
	}
	if b.TTFT <= b.Wait {
		t.Errorf("second request: TTFT %v not after its wait %v", b.TTFT, b.Wait)
	}
}

func TestWriteRequestsCSV(t *testing.T) {
	runs := []RecordedRun{
		{Mode: "kv", RateScale: 6, Requests: []RequestRecord{
			{Request: 3, Arrival: 1500 * time.Microsecond, Worker: 2, PromptTokens: 700, Overlap: 32, BestOverlap: 40, Cached: 30,
				QueuedTokens: 100, Decoding: 5, StepLeft: 2 * time.Millisecond, Cost: 12.25, Wait: 3 * time.Millisecond,
				TTFT: 20 * time.Millisecond, E2E: time.Second, Gaps: 9, SlowGaps: 2, GapSum: 980 * time.Millisecond,
				Home: 4, HomeCost: 30.5, HomeQueuedTokens: 9000, HomeDecoding: 7, DecodingMin: 3, DecodingMax: 11, SlowGapsCaused: 2.5,
				PrefillWorker: 6},
		}},
		{Mode: "round-robin", RateScale: 1.5},
	}
	var buf bytes.Buffer
	if err := WriteRequestsCSV(&buf, runs); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{RequestsCSVHeader,
		{"kv", "6", "3", "1.500", "2", "700", "32", "40", "30", "100", "5", "2.000", "12.250", "3.000", "20.000", "1000.000",
			"9", "2", "980.000", "4", "30.500", "9000", "7", "3", "11", "2.500", "6"}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(want), rows)
	}
	for i := range want {
		if len(rows[i]) != len(want[i]) {
			t.Fatalf("row %d: %v, want %v", i, rows[i], want[i])
		}
		for j := range want[i] {
			if rows[i][j] != want[i][j] {
				t.Errorf("row %d column %s: %q, want %q", i, RequestsCSVHeader[j], rows[i][j], want[i][j])
			}
		}
	}
}

// TestCommandRequestsCSV runs the command with --requests-csv: every run of
// the table is there again, request by request, and without --out the
// flag is refused.
func TestCommandRequestsCSV(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	dir := t.TempDir()
	path := filepath.Join(dir, "small.jsonl")
	var buf bytes.Buffer
	if err := WriteTrace(&buf, trace[:n]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) CommandConfig {
		var c CommandConfig
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(append([]string{"--requests-csv", "--trace", path, "--modes", "kv,round-robin", "--rate-scales", "2,4",
			"--goodput-steps", "0", "--slo-ttft-p90", "1ns", "--workers", "4", "--kv-blocks", "16384", "--parallel", "2"}, args...)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	out := filepath.Join(dir, "out")
	if err := Command(parse("--out", out), new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	read := func(name string) [][]string {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		rows, err := csv.NewReader(f).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	table, reqs := read("router-replay.csv"), read("router-replay-requests.csv")
	perRun := map[string]int{}
	for _, row := range reqs[1:] {
		perRun[row[0]+" x"+row[1]]++
	}
	if len(perRun) != len(table)-1 {
		t.Errorf("requests of %d runs, the table has %d: %v", len(perRun), len(table)-1, perRun)
	}
	for _, row := range table[1:] {
		if got := perRun[row[0]+" x"+row[1]]; got != n {
			t.Errorf("%s at x%s: %d requests recorded, want %d", row[0], row[1], got, n)
		}
	}
	if err := Command(parse("--out", ""), new(bytes.Buffer)); err == nil {
		t.Error("--requests-csv without --out: no error")
	}
}

// TestRequestRecordGapsAndHome replays two requests on two engines, the
// second sharing the first one's prompt start, and checks what the records
// say of their tokens' gaps (every gap after the first token, its sum the
// time from first to last token, slow ones counted past Config.SlowGap
// only) and of each request's home: the worker caching the most of it,
// with its cost and its engine's state.
func TestRequestRecordGapsAndHome(t *testing.T) {
	trace := []Request{
		{Arrival: 0, InputLength: 2048, OutputLength: 5, HashIDs: []uint64{1, 2, 3, 4}},
		{Arrival: time.Second, InputLength: 1100, OutputLength: 3, HashIDs: []uint64{1, 2, 9}},
	}
	for _, tc := range []struct {
		name    string
		slowGap time.Duration
		slow    []int
	}{
		{"no threshold", 0, []int{0, 0}},
		{"every gap slow", time.Nanosecond, []int{4, 2}},
		{"no gap slow", time.Hour, []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Workers, cfg.RateScale, cfg.SlowGap = 2, 1, tc.slowGap
			_, recs, err := RunRecorded(trace, cfg, "kv")
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2", len(recs))
			}
			for i, r := range recs {
				if r.Gaps != trace[i].OutputLength-1 || r.GapSum != r.E2E-r.TTFT || r.SlowGaps != tc.slow[i] {
					t.Errorf("request %d: %d gaps summing %v, %d slow; want %d summing %v (E2E - TTFT), %d slow",
						i, r.Gaps, r.GapSum, r.SlowGaps, trace[i].OutputLength-1, r.E2E-r.TTFT, tc.slow[i])
				}
			}
			a, b := recs[0], recs[1]
			// Nothing is cached anywhere for the first: its home is the
			// cheapest worker, where it went. The second's home is the
			// first one's worker, which finished it: idle.
			if a.Home != a.Worker || a.HomeCost != a.Cost || a.HomeQueuedTokens != 0 || a.HomeDecoding != 0 {
				t.Errorf("first request: home %d (cost %v, queued %d, decoding %d); want its own worker %d (cost %v), idle",
					a.Home, a.HomeCost, a.HomeQueuedTokens, a.HomeDecoding, a.Worker, a.Cost)
			}
			if shared := 1024 / cfg.Engine.BlockSize; b.Home != a.Worker || b.BestOverlap != shared || b.HomeQueuedTokens != 0 || b.HomeDecoding != 0 {
				t.Errorf("second request: home %d caching %d blocks (queued %d, decoding %d); want %d caching %d, idle",
					b.Home, b.BestOverlap, b.HomeQueuedTokens, b.HomeDecoding, a.Worker, shared)
			}
			if b.Worker == b.Home && b.HomeCost != b.Cost {
				t.Errorf("second request went home but its home's cost %v is not its cost %v", b.HomeCost, b.Cost)
			}
		})
	}
}

// TestSlowGapsCaused replays three requests on one engine: the first
// decodes while the other two, arriving together, are prefilled in one
// step of 6,144 prompt tokens, about 108 ms, the first one's only gap over
// 50 ms. Its slow gap is the step's: shared by the two prompts by their
// tokens, 1/3 and 2/3; the first one's prompt, computed with nothing
// decoding, causes none. On a trace, with the threshold above any step
// without prompt tokens, the caused gaps add up to the slow ones.
func TestSlowGapsCaused(t *testing.T) {
	trace := []Request{
		{Arrival: 0, InputLength: 512, OutputLength: 40, HashIDs: []uint64{1}},
		{Arrival: 100 * time.Millisecond, InputLength: 2048, OutputLength: 2, HashIDs: []uint64{2, 3, 4, 5}},
		{Arrival: 100 * time.Millisecond, InputLength: 4096, OutputLength: 2, HashIDs: []uint64{6, 7, 8, 9, 10, 11, 12, 13}},
	}
	cfg := smallConfig()
	cfg.Workers, cfg.RateScale, cfg.SlowGap = 1, 1, 50*time.Millisecond
	_, recs, err := RunRecorded(trace, cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for i, want := range []struct {
		slow               int
		caused             float64
		decoding, min, max int
	}{{1, 0, 0, 0, 0}, {0, 1.0 / 3, 1, 1, 1}, {0, 2.0 / 3, 1, 1, 1}} {
		r := recs[i]
		if r.SlowGaps != want.slow || math.Abs(r.SlowGapsCaused-want.caused) > 1e-9 || r.Decoding != want.decoding ||
			r.DecodingMin != want.min || r.DecodingMax != want.max {
			t.Errorf("request %d: %d slow gaps, %v caused, decoding %d (min %d, max %d); want %d, %v, %d (%d, %d)",
				i, r.SlowGaps, r.SlowGapsCaused, r.Decoding, r.DecodingMin, r.DecodingMax, want.slow, want.caused, want.decoding, want.min, want.max)
		}
	}

	sessions, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	// A step without prompt tokens is a decode step, at most 34 ms with
	// the default timing model.
	cfg = smallConfig()
	cfg.RateScale, cfg.SlowGap = 20, 40*time.Millisecond
	_, recs, err = RunRecorded(sessions[:200], cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}
	var slow, caused float64
	for _, r := range recs {
		slow += float64(r.SlowGaps)
		caused += r.SlowGapsCaused
		if r.DecodingMin > r.Decoding || r.Decoding > r.DecodingMax {
			t.Errorf("request %d: decoding %d outside the engines' %d..%d", r.Request, r.Decoding, r.DecodingMin, r.DecodingMax)
		}
	}
	if slow == 0 || math.Abs(slow-caused) > 1e-6*slow {
		t.Errorf("sessions x20: %v slow gaps, %v caused by prompts; want equal and some", slow, caused)
	}
}

// TestSentAway checks the run's count of requests placed away from the
// worker the router saw caching most of their prompt, and the share of
// the prompt blocks they gave up, against the requests' own records (the
// chosen worker's overlap and the best one's), on the start of the
// shipped sessions trace at a rate where the router trades some of them.
func TestSentAway(t *testing.T) {
	sessions, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig()
	cfg.RateScale = 20
	res, recs, err := RunRecorded(sessions[:300], cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}
	bs := cfg.Engine.BlockSize
	sent, gaveUp, blocks := 0, 0, 0
	for _, r := range recs {
		if r.BestOverlap > r.Overlap {
			sent++
			gaveUp += r.BestOverlap - r.Overlap
		}
		blocks += r.PromptTokens / bs
	}
	if len(recs) != 300 || sent == 0 {
		t.Fatalf("%d records, %d sent away: want 300 and some sent", len(recs), sent)
	}
	if res.SentAway != sent || math.Abs(res.GaveUp-float64(gaveUp)/float64(blocks)) > 1e-12 {
		t.Fatalf("SentAway %d, GaveUp %v; the records say %d, %d of %d blocks (%v)", res.SentAway, res.GaveUp, sent, gaveUp, blocks, float64(gaveUp)/float64(blocks))
	}
	t.Logf("%d of %d requests sent away, %.2f points given up (hit rate %.3f)", sent, len(recs), 100*res.GaveUp, res.HitRate)
}

// TestRequestRecordPrefillWorker: a pair's record names the engine that
// computed its prompt beside the one that decoded it; a request computed
// where it went names none.
func TestRequestRecordPrefillWorker(t *testing.T) {
	trace := []Request{
		{Arrival: 0, InputLength: 2048, OutputLength: 5, HashIDs: []uint64{1, 2, 3, 4}},
		{Arrival: time.Second, InputLength: 1100, OutputLength: 3, HashIDs: []uint64{1, 2, 9}},
	}
	for _, mode := range []string{"disagg-always", "kv"} {
		t.Run(mode, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Workers, cfg.RateScale, cfg.PrefillWorkers, cfg.DecodeWorkers = 2, 1, 1, 1
			_, recs, err := RunRecorded(trace, cfg, mode)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2", len(recs))
			}
			for i, r := range recs {
				if pair := mode == "disagg-always"; pair && (r.PrefillWorker == 0 || r.PrefillWorker == r.Worker) || !pair && r.PrefillWorker != 0 {
					t.Errorf("request %d went to %d with its prompt computed on %d", i, r.Worker, r.PrefillWorker)
				}
			}
			if recs[0].PrefillWorker != recs[1].PrefillWorker {
				t.Errorf("prompts computed on %d and %d; one prefill engine", recs[0].PrefillWorker, recs[1].PrefillWorker)
			}
		})
	}
}
