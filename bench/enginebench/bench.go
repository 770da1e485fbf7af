// Package enginebench is the benchmark behind mocker-engine-bench. It drives
// the simulated engine (pkg/simengine) on a simulated clock, as the replay
// does, and prints a table: the simulated serving figures of a
// closed-loop workload at several concurrencies (what the timing model
// predicts a vLLM worker would do), the real CPU cost of a step, and the
// cost of hashing KV blocks.
package enginebench

import (
	"flag"
	"fmt"
	"io"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// Config is the workload.
type Config struct {
	// Requests is the number of requests per concurrency level.
	Requests int
	// Concurrency lists the closed-loop client counts to run.
	Concurrency []int
	// SharedPrefix is the length of the system prompt every request shares.
	SharedPrefix int
	// UniqueTokens is the length of each request's own part of the prompt.
	UniqueTokens int
	// OutputTokens is how many tokens each request generates.
	OutputTokens int
	// HashTable adds the kvhash cost table (a few seconds of measurement).
	HashTable bool
}

// RegisterFlags adds the benchmark's flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Requests, "requests", 1000, "requests per concurrency level")
	fs.IntVar(&c.SharedPrefix, "shared-prefix", 512, "tokens of the system prompt all requests share")
	fs.IntVar(&c.UniqueTokens, "unique-tokens", 512, "tokens of each request's own prompt")
	fs.IntVar(&c.OutputTokens, "output-tokens", 128, "tokens generated per request")
	fs.BoolVar(&c.HashTable, "hash-table", true, "also measure kvhash.Hashes per block size")
	c.Concurrency = []int{1, 16, 64, 256}
}

// result is what one concurrency level measured.
type result struct {
	concurrency int
	simulated   time.Duration
	outputToks  int
	ttft, itl   time.Duration
	hitRate     float64
	preemptions uint64
	steps       uint64
	wall        time.Duration
}

// Run runs the workload and writes the table to w.
func Run(cfg Config, w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "concurrency\tsim time\tsim output tok/s\tmean TTFT\tmean ITL\tprefix hit\tpreemptions\tsteps\tCPU/step\t\n")
	for _, c := range cfg.Concurrency {
		r, err := runLevel(cfg, c)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%.1fs\t%.0f\t%.1fms\t%.2fms\t%.1f%%\t%d\t%d\t%.1fµs\t\n",
			r.concurrency, r.simulated.Seconds(), float64(r.outputToks)/r.simulated.Seconds(),
			ms(r.ttft), ms(r.itl), 100*r.hitRate, r.preemptions, r.steps,
			float64(r.wall.Microseconds())/float64(r.steps))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if !cfg.HashTable {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "kvhash block size\tns/block\tallocs/op\t\n")
	for _, bs := range []int{16, 32, 64} {
		const blocks = 128
		tokens := make([]uint32, bs*blocks)
		for i := range tokens {
			tokens[i] = uint32(i*7919) % 150000
		}
		dst := make([]kvhash.Block, 0, blocks)
		res := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dst = kvhash.Hashes(tokens, bs, dst[:0])
			}
		})
		fmt.Fprintf(tw, "%d\t%.1f\t%d\t\n", bs, float64(res.NsPerOp())/blocks, res.AllocsPerOp())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runLevel runs cfg.Requests requests, c at a time, on a fresh engine with
// the default configuration, advancing a simulated clock by each step's
// duration.
func runLevel(cfg Config, c int) (result, error) {
	e, err := simengine.New(simengine.DefaultConfig())
	if err != nil {
		return result{}, err
	}
	shared := make([]uint32, cfg.SharedPrefix)
	for i := range shared {
		shared[i] = uint32(1000 + i)
	}
	var now time.Duration
	type timing struct{ submitted, first, last time.Duration }
	times := map[string]*timing{}
	submitted := 0
	submit := func() error {
		p := append(make([]uint32, 0, cfg.SharedPrefix+cfg.UniqueTokens), shared...)
		for i := range cfg.UniqueTokens {
			p = append(p, uint32(20000+(submitted*cfg.UniqueTokens+i)%100000))
		}
		id := fmt.Sprint(submitted)
		if err := e.Add(simengine.Request{ID: id, Prompt: p, MaxTokens: cfg.OutputTokens}); err != nil {
			return fmt.Errorf("add request %s: %w", id, err)
		}
		times[id] = &timing{submitted: now}
		submitted++
		return nil
	}
	for submitted < min(c, cfg.Requests) {
		if err := submit(); err != nil {
			return result{}, err
		}
	}
	r := result{concurrency: c}
	var ttft, itl time.Duration
	itlCount := 0
	start := time.Now()
	for !e.Idle() {
		res := e.Step()
		now += res.Duration
		for _, o := range res.Outputs {
			t := times[o.RequestID]
			if len(o.Tokens) > 0 {
				r.outputToks++
				if o.Usage.CompletionTokens == 1 {
					t.first = now
					ttft += now - t.submitted
				} else {
					itl += now - t.last
					itlCount++
				}
				t.last = now
			}
			if o.Finish != simengine.FinishNone {
				delete(times, o.RequestID)
				if submitted < cfg.Requests {
					if err := submit(); err != nil {
						return result{}, err
					}
				}
			}
		}
	}
	r.wall = time.Since(start)
	st := e.Stats()
	r.simulated, r.steps, r.preemptions, r.hitRate = now, st.Steps, st.Preemptions, st.PrefixHitRate()
	if cfg.Requests > 0 {
		r.ttft = ttft / time.Duration(cfg.Requests)
	}
	if itlCount > 0 {
		r.itl = itl / time.Duration(itlCount)
	}
	return r, nil
}
