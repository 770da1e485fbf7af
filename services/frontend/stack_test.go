package frontend_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-llm/switchyard/pkg/testlog"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

const (
	testNamespace = "fe"
	testModel     = "Qwen/Qwen3-0.6B"
)

// stackOpts choose what a test stack runs.
type stackOpts struct {
	plane          transport.Plane
	mode           string // frontend --router-mode; "" is kv
	noKVEvents     bool
	migrationLimit int
	maxInflight    int
	apiKey         string
	contextLength  int
	// leaseTTL of the mockers; 0 is the mocker's default (10 s).
	leaseTTL time.Duration
	// bridgeKV makes the router service follow the workers' KV events on
	// the eventbus.
	bridgeKV bool
	// configure, when set, adjusts the frontend's config before it starts.
	configure func(*frontend.Config)
	// configureRouter, when set, adjusts the router service's config.
	configureRouter func(*router.Config)
	// log, when set, is the frontend's logger.
	log *slog.Logger
}

// stack is a whole Switchyard in process: etcd, registry, NATS, eventbus,
// router service, frontend, and mockers added with addMocker.
type stack struct {
	t       testing.TB
	opts    stackOpts
	etcd    *registrytest.Etcd
	regAddr string
	nats    *natsserver.Server
	// natsStore is the nats-server's store dir, to restart it on.
	natsStore string
	bus       *eventbus.Service
	router    *router.Service
	fe        *frontend.Service
	url       string
	// stopRouter stops the router service; it is idempotent.
	stopRouter func()
	// log is the mockers' logger (Info) and feLog the frontend's unless
	// opts.log is set (Warn: it logs every request at Info); both are shown
	// when the test fails.
	log, feLog *slog.Logger
	http       *http.Client
	client     openai.Client
}

func planeConfig(p transport.Plane, natsURL string) transport.Config {
	c := transport.DefaultConfig()
	c.Plane = p
	c.TCP.Host = "127.0.0.1"
	c.HTTP.Host = "127.0.0.1"
	c.HTTP.Port = 0
	c.NATS.URL = natsURL
	return c
}

func startStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	if o.plane == "" {
		o.plane = transport.PlaneTCP
	}
	if o.mode == "" {
		o.mode = "kv"
	}
	if o.contextLength == 0 {
		o.contextLength = 4096
	}
	logs := testlog.New(t)
	etcd, reg := registrytest.StartLogged(t, logs.Logger(slog.LevelInfo))
	natsStore := t.TempDir()
	ns := eventbustest.StartNATSAt(t, -1, natsStore)
	bus := eventbustest.StartEventbus(t, eventbustest.Config(ns.ClientURL()))
	s := &stack{t: t, opts: o, etcd: etcd, regAddr: reg.Addr, nats: ns, natsStore: natsStore, bus: bus}
	s.log, s.feLog = logs.Logger(slog.LevelInfo), logs.Logger(slog.LevelWarn)

	// The router follows the workers' KV events on the eventbus itself when
	// the test asks for KV routing.
	rcfg := routertest.Config(reg.Addr, "")
	if o.bridgeKV {
		rcfg.EventbusAddr = bus.Addr().String()
	}
	if o.configureRouter != nil {
		o.configureRouter(&rcfg)
	}
	s.router, s.stopRouter = routertest.StartService(t, context.Background(), rcfg)
	rsvc := s.router

	var cfg frontend.Config
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.RouterMode, cfg.NoKVEvents, cfg.MigrationLimit = o.mode, o.noKVEvents, o.migrationLimit
	cfg.MaxInflightPerWorker, cfg.APIKey = o.maxInflight, o.apiKey
	cfg.RegistryAddr, cfg.EventbusAddr, cfg.RouterAddr = reg.Addr, bus.Addr().String(), rsvc.Addr().String()
	cfg.Namespace = testNamespace
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Transport = planeConfig(o.plane, ns.ClientURL())
	if o.configure != nil {
		o.configure(&cfg)
	}
	flog := o.log
	if flog == nil {
		flog = s.feLog
	}
	fctx, fcancel := context.WithCancel(context.Background())
	fe, err := frontend.Start(fctx, cfg, flog)
	if err != nil {
		fcancel()
		t.Fatal(err)
	}
	s.fe = fe
	s.url = "http://" + fe.Addr().String()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	s.http = &http.Client{Transport: tr}
	key := o.apiKey
	if key == "" {
		key = "unused"
	}
	s.client = openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0), option.WithHTTPClient(s.http))
	t.Cleanup(func() {
		fcancel()
		if err := fe.Wait(); err != nil {
			t.Errorf("frontend: %v", err)
		}
		tr.CloseIdleConnections()
	})
	return s
}

// mockerHandle is a running mocker.
type mockerHandle struct {
	w *worker.Worker
	// metricsURL is the mocker's /metrics, when it serves one.
	metricsURL string
	stop       context.CancelFunc
	done       chan error
	once       sync.Once
}

// kill stops the mocker at once: it deregisters and closes its request
// plane server without letting open requests finish, so their streams
// break.
func (m *mockerHandle) kill() {
	m.once.Do(func() {
		m.stop()
		<-m.done
	})
}

// addMocker starts a mocker on the stack's plane; speedup 0 runs it without
// delays.
func (s *stack) addMocker(speedup float64) *mockerHandle {
	s.t.Helper()
	return s.addMockerOn(s.opts.plane, speedup)
}

