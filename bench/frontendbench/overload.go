package frontendbench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// OverloadConfig shapes an overload stack: mockers slowed so that a few
// requests per second saturate them on a small machine, one router, and
// one or more frontends.
type OverloadConfig struct {
	// Workers is how many mockers serve the model.
	Workers int
	// Speedup is the mockers' --speedup-ratio (below 1: slower than the
	// H100 their timing model describes).
	Speedup float64
	// Frontends is how many frontend replicas run.
	Frontends int
	// Admission turns admission control on in the frontends.
	Admission bool
	// TTFTThreshold is the router's --queue-ttft-threshold.
	TTFTThreshold time.Duration
	// QueueTimeout is the frontends' --queue-timeout (0: its default).
	QueueTimeout time.Duration
	// Seed varies the flows' arrivals and prompts: 0 sends every flow
	// evenly spaced, each request's prompt drawn from its number alone;
	// another value sends each flow as a Poisson process at its rate
	// (exponential gaps drawn from a random source keyed by this value and
	// the flow) and keys the prompts' random source by this value too, so
	// that a run sees an arrival pattern and prompts that no other value's
	// runs did. Runs meant as separate
	// samples take separate seeds (RunSeed).
	Seed uint64
	// Record keeps, for each request, when the frontend let it go to the
	// router, the worker chosen and when the first token came
	// (FlowResult.Requests): the frontends' tracing goes to an in-process
	// span log, and recorded requests are routed with unary Route calls
	// instead of the route stream.
	Record bool
}

// OverloadEnv is a running overload stack.
type OverloadEnv struct {
	// URLs are the frontends' base URLs.
	URLs   []string
	HTTP   *http.Client
	stops  []func()
	cp     *controlplane.ControlPlane
	router *router.Service
	peak   atomic.Uint64
	done   chan struct{}
	seed   uint64
	record bool
	// stack numbers the stacks of this process (the recorded requests'
	// trace ids).
	stack uint64
}

// stacks counts the overload stacks started in this process.
var stacks atomic.Uint64

