// Package frontendbench measures the frontend's overhead: it runs a whole
// Switchyard in process (embedded etcd, registry, embedded NATS, eventbus,
// router service, one mocker with no delays, frontend) on one request plane,
// and times the same generations sent straight to the mocker over the
// request plane and through the frontend's OpenAI API. The Benchmark
// functions and cmd/frontend-bench share it.
package frontendbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// Prompt is the user message of every measured request. Both paths turn
// Qwen3's thinking off (enable_thinking false), so that the first token
// generated is the first one a client sees on both: with thinking on, the
// reasoning parser consumes the opening <think> tokens, and the frontend's
// first chunk would be a later token than the direct path's first.
const Prompt = "Summarise the history of the steam locomotive in three paragraphs."

// Env is a running stack on one request plane.
type Env struct {
	// Plane is the request plane in use.
	Plane transport.Plane
	// URL is the frontend's base URL.
	URL string
	// URLNoAdmission is a second frontend's, on the same router and
	// mocker, with admission control off (--admission=false): below
	// saturation the two differ only by what admission control costs.
	URLNoAdmission string
	// Worker is the mocker.
	Worker *worker.Worker
	// HTTP is the client of the frontend.
	HTTP *http.Client
	// RPC is a request plane client for calling the mocker directly.
	RPC transport.Client
	// PromptIDs is Prompt rendered with the chat template (thinking off,
	// as both paths ask) and tokenized, as the frontend sends it to the
	// worker.
	PromptIDs []uint32

	routerAddr string
	stops      []func()
}

// Start runs the stack; Close stops it.
func Start(plane transport.Plane) (_ *Env, err error) {
	env := &Env{Plane: plane}
	defer func() {
		if err != nil {
			env.Close()
		}
	}()
	log := slog.New(slog.DiscardHandler)
	cp, err := controlplane.Start("frontend-bench-", log)
	if err != nil {
		return nil, err
	}
	env.stops = append(env.stops, cp.Close)
	ctx := cp.Context()
	rt, err := router.Start(ctx, router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", Core: core.DefaultConfig(),
		RegistryAddr: cp.RegistryAddr(), EventbusAddr: cp.EventbusAddr()}, log)
	if err != nil {
		return nil, err
	}
	cp.OnClose(rt.Wait)
	env.routerAddr = rt.Addr().String()
	select { // it routes once the registry has answered
	case <-rt.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	tc := transport.DefaultConfig()
	tc.Plane, tc.TCP.Host, tc.HTTP.Host, tc.HTTP.Port, tc.NATS.URL = plane, "127.0.0.1", "127.0.0.1", 0, cp.Eventbus.NATSURL()

	var mcfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	mcfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--no-delay", "--namespace", "bench", "--registry-addr", cp.RegistryAddr(),
		"--eventbus-addr", cp.EventbusAddr()}); err != nil {
		return nil, err
	}
	mcfg.Transport = tc // mocker.Run completes and validates the rest
	ready := make(chan *worker.Worker, 1)
	mdone := make(chan error, 1)
	go func() { mdone <- mocker.Run(ctx, mcfg, log, func(w *worker.Worker) { ready <- w }) }()
	cp.OnClose(func() error { return <-mdone })
	select {
	case env.Worker = <-ready:
	case err := <-mdone:
		mdone <- err
		return nil, fmt.Errorf("mocker: %w", err)
	}

	var fcfg frontend.Config
	fs = flag.NewFlagSet("frontend", flag.ContinueOnError)
	fcfg.RegisterFlags(fs)
	fcfg.HTTPAddr, fcfg.Namespace, fcfg.Transport = "127.0.0.1:0", "bench", tc
	fcfg.RegistryAddr, fcfg.EventbusAddr, fcfg.RouterAddr = cp.RegistryAddr(), cp.EventbusAddr(), rt.Addr().String()
	for _, off := range []bool{false, true} {
		fcfg.Admission.Off = off
		fe, err := frontend.Start(ctx, fcfg, log)
		if err != nil {
			return nil, err
		}
		cp.OnClose(fe.Wait)
		if off {
			env.URLNoAdmission = "http://" + fe.Addr().String()
		} else {
			env.URL = "http://" + fe.Addr().String()
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}
	env.HTTP = &http.Client{Transport: tr}
	env.stops = append(env.stops, tr.CloseIdleConnections)
	if env.RPC, err = transport.NewClient(tc); err != nil {
		return nil, err
	}
	env.stops = append(env.stops, func() { _ = env.RPC.Close() })
	if env.PromptIDs, err = promptIDs(); err != nil {
		return nil, err
	}
	return env, env.waitHealthy(ctx)
}

