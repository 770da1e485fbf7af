package replay

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// CommandConfig is the replay command's flags.
type CommandConfig struct {
	Config
	// Traces is a comma list of built-in trace names or trace files.
	Traces string
	// LoRAs, when positive, gives the trace's requests that many adapters
	// (AssignLoRAs).
	LoRAs      int
	Modes      string
	RateScales string
	SLO        time.Duration
	// SLOITL is the ITL p90 a rate scale must meet too (--slo-itl-p90).
	SLOITL   msDuration
	OutDir   string
	Parallel int
	// GoodputSteps is how many bisection steps refine each mode's goodput
	// between the sweep's rate scales; the sweep is extended above its top
	// while a mode still meets the SLO there, whatever this is.
	GoodputSteps int
	// Goals runs the goal table instead of --modes: round-robin and kv
	// over the sweep, the other goal modes at GoalsRate, and prints one
	// table of the routing goals for all traces after their sweeps.
	Goals bool
	// GoalsRate is the default rate scale the goals are judged at.
	GoalsRate float64
	// GoalsSeeds is how many seeds kv and the peers run at GoalsRate for
	// the run-to-run spread the peer goals allow (1: none).
	GoalsSeeds int
	// RequestsCSV also writes router-replay-requests.csv under OutDir:
	// every run replayed again, one row per request (see RecordRuns).
	RequestsCSV bool
	// PlacementRounds, when positive, runs that many rounds of the offline
	// placement search (SearchPlacement) per trace at GoalsRate, looking
	// PlacementWindow ahead.
	PlacementRounds int
	PlacementWindow time.Duration
}

