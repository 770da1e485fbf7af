package plannersim

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// CSVName is the file Command writes under --out, one row per policy.
const CSVName = "planner-sim.csv"

// CSVHeader is its columns.
var CSVHeader = []string{"policy", "attainment", "engine_seconds", "scale_changes"}

// DecisionsName is the file --decisions writes beside CSVName: a line
// per decision of the planner's runs (DecisionsHeader).
const DecisionsName = "planner-sim-decisions.tsv"

// TimelineName is the file Command writes beside CSVName: one row per
// policy and judged window, under TimelineHeader.
const TimelineName = "planner-sim-timeline.csv"

// TimelineHeader is its columns: the window's start in seconds, the
// requests that arrived in it, the ready engines they found (mean), the
// engines running or starting at its end, the 90th percentiles of TTFT
// and ITL in ms, and whether both held the objectives (1 or 0).
var TimelineHeader = []string{"policy", "window_start_s", "requests", "ready_engines", "engines", "ttft_p90_ms", "itl_p90_ms", "met"}

// Command is planner-sim's command line: a trace (--trace, or generated
// from router-trace-gen's knobs, --rate-profile among them), run with the
// planner in the loop for each --predictor and with the static pools
// sized to the trace's peak and mean; it prints the table and writes
// planner-sim.csv under --out.
func Command(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("planner-sim", flag.ContinueOnError)
	preset := fs.String("preset", "sessions", "the generated trace's starting knobs (router-trace-gen's presets)")
	tracePath := fs.String("trace", "", "a Mooncake JSON-lines trace instead of a generated one")
	traceBlock := fs.Int("trace-block", 512, "tokens per hash id of --trace")
	out := fs.String("out", "bin/planner-sim", "directory of "+CSVName)
	startup := fs.Duration("engine-startup", 60*time.Second, "time a started engine takes to be ready")
	window := fs.Duration("window", 30*time.Second, "span over which the objectives are judged")
	preds := fs.String("predictor", "window,trend", "the planner's predictors to run, comma-separated (one policy each; empty: none)")
	static := fs.Bool("static", true, "also run the static pools (static-peak, static-mean); false runs the planner's alone")
	warmup := fs.Duration("warmup", 0, "also judge each run from this time on (windows starting then or later, engine-seconds from then on): a planner in service has its history, a run's starts with none")
	decisions := fs.Bool("decisions", false, "also write every decision of the planner's runs to "+DecisionsName+" under --out")
	oracles := fs.String("oracle", "", "also run these oracle policies, comma-separated, or all ("+strings.Join(OraclePolicies([]string{"<predictor>"}), ", ")+
		"): the trace's own rates or a predictor's forecast, sized by the capacity fixed pools of every size were measured to hold in --oracle-share of the windows or by the planner's run's, with no margin; they follow the planner's runs, whose capacities the model-capacity ones take")
	oracleShare := fs.Float64("oracle-share", 0.95, "the share of windows the oracle's measured capacity holds in fixed pools")
	staticCache := fs.String("static-cache", "measured", "how the static pools are sized: measured (for the share of prompt tokens their own run served from cache, rerun until the size holds) or none (every prompt token computed)")
	pc := core.DefaultConfig()
	fs.Float64Var(&pc.TTFTMs, "ttft-slo", pc.TTFTMs, "time to first token objective, ms")
	fs.Float64Var(&pc.ITLMs, "itl-slo", pc.ITLMs, "inter-token latency objective, ms")
	fs.DurationVar(&pc.Interval, "adjustment-interval", pc.Interval, "time between the planner's decisions")
	fs.IntVar(&pc.MinReplicas, "min-replicas", pc.MinReplicas, "fewest engines")
	fs.IntVar(&pc.MaxReplicas, "max-replicas", 64, "most engines")
	var scratch replay.GenConfig
	scratch.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *staticCache != "measured" && *staticCache != "none" {
		return fmt.Errorf("planner-sim: --static-cache %q: valid values are measured and none", *staticCache)
	}
	pc.MaxAge = 3 * pc.Interval
	pc.Lead = *startup
	// The planner is told the window its objectives are judged over.
	pc.JudgedWindow = *window
	var trace []replay.Request
	block := *traceBlock
	if *tracePath != "" {
		var err error
		if trace, err = replay.LoadTrace(*tracePath, block); err != nil {
			return err
		}
	} else {
		g, ok := replay.Presets[*preset]
		if !ok {
			return fmt.Errorf("unknown --preset %q", *preset)
		}
		bound := flag.NewFlagSet("", flag.ContinueOnError)
		g.RegisterFlags(bound)
		var err error
		fs.Visit(func(f *flag.Flag) {
			if bound.Lookup(f.Name) != nil && err == nil {
				err = bound.Set(f.Name, f.Value.String())
			}
		})
		if err != nil {
			return err
		}
		if trace, err = replay.Generate(g); err != nil {
			return err
		}
		block = g.BlockSize
	}
	cfg := Config{Engine: simengine.DefaultConfig(), TraceBlock: block, Startup: *startup, Window: *window, Planner: pc, Warmup: *warmup}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if *decisions {
		f, err := os.Create(filepath.Join(*out, DecisionsName))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.WriteString(f, DecisionsHeader); err != nil {
			return err
		}
		cfg.Decisions = f
	}
	peak, mean, opening, capRPS := Static(trace, cfg, 0, 0)
	cfg.Opening = opening
	fmt.Fprintf(stdout, "trace: %d requests over %.0f s; one engine holds %.2f req/s within TTFT %.0f ms and ITL %.0f ms with every prompt token computed: static-peak %d engines, static-mean %d, the planner's opening pool %d; engine start-up %v, interval %v\n",
		len(trace), trace[len(trace)-1].Arrival.Seconds(), capRPS, pc.TTFTMs, pc.ITLMs, peak, mean, opening, *startup, pc.Interval)
	var predictors []string
	for _, p := range strings.Split(*preds, ",") {
		if p != "" { // --predictor "": the static pools alone
			predictors = append(predictors, p)
		}
	}
	var oraclePolicies []string
	switch *oracles {
	case "":
	case "all":
		oraclePolicies = OraclePolicies(predictors)
	default:
		oraclePolicies = strings.Split(*oracles, ",")
	}
	first := ""
	if len(predictors) > 0 {
		first = predictors[0]
	}
	if len(oraclePolicies) > 0 {
		if !(*oracleShare > 0 && *oracleShare <= 1) {
			return fmt.Errorf("planner-sim: --oracle-share %v: must be in (0, 1]", *oracleShare)
		}
		// Every name is checked before any run, with the planner's runs
		// the model-capacity ones need to come.
		will := map[string]Result{}
		for _, p := range predictors {
			will[p] = Result{Capacities: []float64{1}}
		}
		for _, p := range oraclePolicies {
			if _, err := OracleFor(p, Measured{}, will, first); err != nil {
				return err
			}
		}
	}
	var results []Result
	planners := map[string]Result{}
	for _, p := range predictors {
		c := cfg
		c.Planner.Predictor = p
		if err := c.Planner.Validate(); err != nil {
			return err
		}
		res, err := Run(trace, c, "planner-"+p, 0)
		if err != nil {
			return err
		}
		results = append(results, res)
		planners[p] = res
	}
	if len(oraclePolicies) > 0 {
		m, err := Measure(trace, cfg, *oracleShare)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "oracle: fixed pools of %d to %d engines held %.0f%% of the windows sized at %.2f req/s an engine (every window's rate over it, rounded up)\n",
			m.Smallest, m.Largest, 100**oracleShare, m.Capacity)
		for _, p := range oraclePolicies {
			o, err := OracleFor(p, m, planners, first)
			if err != nil {
				return err
			}
			res, err := RunOracle(trace, cfg, p, o)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
	}
	statics := []struct {
		policy string
		size   func(cached, footprint float64) int
	}{
		{"static-peak", func(cached, footprint float64) int { n, _, _, _ := Static(trace, cfg, cached, footprint); return n }},
		{"static-mean", func(cached, footprint float64) int { _, n, _, _ := Static(trace, cfg, cached, footprint); return n }},
	}
	if !*static {
		statics = nil
	}
	for _, st := range statics {
		size := st.size
		if *staticCache == "none" {
			size = func(float64, float64) int { return st.size(0, 0) }
		}
		runs, chosen, err := RunStatic(trace, cfg, st.policy, size)
		if err != nil {
			return err
		}
		if len(runs) > 1 {
			fmt.Fprintf(stdout, "%s: sized for the cached share its runs measured:", st.policy)
			for _, r := range runs {
				fmt.Fprintf(stdout, " %d engines (%.1f%%, %.0f engine-s, %.0f%% cached, %.0f KV blocks a running request);", r.MaxEngines, 100*r.Attainment, r.EngineSeconds, 100*r.CachedShare(), r.Footprint())
			}
			fmt.Fprintf(stdout, " %d chosen\n", runs[chosen].MaxEngines)
		}
		results = append(results, runs[chosen])
	}
	PrintTable(stdout, results)
	if *warmup > 0 {
		PrintWarm(stdout, results, *warmup)
	}
	f, err := os.Create(filepath.Join(*out, CSVName))
	if err != nil {
		return err
	}
	if err := errors.Join(WriteCSV(f, results), f.Close()); err != nil {
		return err
	}
	if f, err = os.Create(filepath.Join(*out, TimelineName)); err != nil {
		return err
	}
	return errors.Join(WriteTimeline(f, results), f.Close())
}