// waitHealthy waits until the frontend sees the mocker and has loaded the
// model's tokenizer (one request through), and the router holds the
// prompt's blocks from the mocker's KV events: a kv router without its
// events predicts every request's blocks until their TTL, a stack no user
// runs, and the figures would time that.
func (e *Env) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := e.HTTP.Get(e.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the frontend never saw the mocker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, run := range []func(context.Context, int) (Timing, error){e.Frontend, e.FrontendNoAdmission} {
		if _, err := run(ctx, 1); err != nil {
			return err
		}
	}
	return e.waitIndexed(ctx, deadline)
}

// waitIndexed waits until the router's index has the prompt's blocks on
// the mocker.
func (e *Env) waitIndexed(ctx context.Context, deadline time.Time) error {
	cc, err := grpc.NewClient(e.routerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	rc := routerv1.NewRouterServiceClient(cc)
	req := &routerv1.QueryOverlapsRequest{Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: qwen3.ModelName}}, TokenIds: e.PromptIDs}
	for {
		resp, err := rc.QueryOverlaps(ctx, req)
		if err == nil && resp.RequestBlocks > 0 && slices.ContainsFunc(resp.Candidates, func(c *routerv1.Candidate) bool { return c.OverlapBlocks == resp.RequestBlocks }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router never indexed the prompt's blocks from the mocker's KV events (last answer %v, %v)", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the stack.
func (e *Env) Close() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
}

func promptIDs() ([]uint32, error) {
	raw, err := qwen3.ReadFile("tokenizer.json.gz")
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	rawCfg, err := qwen3.ReadFile("tokenizer_config.json")
	if err != nil {
		return nil, err
	}
	cfg, err := tokenizer.ParseConfig(rawCfg)
	if err != nil {
		return nil, err
	}
	tmpl, err := chattemplate.Parse(cfg.ChatTemplate)
	if err != nil {
		return nil, err
	}
	text, err := tmpl.Render(chattemplate.Input{Messages: []chattemplate.Message{{Role: "user", Content: Prompt}}, AddGenerationPrompt: true,
		Extra: map[string]any{"enable_thinking": false}})
	if err != nil {
		return nil, err
	}
	return tok.Encode(text), nil
}

// Timing is one request's latencies: to the first token, and between the
// following ones.
type Timing struct {
	TTFT time.Duration
	ITL  []time.Duration
}

var reqSeq atomic.Uint64

// Direct generates maxTokens tokens straight from the mocker.
func (e *Env) Direct(ctx context.Context, maxTokens int) (Timing, error) {
	id := fmt.Sprintf("direct-%d", reqSeq.Add(1))
	payload, err := proto.Marshal(&workerv1.GenerateRequest{RequestId: id, TokenIds: e.PromptIDs, MaxTokens: uint32(maxTokens),
		Stop: &workerv1.StopConditions{IgnoreEos: true}})
	if err != nil {
		return Timing{}, err
	}
	start := time.Now()
	// The worker serves e.Plane alone: its address there.
	addr, _ := transport.Pick(e.Worker.Instance().GetTransport(), e.Plane)
	st, err := e.RPC.Call(ctx, addr, wire.GenerateEndpoint, transport.Headers{transport.HeaderRequestID: id}, payload)
	if err != nil {
		return Timing{}, err
	}
	var t Timing
	last := start
	var resp workerv1.GenerateResponse
	for {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return t, err
		}
		if err := proto.Unmarshal(b, &resp); err != nil {
			st.Close()
			return t, err
		}
		if len(resp.TokenIds) > 0 {
			t.observe(start, &last)
		}
	}
}

func (t *Timing) observe(start time.Time, last *time.Time) {
	now := time.Now()
	if t.TTFT == 0 {
		t.TTFT = now.Sub(start)
	} else {
		t.ITL = append(t.ITL, now.Sub(*last))
	}
	*last = now
}

// Frontend generates maxTokens tokens through a streamed chat completion.
func (e *Env) Frontend(ctx context.Context, maxTokens int) (Timing, error) {
	return e.frontend(ctx, e.URL, maxTokens)
}

// FrontendNoAdmission is Frontend through the frontend with admission
// control off.
func (e *Env) FrontendNoAdmission(ctx context.Context, maxTokens int) (Timing, error) {
	return e.frontend(ctx, e.URLNoAdmission, maxTokens)
}

