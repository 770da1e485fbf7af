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
	peak, mean, _, capRPS := Static(trace, cfg)
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
	_, _, opening, capRPS := Static(trace, cfg)
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
