package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/mocker/engine"
)

// Config sizes the simulated cluster and the router.
type Config struct {
	// Workers is the number of simulated engines.
	Workers int
	// Engine configures each engine (block size, KV blocks, speed-up, ...).
	Engine engine.Config
	// TraceBlockSize is the number of tokens each trace hash id stands for.
	TraceBlockSize int
	// RateScale multiplies the request rate: timestamps are divided by it.
	RateScale float64
	// OverlapWeight and Temperature are the router's cost parameters.
	OverlapWeight, Temperature float64
	// ApproxTTL and ApproxMaxEntries configure approximate mode.
	ApproxTTL        time.Duration
	ApproxMaxEntries int
	// Seed makes random choices repeatable.
	Seed uint64
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return errors.New("replay: at least one worker is needed")
	case c.TraceBlockSize < 1:
		return errors.New("replay: trace block size must be positive")
	case c.RateScale <= 0 || math.IsInf(c.RateScale, 0) || math.IsNaN(c.RateScale):
		return errors.New("replay: rate scale must be positive")
	case c.Engine.SpeedupRatio <= 0:
		return errors.New("replay: the engines' speed-up must be positive (virtual time needs durations)")
	case c.OverlapWeight < 0 || c.Temperature < 0:
		return errors.New("replay: overlap weight and temperature must not be negative")
	}
	return c.Engine.Validate()
}

// Result is what one mode measured.
type Result struct {
	Mode string
	// RateScale is the request rate multiplier it ran at.
	RateScale float64
	// Completed and Rejected count requests.
	Completed, Rejected int
	// HitRate is the fraction of prompt blocks found in the engines' prefix
	// caches at admission.
	HitRate float64
	// TTFT and E2E are latency percentiles (p50, p90, p99).
	TTFT, E2E [3]time.Duration
	// TTFTMean is the mean time to first token.
	TTFTMean time.Duration
	// Throughput is generated tokens per second of simulated time.
	Throughput float64
	// Spread is the busiest worker's prefill tokens over the mean.
	Spread float64
	// LastReject says why the last rejected request was refused.
	LastReject string
	// Makespan is the simulated time from the first arrival to the last
	// completion.
	Makespan time.Duration
	// Wall is the real time the simulation took.
	Wall time.Duration
}

type simWorker struct {
	i       int
	e       *engine.Engine
	busy    bool
	doneAt  time.Duration
	res     engine.StepResult
	prefill int
}

// busyHeap orders busy workers by step completion, then index.
type busyHeap []*simWorker