// addMockerOn starts a mocker serving the given request plane.
func (s *stack) addMockerOn(plane transport.Plane, speedup float64) *mockerHandle {
	s.t.Helper()
	return s.addMockerOnPlanes([]transport.Plane{plane}, speedup)
}

// addMockerOnPlanes starts a mocker that serves every plane of planes, as
// DYN_REQUEST_PLANE=tcp,http does, and registers each address.
func (s *stack) addMockerOnPlanes(planes []transport.Plane, speedup float64) *mockerHandle {
	s.t.Helper()
	return s.startMocker(planes, speedup, false)
}

// startMocker starts a mocker serving every plane of planes, with args
// (mocker flags) added; with metrics it serves /metrics on 127.0.0.1:0.
func (s *stack) startMocker(planes []transport.Plane, speedup float64, metrics bool, args ...string) *mockerHandle {
	t := s.t
	t.Helper()
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--namespace", testNamespace, "--registry-addr", s.regAddr, "--eventbus-addr", s.bus.Addr().String(),
		"--context-length", strconv.Itoa(s.opts.contextLength), "--speedup-ratio", strconv.FormatFloat(speedup, 'f', -1, 64)}, args...)); err != nil {
		t.Fatal(err)
	}
	metricsAddr := make(chan net.Addr, 1)
	if metrics {
		cfg.MetricsAddr = "127.0.0.1:0"
		cfg.OnMetricsAddr = func(a net.Addr) { metricsAddr <- a }
	}
	if s.opts.leaseTTL > 0 {
		cfg.LeaseTTL = s.opts.leaseTTL
	}
	cfg.Transport = planeConfig(planes[0], s.nats.ClientURL())
	if len(planes) > 1 {
		cfg.Transport.Planes = planes
	}
	cfg.DrainTimeout = time.Nanosecond
	ctx, cancel := context.WithCancel(context.Background())
	m := &mockerHandle{stop: cancel, done: make(chan error, 1)}
	ready := make(chan *worker.Worker, 1)
	go func() {
		m.done <- mocker.Run(ctx, cfg, s.log, func(w *worker.Worker) { ready <- w })
	}()
	select {
	case m.w = <-ready:
	case err := <-m.done:
		cancel()
		t.Fatalf("mocker stopped: %v", err)
	}
	t.Cleanup(m.kill)
	if metrics {
		m.metricsURL = "http://" + (<-metricsAddr).String() + "/metrics"
	}
	return m
}

// waitInstances waits until the frontend (and the router service) see n
// live model instances.
func (s *stack) waitInstances(n int) {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := s.health()
		if h.Instances == n && len(s.router.Core().Stats().GetWorkers()) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("frontend sees %d instances, router %d; want %d", h.Instances, len(s.router.Core().Stats().GetWorkers()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type health struct {
	code      int
	Status    string   `json:"status"`
	Instances int      `json:"instances"`
	Models    []string `json:"models"`
}

func (s *stack) health() health {
	s.t.Helper()
	resp, err := s.http.Get(s.url + "/health")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var h health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		s.t.Fatal(err)
	}
	h.code = resp.StatusCode
	return h
}

// metric sums the samples of a metric whose labels contain match.
func (s *stack) metric(name, match string) float64 {
	s.t.Helper()
	vals := s.metrics(name)
	var sum float64
	for labels, v := range vals {
		if strings.Contains(labels, match) {
			sum += v
		}
	}
	return sum
}

// metrics returns the samples of a metric by their label text.
func (s *stack) metrics(name string) map[string]float64 {
	s.t.Helper()
	return s.metricsAt(s.url+"/metrics", name)
}

// metricsAt returns the samples of a metric at a /metrics URL.
func (s *stack) metricsAt(url, name string) map[string]float64 {
	s.t.Helper()
	resp, err := s.http.Get(url)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			s.t.Fatalf("metric line %q: %v", line, err)
		}
		out[rest[:i]] = v
	}
	return out
}

// post sends a raw JSON body and returns the status and the error object.
func (s *stack) post(path, body string, header map[string]string) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// errorObject checks OpenAI's error shape and returns its fields.
func errorObject(t testing.TB, body map[string]any) map[string]any {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	if !ok {
		t.Fatalf("body %v has no error object", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("error object %v lacks %q", e, k)
		}
	}
	return e
}

func statusOf(err error) int {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

// chatParams asks for a chat completion without thinking (Qwen3's
// enable_thinking false), so that every generated token is content.
func chatParams(content string, maxTokens int64) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:     testModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)},
		MaxTokens: openai.Int(maxTokens),
	}
	p.SetExtraFields(map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}})
	return p
}

// streamChat runs a streamed chat completion and returns its text, finish
// reason and usage.
func streamChat(ctx context.Context, c openai.Client, p openai.ChatCompletionNewParams) (string, string, openai.CompletionUsage, error) {
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Chat.Completions.NewStreaming(ctx, p)
	defer st.Close()
	var text strings.Builder
	var finish string
	var usage openai.CompletionUsage
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	return text.String(), finish, usage, st.Err()
}

func (s *stack) String() string { return fmt.Sprintf("stack(%s, %s)", s.opts.plane, s.opts.mode) }