// frontend is Frontend through the frontend at url.
func (e *Env) frontend(ctx context.Context, url string, maxTokens int) (Timing, error) {
	body, _ := json.Marshal(map[string]any{"model": qwen3.ModelName, "stream": true, "max_tokens": maxTokens, "ignore_eos": true,
		"messages": []map[string]string{{"role": "user", "content": Prompt}}, "chat_template_kwargs": map[string]any{"enable_thinking": false}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Timing{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return Timing{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return Timing{}, fmt.Errorf("frontend: %s: %s", resp.Status, b)
	}
	var t Timing
	last := start
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			// Read to the body's end, as SDKs do: a body closed early
			// closes its connection, and the next request would pay a
			// dial that the direct path (one kept connection) does not.
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return t, err
			}
			return t, nil
		}
		if generated(data) {
			t.observe(start, &last)
		}
		if bytes.Contains(data, []byte(`"error"`)) {
			return t, fmt.Errorf("frontend stream error: %s", data)
		}
	}
	if err := sc.Err(); err != nil {
		return t, err
	}
	return t, errors.New("frontend: stream ended without [DONE]")
}

// generated reports whether a chunk carries generated text: content, or
// reasoning_content (the mocker's model card names the qwen3 reasoning
// parser). The direct path counts every generated token, so the frontend
// path counts chunks of either kind.
func generated(data []byte) bool {
	for _, field := range []string{`"content":"`, `"reasoning_content":"`} {
		if i := bytes.Index(data, []byte(field)); i >= 0 && !bytes.HasPrefix(data[i+len(field):], []byte(`"`)) {
			return true
		}
	}
	return false
}

// Latency runs n sequential requests of maxTokens tokens with run and
// returns the TTFT and inter-token latencies. A tenth of n (at most 20)
// untimed requests go first, on both paths alike: the direct path's first
// request would otherwise time its connection's dial.
func Latency(ctx context.Context, n, maxTokens int, run func(context.Context, int) (Timing, error)) (ttft, itl []time.Duration, err error) {
	for range min(n/10, 20) {
		if _, err := run(ctx, maxTokens); err != nil {
			return nil, nil, err
		}
	}
	for range n {
		t, err := run(ctx, maxTokens)
		if err != nil {
			return nil, nil, err
		}
		ttft = append(ttft, t.TTFT)
		itl = append(itl, t.ITL...)
	}
	return ttft, itl, nil
}

// LatencyPair is Latency of a and b, their requests alternating (after a
// few warm-up requests of each), so that both meet the same machine: on a
// shared machine a run of one and then a run of the other can differ by
// more than what sets them apart.
func LatencyPair(ctx context.Context, n, maxTokens int, a, b func(context.Context, int) (Timing, error)) (ttftA, ttftB []time.Duration, err error) {
	for range min(n/10, 20) {
		for _, run := range []func(context.Context, int) (Timing, error){a, b} {
			if _, err := run(ctx, maxTokens); err != nil {
				return nil, nil, err
			}
		}
	}
	for i := range 2 * n {
		run, out := a, &ttftA
		if i%2 == 1 {
			run, out = b, &ttftB
		}
		t, err := run(ctx, maxTokens)
		if err != nil {
			return nil, nil, err
		}
		*out = append(*out, t.TTFT)
	}
	return ttftA, ttftB, nil
}

// Throughput runs requests of maxTokens tokens from conc concurrent clients
// for d and returns the completed requests per second.
func Throughput(ctx context.Context, conc, maxTokens int, d time.Duration, run func(context.Context, int) (Timing, error)) (float64, error) {
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := run(ctx, maxTokens); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// CPUPerRequest runs Throughput and returns, besides the requests per
// second, the process CPU time (user and system) spent per completed
// request. The whole stack runs in this process, so the figure of the
// frontend path minus that of the direct path is what the frontend (and the
// router it asks) adds to each request.
func CPUPerRequest(ctx context.Context, conc, maxTokens int, d time.Duration, run func(context.Context, int) (Timing, error)) (float64, time.Duration, error) {
	before := processCPU()
	start := time.Now()
	rps, err := Throughput(ctx, conc, maxTokens, d, run)
	n := rps * time.Since(start).Seconds()
	if err != nil || n < 1 {
		return rps, 0, err
	}
	return rps, time.Duration(float64(processCPU()-before) / n), nil
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Percentile returns the p-th percentile (0..100) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}