// RegisterFlags adds the command's flags.
func (c *CommandConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Engine = simengine.DefaultConfig()
	fs.StringVar(&c.Traces, "trace", "mooncake", "comma list of traces: built-in ("+builtinNames()+") or Mooncake JSON-lines files (.jsonl, .jsonl.gz)")
	fs.IntVar(&c.Workers, "workers", 8, "simulated engines")
	fs.IntVar(&c.Engine.NumGPUBlocks, "kv-blocks", 131072, "KV blocks per engine")
	fs.IntVar(&c.Engine.BlockSize, "block-size", 16, "tokens per KV block")
	fs.IntVar(&c.LoRAs, "loras", 0, "give every request one of this many LoRA adapters, by its first trace block (requests sharing a prompt's start share one; a trace's own lora_name stays); 0: none. kv-adapter-blind is kv with a router that prices no adapter load")
	fs.IntVar(&c.Engine.MaxLoras, "max-loras", 4, "LoRA adapter slots per engine (used when requests carry adapters)")
	fs.Float64Var(&c.Engine.LoraLoadMs, "lora-load-ms", timingmodel.DefaultLoraLoadMs, "milliseconds an engine takes to load an adapter into a slot, published in its timing model")
	fs.IntVar(&c.Engine.NumHostBlocks, "host-kv-blocks", 0, "KV blocks of each engine's host-memory tier: blocks evicted from the GPU go there and a prefix hit on them loads them back at the timing model's CPU load time (0: none); kv-tier-blind is kv with a router that sees the GPU blocks only")
	fs.IntVar(&c.DPSize, "dp-size", 1, "data-parallel ranks per worker: each rank an engine of its own with --kv-blocks (--workers x --dp-size engines), its KV events and load under its rank; kv routes to ranks, kv-rank-blind to workers, each worker then giving the request its rank with the fewest requests in flight. The peer and disaggregated modes take 1 only")
	fs.Float64Var(&c.Engine.SpeedupRatio, "speedup", 1, "engine speed-up ratio (virtual time; must be positive)")
	fs.StringVar(&c.RateScales, "rate-scales", "2,4,6,9,12", "comma list of request rate multipliers (trace timestamps are divided by each)")
	fs.DurationVar(&c.SLO, "slo-ttft-p90", 2*time.Second, "TTFT p90 a rate scale must meet to count towards a mode's goodput")
	c.SLOITL = msDuration(50 * time.Millisecond)
	fs.Var(&c.SLOITL, "slo-itl-p90", "ITL p90 (every gap between two tokens of a request, all requests pooled) a rate scale must meet too to count towards a mode's goodput: milliseconds, or a duration such as 50ms")
	fs.IntVar(&c.PrefillWorkers, "prefill-workers", 0, "disagg and disagg-always: engines of --workers in the prefill pool (0: --workers minus --decode-workers, or half of --workers when both are 0)")
	fs.IntVar(&c.DecodeWorkers, "decode-workers", 0, "disagg and disagg-always: engines of --workers in the decode pool (0: --workers minus --prefill-workers); the two pools add up to --workers")
	fs.Float64Var(&c.KVTransferGbps, "kv-transfer-gbps", core.DefaultKVTransferGbps, "disagg modes: the prefill-to-decode KV link's bandwidth in Gb/s, for the engines (n blocks take n x block size x --kv-bytes-per-token x 8 / Gb/s) and the router's price of it (0: free)")
	fs.IntVar(&c.KVBytesPerToken, "kv-bytes-per-token", core.DefaultKVBytesPerToken, "disagg modes: bytes of KV cache per token, for the transfer's time and price")
	fs.IntVar(&c.GoodputSteps, "goodput-steps", 1, "bisection steps per mode between the highest rate scale meeting the SLO and the next one missing it (the sweep also goes on above --rate-scales, x1.5 at a time, while a mode meets the SLO at its top)")
	fs.IntVar(&c.TraceBlockSize, "trace-block-size", 512, "tokens per trace hash id")
	// The router's defaults, as the service, the frontend's in-process
	// router and make run have them: no trace gets its own.
	fs.Float64Var(&c.OverlapWeight, "kv-overlap-score-weight", 1, "router overlap weight: multiplies the predicted prefill time (1: the workers' timing models as published)")
	fs.Float64Var(&c.Temperature, "router-temperature", 0, "router temperature")
	fs.DurationVar(&c.ApproxTTL, "router-ttl", 120*time.Second, "approximate mode prediction TTL")
	fs.IntVar(&c.ApproxMaxEntries, "router-max-tree-size", 1<<20, "approximate mode maximum (block, worker) entries")
	fs.DurationVar(&c.RequestTTL, "router-request-ttl", 30*time.Minute, "routers forget requests never freed after this long")
	fs.DurationVar(&c.EventDelay, "kv-event-delay", 5*time.Millisecond, "virtual time KV events and load reports take to reach the routers")
	fs.DurationVar(&c.SyncDelay, "replica-sync-delay", 5*time.Millisecond, "virtual time replica sync messages take between routers")
	fs.DurationVar(&c.LoadInterval, "load-interval", time.Second, "how often each engine reports its load (the workers' interval)")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.StringVar(&c.Modes, "modes", strings.Join(Modes, ","), "comma-separated modes to run")
	fs.StringVar(&c.OutDir, "out", "bin", "directory for router-replay.csv and router-replay.png (one subdirectory per trace when several; empty: none)")
	fs.IntVar(&c.Parallel, "parallel", runtime.GOMAXPROCS(0), "simulations run at once")
	fs.BoolVar(&c.Goals, "goals", false, "print the goal table for all traces (modes "+strings.Join(GoalModes, ",")+"; --modes is ignored): kv and kv-approx hit rate against the pooled bound, goodput kv/round-robin and the capacity bound, kv TTFT p90 over the cached floor, 3 and 8 replicas against one router, each with a verdict; also written to router-replay-goals.md under --out; then kv against the peer modes (dynamo, llm-d, sglang) and round-robin: hit rate, TTFT p50/p90/p99 at --goals-rate and goodput, kv's ratio to the best peer and the peer goals' verdicts")
	fs.Float64Var(&c.GoalsRate, "goals-rate", 6, "the default rate scale the goals are judged at (--goals)")
	fs.IntVar(&c.GoalsSeeds, "goals-seeds", 3, "seeds kv and the peer modes run at --goals-rate, and over their sweep's rate scales for goodput, for the run-to-run spread the peer goals allow (--goals; 1: no spread, no extra runs)")
	fs.IntVar(&c.PlacementRounds, "placement-search", 0, "after each trace's table, this many rounds of an offline placement search at --goals-rate (0: none): starting from kv's placement, each request goes where it adds the fewest requests over the TTFT goal's threshold over the next --placement-window of arrivals, on the true engines; it knows the trace's future, so it says what placement alone can reach, not what a router can")
	fs.DurationVar(&c.PlacementWindow, "placement-window", time.Second, "how far ahead (virtual time) the placement search looks")
	fs.BoolVar(&c.RequestsCSV, "requests-csv", false, "also write router-replay-requests.csv under --out: every run of the table replayed again (deterministic: the same run), one row per completed request: where it went, the router's and the engine's cached prefix, what the engine had queued and in flight at its arrival, its wait for admission, TTFT and E2E, its gaps between tokens (how many, how many over --slo-itl-p90, their sum), and the worker caching most of its prompt (its home), the home's cost and what the home's engine had queued and in flight, the fewest and the most decoding requests on any engine at its arrival, its share of the slow gaps (over --slo-itl-p90) that the steps computing its prompt gave the requests decoding beside them, and, for a disaggregated pair, the engine that computed its prompt (prefill_worker; 0: the one it went to)")
}

