package plannersim

import (
	"bytes"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

func testConfig() Config {
	pc := core.DefaultConfig()
	pc.MaxReplicas = 6
	pc.MaxAge = 3 * pc.Interval
	pc.Lead = 20 * time.Second
	return Config{Engine: simengine.DefaultConfig(), TraceBlock: 16, Startup: 20 * time.Second, Window: 30 * time.Second, Planner: pc}
}

// steady is n requests of 2,048 prompt tokens (128 blocks of 16, none
// shared) and 128 output tokens at rate per second from start.
func steady(start time.Duration, n int, rate float64, first uint64) []replay.Request {
	var out []replay.Request
	for i := range n {
		ids := make([]uint64, 128)
		for j := range ids {
			ids[j] = first + uint64(i*128+j)
		}
		out = append(out, replay.Request{Arrival: start + time.Duration(float64(i)/rate*float64(time.Second)),
			InputLength: 2048, OutputLength: 128, HashIDs: ids})
	}
	return out
}

func TestRunFixedPool(t *testing.T) {
	// One request at 0 and one at 59 s on 2 engines from the start: both
	// served, two 30 s windows, 2 engines for the 59 s and the last
	// request's run.
	trace := append(steady(0, 1, 1, 0), steady(59*time.Second, 1, 1, 100)...)
	res, err := Run(trace, testConfig(), "static", 2)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 2 || res.Windows != 2 || res.Attainment != 1 || res.ScaleChanges != 0 || res.MaxEngines != 2 {
		t.Fatalf("result %v", res)
	}
	if res.EngineSeconds < 2*59 || res.EngineSeconds > 2*61 {
		t.Fatalf("engine-seconds %.1f, want about 2 x 59 s plus a request", res.EngineSeconds)
	}
	// Each request found an idle engine: its TTFT, as its client sees it,
	// is its prompt's prefill on an idle engine (the step and the
	// request's own overhead outside it), the timing model's PrefillMs.
	want := float64(simengine.PrefillTime(2048, 1)) / 1e6
	for _, w := range res.Timeline {
		if math.Abs(w.TTFTp90Ms-want) > 1e-3 {
			t.Fatalf("window at %v: TTFT %.3f ms, want %.3f (the prefill alone, its overhead in)", w.Start, w.TTFTp90Ms, want)
		}
	}
}

func TestRunWarmup(t *testing.T) {
	// The run of TestRunFixedPool judged from a warm-up on: the windows
	// starting then or later, the engines' time from then on.
	trace := append(steady(0, 1, 1, 0), steady(59*time.Second, 1, 1, 100)...)
	for _, tc := range []struct {
		warmup  time.Duration
		windows int
		least   float64 // engine-seconds, at least (2 engines from warmup to 59 s)
	}{
		{0, 2, 2 * 59},
		{30 * time.Second, 1, 2 * 29},
		{time.Minute, 0, 0},
	} {
		t.Run(tc.warmup.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.Warmup = tc.warmup
			res, err := Run(trace, cfg, "static", 2)
			if err != nil {
				t.Fatal(err)
			}
			w := res.Warm
			if w.Windows != tc.windows || w.EngineSeconds < tc.least || w.EngineSeconds > tc.least+4 || (w.Windows > 0 && w.Attainment != 1) {
				t.Fatalf("warm %+v, want %d windows, %.0f-%.0f engine-s", w, tc.windows, tc.least, tc.least+4)
			}
		})
	}
}

