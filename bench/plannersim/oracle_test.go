package plannersim

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
)

// step is 2 req/s for 60 s, 20 req/s for 60 s (windows 2 and 3) and 2
// req/s for 60 s more, of TestRunFixedPool's requests.
func step() []replay.Request {
	trace := steady(0, 120, 2, 0)
	trace = append(trace, steady(60*time.Second, 1200, 20, 1<<20)...)
	return append(trace, steady(120*time.Second, 120, 2, 1<<30)...)
}

// measuredStep is Measure on step, shared by the tests that read it.
var measuredStep = sync.OnceValues(func() (Measured, error) { return Measure(step(), testConfig(), 0.95) })

func TestMeasure(t *testing.T) {
	// Fixed pools from the fewest engines a window could be held with to
	// the first that holds every window: the step's windows need more
	// engines than the rest, and the capacity found holds 95% of the
	// windows at each window's rate over it.
	cfg := testConfig()
	m, err := measuredStep()
	if err != nil {
		t.Fatal(err)
	}
	if m.Smallest < 1 || m.Largest < m.Smallest || len(m.Runs) < m.Largest-m.Smallest+1 || len(m.Met) != 6 {
		t.Fatalf("pools %d..%d, %d runs, %d windows judged", m.Smallest, m.Largest, len(m.Runs), len(m.Met))
	}
	if last := m.Runs[len(m.Runs)-1]; last.Attainment != 1 && m.Largest < cfg.Planner.MaxReplicas {
		t.Fatalf("the largest pool run held %.2f of the windows", last.Attainment)
	}
	if !(m.Capacity > 0) || m.share(m.Capacity) < 0.95 {
		t.Fatalf("capacity %.2f req/s an engine holds %.2f of the windows", m.Capacity, m.share(m.Capacity))
	}
	// The step's windows need more engines than the rest: one engine
	// held the windows before it and not the step's.
	if held, clean := m.held(0, 1); !held || !clean {
		t.Fatalf("one engine: the first window held %v (telling %v)", held, clean)
	}
	if held, _ := m.held(2, 1); held {
		t.Fatal("one engine held the step's first window")
	}
	t.Logf("capacity %.2f req/s an engine; one engine's run stopped at %v", m.Capacity, m.Runs[0].GaveUp)
	// A run stopped for its backlog tells nothing from there on, until the
	// pool runs again, from the first window after whose rate it held
	// before (window 4, 2 req/s): that window (empty caches) does not
	// tell, the next does.
	if g := m.Runs[0].GaveUp; g == 0 || int(g/cfg.Window) != 2 {
		t.Fatalf("one engine's run stopped at %v, want in the step's first window", g)
	}
	for _, tc := range []struct {
		w           int
		held, clean bool
	}{{3, false, false}, {4, true, false}, {5, true, true}} {
		if held, clean := m.held(tc.w, 1); held != tc.held || clean != tc.clean {
			t.Fatalf("one engine, window %d: held %v telling %v, want %v %v", tc.w, held, clean, tc.held, tc.clean)
		}
	}
}

func TestRunOracle(t *testing.T) {
	// The oracle reads the step coming and starts its engines a start-up
	// ahead: the step's first window finds as many ready engines as it
	// needs at the measured capacity; after the step the pool shrinks;
	// the engine-seconds are fewer than the step's pool all along.
	cfg := testConfig()
	trace := step()
	m, err := measuredStep()
	if err != nil {
		t.Fatal(err)
	}
	o, err := OracleFor(OracleExact, m, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunOracle(trace, cfg, OracleExact, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity %.2f req/s an engine; %v", m.Capacity, res)
	need := m.need(2, m.Capacity)
	// (The window's first request arrives the instant they are ready,
	// and is routed first: a mean a little under need.)
	if res.Timeline[2].ReadyEngines < float64(need)-0.01 || need < 2 {
		t.Fatalf("the step's first window found %.3f ready engines, needs %d", res.Timeline[2].ReadyEngines, need)
	}
	if last := res.Timeline[len(res.Timeline)-1]; last.Engines >= need {
		t.Fatalf("the last window ends with %d engines, the step needed %d", last.Engines, need)
	}
	fixed, err := Run(trace, cfg, "fixed", need)
	if err != nil {
		t.Fatal(err)
	}
	if res.EngineSeconds >= fixed.EngineSeconds || res.Flaps != 0 || res.Requests != len(trace) {
		t.Fatalf("oracle %v; the step's pool all along %v", res, fixed)
	}
}

func TestOracleFor(t *testing.T) {
	m := Measured{Capacity: 3, Met: map[int][]bool{0: {true}}, Clean: map[int][]bool{0: {true}}, Rates: []float64{1}, Smallest: 1, Largest: 1}
	planners := map[string]Result{"window": {Capacities: []float64{0, 2, 0, 4}}}
	for _, tc := range []struct {
		policy    string
		predictor string
		caps      []float64 // at ticks 0..4
		err       string
	}{
		{policy: OracleExact, caps: []float64{3, 3, 3, 3, 3}},
		// The planner's capacities, a decision that judged none sized by
		// the last judged before it (the first judged at the start), the
		// last one past the end.
		{policy: OracleModelCapacity, caps: []float64{2, 2, 2, 4, 4}},
		{policy: "forecast-window", predictor: "window", caps: []float64{3, 3, 3, 3, 3}},
		{policy: "forecast-window-model-capacity", predictor: "window", caps: []float64{2, 2, 2, 4, 4}},
		{policy: "forecast-trend-model-capacity", err: "needs the planner's run"},
		{policy: "forecast-nope", err: "unknown predictor"},
		{policy: "nope", err: "unknown oracle policy"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			o, err := OracleFor(tc.policy, m, planners, "window")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var caps []float64
			if o.Capacity != nil {
				for tick := range 5 {
					caps = append(caps, o.Capacity(tick))
				}
			}
			if o.Predictor != tc.predictor || !slices.Equal(caps, tc.caps) {
				t.Fatalf("predictor %q capacities %v, want %q %v", o.Predictor, caps, tc.predictor, tc.caps)
			}
		})
	}
}

func TestCommandRunsTheOracles(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Command([]string{"--preset", "sessions", "--requests", "300", "--rate", "5", "--rate-profile", "diurnal", "--profile-period", "1m",
		"--profile-amplitude", "0.5", "--engine-startup", "10s", "--adjustment-interval", "5s", "--predictor", "window", "--static=false",
		"--oracle", "all", "--out", dir}, &out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CSVName))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var policies []string
	for _, r := range rows[1:] {
		policies = append(policies, r[0])
	}
	want := append([]string{"planner-window"}, OraclePolicies([]string{"window"})...)
	if !slices.Equal(policies, want) || !strings.Contains(out.String(), "oracle: fixed pools of") {
		t.Fatalf("policies %v, want %v; output:\n%s", policies, want, out.String())
	}
	if err := Command([]string{"--requests", "10", "--oracle", "oracle,nope", "--out", dir}, &out); err == nil || !strings.Contains(err.Error(), "unknown oracle policy") {
		t.Fatalf("an unknown oracle policy: %v", err)
	}
}