func (h busyHeap) Len() int { return len(h) }
func (h busyHeap) Less(i, j int) bool {
	if h[i].doneAt != h[j].doneAt {
		return h[i].doneAt < h[j].doneAt
	}
	return h[i].i < h[j].i
}
func (h busyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *busyHeap) Push(x any)   { *h = append(*h, x.(*simWorker)) }
func (h *busyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type inflight struct {
	arrival time.Duration
	first   bool
}

// Run replays trace in one mode.
func Run(trace []Request, cfg Config, mode string) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	pol, err := newPolicy(mode, cfg, rng)
	if err != nil {
		return Result{}, err
	}
	workers := make([]*simWorker, cfg.Workers)
	for i := range workers {
		e, err := engine.New(cfg.Engine)
		if err != nil {
			return Result{}, err
		}
		workers[i] = &simWorker{i: i, e: e}
	}
	var (
		busy      busyHeap
		now       time.Duration
		reqs      = map[string]*inflight{}
		ttft, e2e []time.Duration
		res       = Result{Mode: mode, RateScale: cfg.RateScale}
		tokens    []uint32
		blocks    []kvhash.Block
		first     = time.Duration(-1)
		last      time.Duration
	)
	startStep := func(w *simWorker) {
		w.res = w.e.Step()
		w.busy = true
		w.doneAt = now + w.res.Duration
		heap.Push(&busy, w)
	}
	next := 0
	for next < len(trace) || busy.Len() > 0 {
		arrival := time.Duration(math.MaxInt64)
		if next < len(trace) {
			arrival = time.Duration(float64(trace[next].Arrival) / cfg.RateScale)
		}
		if busy.Len() == 0 || arrival <= busy[0].doneAt {
			now = arrival
			if first < 0 {
				first = now
			}
			r := trace[next]
			id := strconv.Itoa(next)
			next++
			tokens = Tokens(r, cfg.TraceBlockSize, tokens)
			blocks = kvhash.Hashes(tokens, cfg.Engine.BlockSize, blocks[:0])
			wi := pol.route(id, blocks, now)
			w := workers[wi]
			if err := w.e.Add(engine.Request{ID: id, Prompt: tokens, MaxTokens: r.OutputLength, Seed: uint64(next)}); err != nil {
				res.Rejected++
				res.LastReject = err.Error()
				pol.free(id)
				continue
			}
			w.prefill += len(tokens)
			reqs[id] = &inflight{arrival: now}
			if !w.busy {
				startStep(w)
			}
			continue
		}
		w := heap.Pop(&busy).(*simWorker)
		now = w.doneAt
		w.busy = false
		for _, o := range w.res.Outputs {
			in := reqs[o.RequestID]
			if in == nil {
				continue
			}
			if !in.first && len(o.Tokens) > 0 {
				in.first = true
				ttft = append(ttft, now-in.arrival)
				pol.prefillDone(o.RequestID)
			}
			if o.Finish != engine.FinishNone {
				e2e = append(e2e, now-in.arrival)
				pol.free(o.RequestID)
				delete(reqs, o.RequestID)
				res.Completed++
				last = now
			}
		}
		pol.events(w.i, w.res.Events)
		if !w.e.Idle() {
			startStep(w)
		}
	}
	var hit, queried, generated uint64
	prefill := make([]float64, len(workers))
	for i, w := range workers {
		st := w.e.Stats()
		hit += st.PrefixHitBlocks
		queried += st.PrefixQueriedBlocks
		generated += st.GeneratedTokens
		prefill[i] = float64(w.prefill)
	}
	if queried > 0 {
		res.HitRate = float64(hit) / float64(queried)
	}
	res.TTFTMean = mean(ttft)
	res.TTFT = percentiles(ttft)
	res.E2E = percentiles(e2e)
	if first >= 0 && last > first {
		res.Makespan = last - first
		res.Throughput = float64(generated) / res.Makespan.Seconds()
	}
	res.Spread = spread(prefill)
	res.Wall = time.Since(start)
	return res, nil
}

func percentiles(d []time.Duration) [3]time.Duration {
	if len(d) == 0 {
		return [3]time.Duration{}
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	return [3]time.Duration{at(0.50), at(0.90), at(0.99)}
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func spread(v []float64) float64 {
	sum, hi := 0.0, 0.0
	for _, x := range v {
		sum += x
		hi = max(hi, x)
	}
	if sum == 0 {
		return 0
	}
	return hi / (sum / float64(len(v)))
}

// RunAll replays every mode at every rate scale (cfg.RateScale is
// ignored), at most parallel simulations at once. Results are ordered by
// mode, then rate scale, as given.
func RunAll(trace []Request, cfg Config, modes []string, rates []float64, parallel int) ([]Result, error) {
	n := len(modes) * len(rates)
	results := make([]Result, n)
	errs := make([]error, n)
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan struct{})
	for i := range n {
		go func() {
			sem <- struct{}{}
			c := cfg
			c.RateScale = rates[i%len(rates)]
			results[i], errs[i] = Run(trace, c, modes[i/len(rates)])
			<-sem
			done <- struct{}{}
		}()
	}
	for range n {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("mode %s at rate x%g: %w", modes[i/len(rates)], rates[i%len(rates)], err)
		}
	}
	return results, nil
}