// ParseRates parses a comma list of positive rate scales.
func ParseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || v > 1e6 {
			return nil, fmt.Errorf("replay: --rate-scales %q: %q is not a positive number", s, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func loadNamed(name string, traceBlock int) ([]Request, string, error) {
	if _, ok := BuiltinTraces[name]; ok {
		t, err := BuiltinTrace(name)
		return t, name, err
	}
	t, err := LoadTrace(name, traceBlock)
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(name), ".gz"), ".jsonl")
	return t, base, err
}

// Command runs the sweep for every trace and writes each table to out,
// plus CSV and PNG files under OutDir.
func Command(c CommandConfig, out io.Writer) error {
	modes := strings.Split(c.Modes, ",")
	if c.Goals {
		modes = GoalModes
		if !(c.GoalsRate > 0) || math.IsInf(c.GoalsRate, 0) {
			return errors.New("replay: --goals-rate must be positive")
		}
	}
	for _, m := range modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("replay: unknown mode %q: valid modes are %s", m, strings.Join(Modes, ", "))
		}
	}
	rates, err := ParseRates(c.RateScales)
	if err != nil {
		return err
	}
	if c.SLO <= 0 {
		return errors.New("replay: --slo-ttft-p90 must be positive")
	}
	if c.SLOITL <= 0 {
		return errors.New("replay: --slo-itl-p90 must be positive")
	}
	slo := Objectives{TTFT: c.SLO, ITL: time.Duration(c.SLOITL)}
	if c.Goals && c.GoalsSeeds < 1 {
		return errors.New("replay: --goals-seeds must be at least 1")
	}
	if c.GoodputSteps < 0 {
		return errors.New("replay: --goodput-steps must not be negative")
	}
	if c.PlacementRounds < 0 || c.PlacementWindow < 0 {
		return errors.New("replay: --placement-search and --placement-window must not be negative")
	}
	if c.PlacementRounds > 0 && (!(c.GoalsRate > 0) || math.IsInf(c.GoalsRate, 0)) {
		return errors.New("replay: --goals-rate must be positive")
	}
	if c.RequestsCSV && c.OutDir == "" {
		return errors.New("replay: --requests-csv writes under --out, which is empty")
	}
	c.RateScale = rates[0]
	if err := c.Validate(); err != nil {
		return err
	}
	names := strings.Split(c.Traces, ",")
	var goals []GoalRow
	for _, name := range names {
		trace, label, err := loadNamed(strings.TrimSpace(name), c.TraceBlockSize)
		AssignLoRAs(trace, c.LoRAs)
		if err != nil {
			return err
		}
		var results []Result
		if c.Goals {
			results, err = RunGoals(trace, c.Config, rates, c.GoalsRate, slo, c.GoodputSteps, c.Parallel)
		} else {
			results, err = RunAll(trace, c.Config, modes, rates, c.Parallel)
			if err == nil {
				results, err = RefineGoodput(trace, c.Config, modes, results, slo, c.GoodputSteps, c.Parallel)
			}
		}
		if err != nil {
			return fmt.Errorf("trace %s: %w", label, err)
		}
		r := &Report{Trace: label, Requests: len(trace), Config: c.Config, Bounds: ComputeBounds(trace, c.Config), SLO: c.SLO, SLOITL: slo.ITL, Results: results}
		r.HorizonBound()
		r.SetChainFloors(trace)
		if err := WriteTable(out, r); err != nil {
			return err
		}
		if c.PlacementRounds > 0 {
			pc := c.Config
			pc.RateScale = c.GoalsRate
			rounds, err := SearchPlacement(trace, pc, r.Bounds.FloorTTFT[1], c.PlacementRounds, c.PlacementWindow)
			if err != nil {
				return fmt.Errorf("trace %s: %w", label, err)
			}
			if err := WritePlacementSearch(out, label, len(trace), c.GoalsRate, r.Bounds.FloorTTFT[1], r.Bounds.Pooled, c.PlacementWindow, rounds); err != nil {
				return err
			}
		}
		if c.Goals {
			row := Goals(r, c.GoalsRate)
			spread, err := RunSpread(trace, c.Config, results, comparedModes[:4], c.GoalsRate, c.GoalsSeeds, c.Parallel)
			if err != nil {
				return fmt.Errorf("trace %s: %w", label, err)
			}
			row.SetSpread(spread)
			good, err := RunGoodputSpread(trace, c.Config, results, comparedModes[:4], slo, c.GoalsSeeds, c.Parallel)
			if err != nil {
				return fmt.Errorf("trace %s: %w", label, err)
			}
			row.SetGoodputSpread(good)
			goals = append(goals, row)
			fmt.Fprintln(out)
		}
		if c.OutDir == "" {
			continue
		}
		dir := c.OutDir
		if len(names) > 1 {
			dir = filepath.Join(dir, "router-replay-"+label)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		csvPath, pngPath := filepath.Join(dir, "router-replay.csv"), filepath.Join(dir, "router-replay.png")
		if err := writeFile(csvPath, func(w io.Writer) error { return WriteCSV(w, r) }); err != nil {
			return err
		}
		if err := writeFile(pngPath, func(w io.Writer) error { return WritePNG(w, r) }); err != nil {
			return err
		}
		if c.RequestsCSV {
			rc := c.Config
			rc.SlowGap = time.Duration(c.SLOITL)
			runs, err := RecordRuns(trace, rc, results, c.Parallel)
			if err != nil {
				return fmt.Errorf("trace %s: %w", label, err)
			}
			reqPath := filepath.Join(dir, "router-replay-requests.csv")
			if err := writeFile(reqPath, func(w io.Writer) error { return WriteRequestsCSV(w, runs) }); err != nil {
				return err
			}
			fmt.Fprintf(out, "wrote %s\n", reqPath)
		}
		fmt.Fprintf(out, "wrote %s and %s\n\n", csvPath, pngPath)
	}
	if !c.Goals {
		return nil
	}
	if err := WriteGoals(out, goals, c.GoalsRate, c.SLO); err != nil || c.OutDir == "" {
		return err
	}
	if err := os.MkdirAll(c.OutDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(c.OutDir, "router-replay-goals.md")
	if err := writeFile(path, func(w io.Writer) error { return WriteGoals(w, goals, c.GoalsRate, c.SLO) }); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "wrote %s\n", path)
	return err
}

// msDuration is a duration flag that also takes a bare number of
// milliseconds ("50" is 50ms).
type msDuration time.Duration

func (d *msDuration) String() string { return time.Duration(*d).String() }

func (d *msDuration) Set(s string) error {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > float64(math.MaxInt64/int64(time.Millisecond)) {
			return fmt.Errorf("%q is not a number of milliseconds", s)
		}
		*d = msDuration(v * float64(time.Millisecond))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is neither milliseconds nor a duration", s)
	}
	*d = msDuration(v)
	return nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(fn(f), f.Close())
}