// WriteTimeline writes every result's windows under TimelineHeader.
func WriteTimeline(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(TimelineHeader); err != nil {
		return err
	}
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, r := range results {
		for _, win := range r.Timeline {
			met := "0"
			if win.Met {
				met = "1"
			}
			if err := cw.Write([]string{r.Policy, f(win.Start.Seconds(), 0), strconv.Itoa(win.Requests), f(win.ReadyEngines, 2),
				strconv.Itoa(win.Engines), f(win.TTFTp90Ms, 1), f(win.ITLp90Ms, 2), met}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// PrintTable prints one line per policy, with its engine-seconds as a
// share of the static-peak run's, its flaps (changes that reversed one
// made within the 3 intervals before), and the share of its prompt
// tokens the engines served from their prefix caches.
func PrintTable(w io.Writer, results []Result) {
	peak := 0.0
	for _, r := range results {
		if r.Policy == "static-peak" {
			peak = r.EngineSeconds
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tattainment\twindows\tengine-s\tvs static-peak\tscale changes\tflaps\tmost engines\trequests\tcached\t")
	for _, r := range results {
		share := "-"
		if peak > 0 {
			share = fmt.Sprintf("%.0f%%", 100*r.EngineSeconds/peak)
		}
		cached := "-"
		if r.PromptTokens > 0 {
			cached = fmt.Sprintf("%.0f%%", 100*float64(r.CachedPromptTokens)/float64(r.PromptTokens))
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t%.0f\t%s\t%d\t%d\t%d\t%d\t%s\t\n", r.Policy, 100*r.Attainment, r.Windows, r.EngineSeconds, share, r.ScaleChanges, r.Flaps, r.MaxEngines, r.Requests, cached)
	}
	tw.Flush()
}

// PrintWarm prints one line per policy judged from warmup on (Result.Warm),
// with its engine-seconds from then on as a share of the static-peak
// run's.
func PrintWarm(w io.Writer, results []Result, warmup time.Duration) {
	peak := 0.0
	for _, r := range results {
		if r.Policy == "static-peak" {
			peak = r.Warm.EngineSeconds
		}
	}
	fmt.Fprintf(w, "from %v on:\n", warmup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tattainment\twindows\tengine-s\tvs static-peak\t")
	for _, r := range results {
		share := "-"
		if peak > 0 {
			share = fmt.Sprintf("%.0f%%", 100*r.Warm.EngineSeconds/peak)
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t%.0f\t%s\t\n", r.Policy, 100*r.Warm.Attainment, r.Warm.Windows, r.Warm.EngineSeconds, share)
	}
	tw.Flush()
}

// WriteCSV writes the results under CSVHeader.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, r := range results {
		if err := cw.Write([]string{r.Policy, strconv.FormatFloat(r.Attainment, 'f', 4, 64),
			strconv.FormatFloat(r.EngineSeconds, 'f', 1, 64), strconv.Itoa(r.ScaleChanges)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