func TestRunPlannerFollowsAStep(t *testing.T) {
	// 2 req/s for 5 minutes, 20 req/s for 5, 2 req/s for 15: the planner
	// grows the pool (within 6) and shrinks it once the step's rise has
	// left the rates it keeps room for rises from (about 11 minutes of
	// them), and uses fewer engine-seconds than the pool the peak needs
	// all along.
	cfg := testConfig()
	trace := steady(0, 600, 2, 0)
	trace = append(trace, steady(300*time.Second, 6000, 20, 1<<20)...)
	trace = append(trace, steady(600*time.Second, 1800, 2, 1<<30)...)
	planned, err := Run(trace, cfg, "planner", 0)
	if err != nil {
		t.Fatal(err)
	}
	peak, mean, _, capRPS := Static(trace, cfg, 0, 0)
	if !(capRPS > 0) || peak < mean || peak < 2 {
		t.Fatalf("static sizes peak %d mean %d at %.2f req/s an engine", peak, mean, capRPS)
	}
	static, err := Run(trace, cfg, "static-peak", peak)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v\n%v", planned, static)
	if planned.Requests != len(trace) || planned.MaxEngines < 2 || planned.MaxEngines > cfg.Planner.MaxReplicas || planned.ScaleChanges < 2 {
		t.Fatalf("planner: %v", planned)
	}
	if planned.Flaps != 0 {
		t.Fatalf("the planner flapped %d times on a step", planned.Flaps)
	}
	if planned.EngineSeconds >= static.EngineSeconds {
		t.Fatalf("planner used %.0f engine-s, the peak's static pool %.0f", planned.EngineSeconds, static.EngineSeconds)
	}
}

func TestCommandWritesTheCSV(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Command([]string{"--preset", "sessions", "--requests", "300", "--rate", "5", "--rate-profile", "diurnal", "--profile-period", "1m",
		"--profile-amplitude", "0.5", "--engine-startup", "10s", "--adjustment-interval", "5s", "--decisions", "--out", dir}, &out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, CSVName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0], []string{"policy", "attainment", "engine_seconds", "scale_changes"}) || len(rows) != 5 {
		t.Fatalf("CSV %v", rows)
	}
	var policies []string
	for _, r := range rows[1:] {
		policies = append(policies, r[0])
	}
	if !slices.Equal(policies, []string{"planner-window", "planner-trend", "static-peak", "static-mean"}) {
		t.Fatalf("policies %v", policies)
	}
	if !strings.Contains(out.String(), "static-peak") || !strings.Contains(out.String(), "flaps") {
		t.Fatalf("table:\n%s", out.String())
	}
	// The timeline: every policy's windows, as many as the CSV's row
	// judged, in time order.
	tf, err := os.Open(filepath.Join(dir, TimelineName))
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	timeline, err := csv.NewReader(tf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(timeline[0], TimelineHeader) {
		t.Fatalf("timeline header %v", timeline[0])
	}
	windows := map[string]int{}
	last := map[string]float64{}
	for _, r := range timeline[1:] {
		start, err := strconv.ParseFloat(r[1], 64)
		if err != nil || (windows[r[0]] > 0 && start <= last[r[0]]) || (r[7] != "0" && r[7] != "1") {
			t.Fatalf("timeline row %v", r)
		}
		windows[r[0]]++
		last[r[0]] = start
	}
	for _, p := range policies {
		if windows[p] == 0 {
			t.Fatalf("no windows of %s in the timeline", p)
		}
	}
	// The decisions: the header and a line per decision of the two
	// planner runs only.
	d, err := os.ReadFile(filepath.Join(dir, DecisionsName))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(d), "\n"), "\n")
	if lines[0]+"\n" != DecisionsHeader || len(lines) < 3 {
		t.Fatalf("decisions:\n%s", d)
	}
	cols := strings.Count(DecisionsHeader, "\t") + 1
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) != cols || !strings.HasPrefix(f[0], "planner-") {
			t.Fatalf("decision line %q", l)
		}
	}
}