// StartOverload runs an overload stack; Close stops it.
func StartOverload(cfg OverloadConfig) (_ *OverloadEnv, err error) {
	env := &OverloadEnv{done: make(chan struct{}), seed: cfg.Seed, record: cfg.Record, stack: stacks.Add(1)}
	if cfg.Record {
		installSpanLog()
	}
	defer func() {
		if err != nil {
			env.Close()
		}
	}()
	log := slog.New(slog.DiscardHandler)
	cp, err := controlplane.Start("overload-bench-", log)
	if err != nil {
		return nil, err
	}
	env.cp = cp
	env.stops = append(env.stops, cp.Close)
	ctx := cp.Context()
	cc := core.DefaultConfig()
	cc.QueueTTFTThreshold = cfg.TTFTThreshold
	rt, err := router.Start(ctx, router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", Core: cc,
		RegistryAddr: cp.RegistryAddr(), EventbusAddr: cp.EventbusAddr(), KVEventsMode: "jetstream"}, log)
	if err != nil {
		return nil, err
	}
	cp.OnClose(rt.Wait)
	env.router = rt
	select {
	case <-rt.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	tc := transport.DefaultConfig()
	tc.Plane, tc.TCP.Host = transport.PlaneTCP, "127.0.0.1"
	for range cfg.Workers {
		var mcfg mocker.Config
		fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
		mcfg.RegisterFlags(fs)
		if err := fs.Parse([]string{"--namespace", "bench", "--registry-addr", cp.RegistryAddr(), "--eventbus-addr", cp.EventbusAddr(),
			"--speedup-ratio", strconv.FormatFloat(cfg.Speedup, 'f', -1, 64)}); err != nil {
			return nil, err
		}
		mcfg.Transport = tc
		ready := make(chan *worker.Worker, 1)
		mdone := make(chan error, 1)
		go func() { mdone <- mocker.Run(ctx, mcfg, log, func(w *worker.Worker) { ready <- w }) }()
		cp.OnClose(func() error { return <-mdone })
		select {
		case <-ready:
		case err := <-mdone:
			mdone <- err
			return nil, fmt.Errorf("mocker: %w", err)
		}
	}
	for range cfg.Frontends {
		var fcfg frontend.Config
		fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
		fcfg.RegisterFlags(fs)
		fcfg.HTTPAddr, fcfg.Namespace, fcfg.Transport = "127.0.0.1:0", "bench", tc
		fcfg.RegistryAddr, fcfg.EventbusAddr, fcfg.RouterAddr = cp.RegistryAddr(), cp.EventbusAddr(), rt.Addr().String()
		fcfg.Admission.Off = !cfg.Admission
		if cfg.QueueTimeout > 0 {
			fcfg.Admission.QueueTimeout = cfg.QueueTimeout
		}
		fcfg.MaxConnsPerClient = 0
		fe, err := frontend.Start(ctx, fcfg, log)
		if err != nil {
			return nil, err
		}
		cp.OnClose(fe.Wait)
		env.URLs = append(env.URLs, "http://"+fe.Addr().String())
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4096}
	env.HTTP = &http.Client{Transport: tr}
	env.stops = append(env.stops, tr.CloseIdleConnections)
	go env.sampleMemory()
	env.stops = append(env.stops, func() { close(env.done) })
	for _, u := range env.URLs {
		if err := waitModel(ctx, env.HTTP, u, cfg.Workers); err != nil {
			return nil, err
		}
	}
	// One request through each frontend first: a frontend loads the
	// model's tokenizer at its first request, and the flows' first
	// requests would otherwise all wait for it and reach the queue
	// together, as one burst no steady flow has. It is sent as the
	// flooding tenant's (FloodTenant), so that it adds no tenant to the
	// scenario: admission control keeps room back from a flood for any
	// tenant that sent a request lately with less in flight, and a
	// warm-up tenant of its own would be one for the whole run.
	for i, u := range env.URLs {
		if _, kind := env.one(ctx, u, Flow{Name: "warm-up", Tenant: FloodTenant}, 1<<50+uint64(i)); kind != "ok" {
			return nil, fmt.Errorf("warm-up request through frontend %d: %s", i, kind)
		}
	}
	// The router learns each worker's timing model from its load reports
	// (every second): before the first, it predicts with the default
	// model, an H100's, 1/Speedup times faster than these mockers.
	select {
	case <-time.After(loadReportWait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return env, nil
}

// loadReportWait is how long a new stack waits for its workers' first
// load reports: a worker publishes one every second.
const loadReportWait = 1500 * time.Millisecond

// sampleMemory keeps the process's peak heap in use (the whole stack runs
// in this process).
func (e *OverloadEnv) sampleMemory() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-t.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > e.peak.Load() {
				e.peak.Store(ms.HeapInuse)
			}
		}
	}
}

// Lateness is how much later than the router predicted the model's first
// tokens come, in ms, as its saturation counts it, and over how many
// (core.Core.Lateness).
func (e *OverloadEnv) Lateness() (ms float64, n int) {
	return e.router.Core().Lateness(OverloadModel)
}

// ResetPeak starts a new peak measurement; PeakHeap reads it.
func (e *OverloadEnv) ResetPeak() { e.peak.Store(0) }

// PeakHeap is the process's peak heap in use since ResetPeak, in bytes.
func (e *OverloadEnv) PeakHeap() uint64 { return e.peak.Load() }

// Close stops the stack.
func (e *OverloadEnv) Close() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
}

