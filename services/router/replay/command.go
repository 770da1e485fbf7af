package replay

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/services/mocker/engine"
)

// CommandConfig is the replay command's flags.
type CommandConfig struct {
	Config
	TracePath string
	Modes     string
	OutDir    string
	Parallel  int
}

// RegisterFlags adds the command's flags.
func (c *CommandConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Engine = engine.DefaultConfig()
	fs.StringVar(&c.TracePath, "trace", "", "Mooncake JSON-lines trace (.jsonl or .jsonl.gz); empty: the shipped synthetic trace")
	fs.IntVar(&c.Workers, "workers", 8, "simulated engines")
	fs.IntVar(&c.Engine.NumGPUBlocks, "kv-blocks", 131072, "KV blocks per engine")
	fs.IntVar(&c.Engine.BlockSize, "block-size", 16, "tokens per KV block")
	fs.Float64Var(&c.Engine.SpeedupRatio, "speedup", 1, "engine speed-up ratio (virtual time; must be positive)")
	fs.Float64Var(&c.RateScale, "rate-scale", 6, "request rate multiplier (trace timestamps are divided by it)")
	fs.IntVar(&c.TraceBlockSize, "trace-block-size", 512, "tokens per trace hash id")
	// The router's own default weight is 1.0; on this trace (long prompts,
	// short answers) prefill dominates, and weight 32 both hits the cache
	// more and lowers TTFT. Pass --kv-overlap-score-weight 1 to see the
	// router's defaults.
	fs.Float64Var(&c.OverlapWeight, "kv-overlap-score-weight", 32, "router overlap weight (the router service defaults to 1)")
	fs.Float64Var(&c.Temperature, "router-temperature", 0, "router temperature")
	fs.DurationVar(&c.ApproxTTL, "router-ttl", 120*time.Second, "approximate mode prediction TTL")
	fs.IntVar(&c.ApproxMaxEntries, "router-max-tree-size", 1<<20, "approximate mode maximum (block, worker) entries")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.StringVar(&c.Modes, "modes", strings.Join(Modes, ","), "comma-separated modes to run")
	fs.StringVar(&c.OutDir, "out", "bin", "directory for router-replay.csv and router-replay.png (empty: none)")
	fs.IntVar(&c.Parallel, "parallel", runtime.GOMAXPROCS(0), "modes simulated at once")
}

// Command runs the replay and writes the table to out, plus CSV and PNG
// files under OutDir.
func Command(c CommandConfig, out io.Writer) error {
	var trace []Request
	var err error
	if c.TracePath == "" {
		trace, err = SyntheticTrace()
	} else {
		trace, err = LoadTrace(c.TracePath, c.TraceBlockSize)
	}
	if err != nil {
		return err
	}
	modes := strings.Split(c.Modes, ",")
	for _, m := range modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("replay: unknown mode %q: valid modes are %s", m, strings.Join(Modes, ", "))
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	bound := ReuseBound(trace, c.Config)
	results, err := RunAll(trace, c.Config, modes, c.Parallel)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "router replay: %d requests, %d workers x %d KV blocks of %d tokens, rate x%g, overlap weight %g, temperature %g\n",
		len(trace), c.Workers, c.Engine.NumGPUBlocks, c.Engine.BlockSize, c.RateScale, c.OverlapWeight, c.Temperature)
	if err := WriteTable(out, results, bound); err != nil {
		return err
	}
	if c.OutDir == "" {
		return nil
	}
	if err := os.MkdirAll(c.OutDir, 0o755); err != nil {
		return err
	}
	csvPath, pngPath := filepath.Join(c.OutDir, "router-replay.csv"), filepath.Join(c.OutDir, "router-replay.png")
	if err := writeFile(csvPath, func(w io.Writer) error { return WriteCSV(w, results, bound) }); err != nil {
		return err
	}
	if err := writeFile(pngPath, func(w io.Writer) error { return WritePNG(w, results, bound) }); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s and %s\n", csvPath, pngPath)
	return nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(fn(f), f.Close())
}