func TestRunStartsFromTheOpeningPool(t *testing.T) {
	// 30 req/s from the start: the planner's run starts with the opening
	// pool Static gives for it, ready, so its first window is served as
	// a static pool of that size serves it.
	cfg := testConfig()
	trace := steady(0, 1800, 30, 0)
	_, _, opening, capRPS := Static(trace, cfg, 0, 0)
	if want := int(math.Ceil(30 / capRPS)); opening != want || opening < 2 {
		t.Fatalf("opening pool %d at %.2f req/s an engine, want %d (at least 2)", opening, capRPS, want)
	}
	cfg.Opening = opening
	res, err := Run(trace, cfg, "planner", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Timeline[0].ReadyEngines < float64(opening) || !res.Timeline[0].Met {
		t.Fatalf("first window %+v with an opening pool of %d", res.Timeline[0], opening)
	}
}

// conversations is sessions conversations of turns turns each, a turn
// every gap, the sessions starting 300 ms apart: turn k's prompt is the
// conversation's k x 32 blocks of 16 tokens (the earlier turns' prompts
// and 32 new blocks), with 256 output tokens.
func conversations(sessions, turns int, gap time.Duration) []replay.Request {
	var out []replay.Request
	for s := range sessions {
		var ids []uint64
		for k := range turns {
			for j := range 32 {
				ids = append(ids, uint64(s)<<32|uint64(k*32+j))
			}
			out = append(out, replay.Request{Arrival: time.Duration(s)*300*time.Millisecond + time.Duration(k)*gap, Session: uint64(s + 1),
				InputLength: len(ids) * 16, OutputLength: 256, HashIDs: slices.Clone(ids)})
		}
	}
	slices.SortStableFunc(out, func(a, b replay.Request) int { return int(a.Arrival - b.Arrival) })
	return out
}

func TestRunKeepsConversationsOnTheirCache(t *testing.T) {
	// Each turn repeats its conversation's earlier prompts: of its 15 x 32
	// blocks over 5 turns, 10 x 32 are cached if every turn goes where the
	// last one went (2/3). The router's core sends a turn to the engine
	// holding its prefix, whatever the pool's size; on 4 engines busy with
	// the other conversations, an engine picked by load alone holds it
	// about once in four (19% of the prompt tokens cached).
	trace := conversations(16, 5, 5*time.Second)
	for _, engines := range []int{1, 4} {
		t.Run(strconv.Itoa(engines), func(t *testing.T) {
			res, err := Run(trace, testConfig(), "static", engines)
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != len(trace) || res.CachedShare() < 0.6 {
				t.Fatalf("%v: %.0f%% of prompt tokens cached, want about 2/3", res, 100*res.CachedShare())
			}
		})
	}
}

func TestRunStaticSizesForItsCache(t *testing.T) {
	// A pool sized for the cached share its run measured: the size at
	// share 0 runs first, then the size at the share each run measured,
	// until a size repeats, three runs at most. The smallest run whose
	// share sizes it at no more than it had is chosen, else the largest.
	trace := conversations(4, 5, 5*time.Second)
	sequence := func(sizes ...int) func(float64, float64) int {
		i := 0
		return func(float64, float64) int { i++; return sizes[min(i, len(sizes))-1] }
	}
	for _, tc := range []struct {
		name   string
		size   func(cached, footprint float64) int
		sizes  []int
		chosen int
	}{
		{"holds", func(float64, float64) int { return 2 }, []int{2}, 2},
		{"smaller for its cache", func(c, _ float64) int {
			if c > 0.5 {
				return 2
			}
			return 3
		}, []int{3, 2}, 2},
		// 3 sizes itself at 2, 2 sizes itself at 3: 2 would break the
		// objectives it is sized for; 3 holds.
		{"a cycle", sequence(3, 2, 3), []int{3, 2}, 3},
		{"at most three runs", sequence(1, 2, 3, 4), []int{1, 2, 3}, 3},
		{"three runs, the smallest that fits", sequence(6, 4, 5, 4), []int{6, 4, 5}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, chosen, err := RunStatic(trace, testConfig(), "static", tc.size)
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			for _, r := range runs {
				sizes = append(sizes, r.MaxEngines)
			}
			if !slices.Equal(sizes, tc.sizes) || runs[chosen].MaxEngines != tc.chosen {
				t.Fatalf("sizes %v, chosen %d; want %v, %d", sizes, runs[chosen].MaxEngines, tc.sizes, tc.chosen)
			}
		})
	}
}