// waitModel waits until a frontend sees n instances.
func waitModel(ctx context.Context, c *http.Client, url string, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	want := fmt.Sprintf(`"instances":%d`, n)
	for ctx.Err() == nil {
		resp, err := c.Get(url + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the frontend never saw every mocker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// Flow is one stream of requests: a tenant in a band at a rate, through
// frontends in turn.
type Flow struct {
	Name     string
	Tenant   string
	Priority int
	// Rate is requests per second, sent open-loop (evenly spaced).
	Rate float64
	// Frontends are the indexes of the frontends it sends to, in turn.
	Frontends []int
}

// FlowResult is what a flow got.
type FlowResult struct {
	Name string
	// TTFT of the completed requests.
	TTFT                         []time.Duration
	Completed, Shed, RateLimited int
	// ShedTimeout counts the shed requests that waited past the queue
	// timeout (the others found the queue full); RetryAfter are the shed
	// requests' Retry-After, in seconds.
	ShedTimeout int
	RetryAfter  []int
	// Errors are any other answer: another status, a broken stream, no
	// answer before the run's end.
	Errors int
	// Served is the completed requests per second, from the flows' start
	// to the flow's last completion: what the fleet gave the flow,
	// which for a flood is at most the fleet's capacity.
	Served float64
	// Drained is the completed requests per second after the flows
	// stopped sending, from then to the flow's last completion (0: none
	// completed after): what a flood's queue drained at once no other
	// flow was sending.
	Drained float64
	drained int
	// Requests are the flow's requests, in the order they were sent.
	Requests []Request
}

// PromptWords is the length of every request's prompt in words (about a
// token each, beside the chat template's), each request's its own.
const PromptWords = 300

// OverloadTokens is max_tokens of every request.
const OverloadTokens = 8

// FloodTenant is the tenant of the flooding flows (x-switchyard-fairness-id)
// and of the warm-up requests.
const FloodTenant = "A"

// OverloadModel is the model every request names: the mocker's.
const OverloadModel = "Qwen/Qwen3-0.6B"

// RunFlows sends the flows for d, then waits up to grace for the answers:
// each flow evenly spaced at its rate, or, with a seed (OverloadConfig),
// as a Poisson process at its rate.
func (e *OverloadEnv) RunFlows(ctx context.Context, flows []Flow, d, grace time.Duration) []FlowResult {
	results := make([]FlowResult, len(flows))
	var mu sync.Mutex
	var wg sync.WaitGroup
	rctx, cancel := context.WithTimeout(ctx, d+grace)
	defer cancel()
	start := time.Now()
	var seq atomic.Uint64
	for i, f := range flows {
		results[i].Name = f.Name
		if f.Rate <= 0 {
			continue
		}
		wg.Go(func() {
			for n, off := range Arrivals(e.seed, i, f.Rate, d) {
				time.Sleep(time.Until(start.Add(off)))
				fe := f.Frontends[n%len(f.Frontends)]
				url := e.URLs[fe]
				id := seq.Add(1)
				sent := time.Since(start)
				mu.Lock()
				results[i].Requests = append(results[i].Requests, Request{ID: id, Frontend: fe, Sent: sent, Status: "error"})
				k := len(results[i].Requests) - 1
				mu.Unlock()
				wg.Go(func() {
					ttft, kind, retry := e.answer(rctx, url, f, id)
					mu.Lock()
					defer mu.Unlock()
					r := &results[i]
					q := &r.Requests[k]
					q.Status, q.TTFT, q.RetryAfter = kind, ttft, retry
					switch kind {
					case "ok":
						r.Completed++
						r.TTFT = append(r.TTFT, ttft)
						r.Served = float64(r.Completed) / time.Since(start).Seconds()
						if since := time.Since(start) - d; since > 0 {
							r.drained++
							r.Drained = float64(r.drained) / since.Seconds()
						}
					case "shed", "shed-timeout":
						r.Shed++
						r.RetryAfter = append(r.RetryAfter, retry)
						if kind == "shed-timeout" {
							r.ShedTimeout++
						}
					case "429":
						r.RateLimited++
					default:
						r.Errors++
					}
				})
			}
		})
	}
	wg.Wait()
	e.fillTraced(results, start)
	return results
}

// Arrivals are the times, from the flows' start, at which flow number
// flow of a run with seed sends its requests for d at rate per second:
// evenly spaced from 0 for seed 0, else a Poisson process (exponential
// gaps drawn from a random source keyed by seed and flow). A Poisson
// process's first arrival, too, comes an exponential gap after the start:
// independent flows do not send together at 0 (a flood's first requests
// and another tenant's, before the flood has a backlog the queue holds).
func Arrivals(seed uint64, flow int, rate float64, d time.Duration) []time.Duration {
	if rate <= 0 {
		return nil
	}
	interval := float64(time.Second) / rate
	gaps := rand.New(rand.NewPCG(seed, uint64(flow)))
	var out []time.Duration
	var next float64
	for n := 0; ; n++ {
		at := time.Duration(float64(n) * interval)
		if seed != 0 {
			next += gaps.ExpFloat64() * interval
			at = time.Duration(next)
		}
		if at >= d {
			return out
		}
		out = append(out, at)
	}
}

// RunSeed is the random-number key that run number run (from 0) of a
// bench given --overload-seed seed draws its arrivals and prompts from: seed + run, so that each run is a
// sample of its own rather than the same pattern again (0 stays 0: every
// run evenly spaced, as the runs of seed 0 are meant to be alike).
func RunSeed(seed uint64, run int) uint64 {
	if seed == 0 {
		return 0
	}
	return seed + uint64(run)
}

// OverloadPrompt is the prompt of request id of flow name in a run with seed:
// "request <id> of <name>:" and PromptWords words drawn from id and seed.
func OverloadPrompt(seed, id uint64, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "request %d of %s:", id, name)
	r := rand.New(rand.NewPCG(id, 7+seed))
	for range PromptWords {
		b.WriteString(" w")
		b.WriteString(strconv.Itoa(r.IntN(5000)))
	}
	return b.String()
}

// one sends one streamed request and says how it ended.
func (e *OverloadEnv) one(ctx context.Context, url string, f Flow, id uint64) (time.Duration, string) {
	ttft, kind, _ := e.answer(ctx, url, f, id)
	if kind == "shed-timeout" {
		kind = "shed"
	}
	return ttft, kind
}

// answer sends one streamed request and says how it ended: its TTFT, or
// for a shed request ("shed", "shed-timeout": past the queue timeout) its
// Retry-After in seconds.
func (e *OverloadEnv) answer(ctx context.Context, url string, f Flow, id uint64) (time.Duration, string, int) {
	// Thinking off: the answer's first token is text the client sees. With
	// thinking on, the first token is <think>, which the reasoning parser
	// consumes, and the first text comes with the second, one engine step
	// later; under load that step holds the next request's prefill, and
	// the measure would be of that request's prompt as much as of this
	// one's wait.
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":%q}]}`,
		OverloadModel, OverloadTokens, OverloadPrompt(e.seed, id, f.Name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "error", 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Switchyard-Priority", strconv.Itoa(f.Priority))
	req.Header.Set("X-Switchyard-Fairness-Id", f.Tenant)
	if e.record {
		req.Header.Set("Traceparent", traceparent(traceOf(e.stack, id), id))
	}
	start := time.Now()
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return 0, "error", 0
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusServiceUnavailable:
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil {
			return 0, "error", 0
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if strings.Contains(string(b), "time limit") {
			return 0, "shed-timeout", retry
		}
		return 0, "shed", retry
	case http.StatusTooManyRequests:
		return 0, "429", 0
	default:
		return 0, "error", 0
	}
	var ttft time.Duration
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if line == "data: [DONE]" {
			done = true
			break
		}
		if ttft == 0 && strings.Contains(line, `"content"`) {
			ttft = time.Since(start)
		}
		if strings.Contains(line, `"error"`) {
			return 0, "error", 0
		}
	}
	if !done || ttft == 0 {
		return 0, "error", 0
	}
	return ttft, "ok", 0
}

// Capacity measures the fleet's completed requests per second with conc
// requests kept in flight for d, through the first frontend.
func (e *OverloadEnv) Capacity(ctx context.Context, conc int, d time.Duration) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	var seq atomic.Uint64
	seq.Store(1 << 40)
	for range conc {
		wg.Go(func() {
			for time.Now().Before(end) {
				if _, kind := e.one(ctx, e.URLs[0], Flow{Name: "capacity"}, seq.Add(1)); kind == "ok" {
					n.Add(1)
				}
			}
		})
	}
	start := time.Now()
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// P is the p-th percentile of ds (0 when empty).
func P(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Percentile(s, p)
}
