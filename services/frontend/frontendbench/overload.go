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
}

// OverloadEnv is a running overload stack.
type OverloadEnv struct {
	// URLs are the frontends' base URLs.
	URLs  []string
	HTTP  *http.Client
	stops []func()
	cp    *controlplane.ControlPlane
	peak  atomic.Uint64
	done  chan struct{}
}

// StartOverload runs an overload stack; Close stops it.
func StartOverload(cfg OverloadConfig) (_ *OverloadEnv, err error) {
	env := &OverloadEnv{done: make(chan struct{})}
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
	return env, nil
}

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
	// Errors are any other answer: another status, a broken stream, no
	// answer before the run's end.
	Errors int
}

// PromptWords is the length of every request's prompt in words (about a
// token each, beside the chat template's), each request's its own.
const PromptWords = 300

// OverloadTokens is max_tokens of every request.
const OverloadTokens = 8

// RunFlows sends the flows for d, then waits up to grace for the answers.
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
			interval := time.Duration(float64(time.Second) / f.Rate)
			for n := 0; ; n++ {
				at := start.Add(time.Duration(n) * interval)
				if at.Sub(start) >= d {
					return
				}
				time.Sleep(time.Until(at))
				url := e.URLs[f.Frontends[n%len(f.Frontends)]]
				id := seq.Add(1)
				wg.Go(func() {
					ttft, kind := e.one(rctx, url, f, id)
					mu.Lock()
					defer mu.Unlock()
					r := &results[i]
					switch kind {
					case "ok":
						r.Completed++
						r.TTFT = append(r.TTFT, ttft)
					case "shed":
						r.Shed++
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
	return results
}

// one sends one streamed request and says how it ended.
func (e *OverloadEnv) one(ctx context.Context, url string, f Flow, id uint64) (time.Duration, string) {
	var b strings.Builder
	fmt.Fprintf(&b, "request %d of %s:", id, f.Name)
	r := rand.New(rand.NewPCG(id, 7))
	for range PromptWords {
		b.WriteString(" w")
		b.WriteString(strconv.Itoa(r.IntN(5000)))
	}
	body := fmt.Sprintf(`{"model":"Qwen/Qwen3-0.6B","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, OverloadTokens, b.String())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "error"
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Switchyard-Priority", strconv.Itoa(f.Priority))
	req.Header.Set("X-Switchyard-Fairness-Id", f.Tenant)
	start := time.Now()
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return 0, "error"
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusServiceUnavailable:
		if resp.Header.Get("Retry-After") != "" {
			return 0, "shed"
		}
		return 0, "error"
	case http.StatusTooManyRequests:
		return 0, "429"
	default:
		return 0, "error"
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
			return 0, "error"
		}
	}
	if !done || ttft == 0 {
		return 0, "error"
	}
	return ttft, "ok"
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
