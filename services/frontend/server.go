// Package frontend is Switchyard's OpenAI-compatible HTTP frontend. It serves
// POST /v1/chat/completions and POST /v1/completions (streamed as server-sent
// events or not), GET /v1/models from the registry's model cards, /health,
// /live and /metrics.
//
// A request is preprocessed with the model's own chat template and tokenizer
// (fetched from the eventbus object store as the model card references them,
// and cached by sha256), routed (by the router service in kv mode, or in
// process), and sent to the chosen worker over the request plane. Generated
// token ids are decoded incrementally; stop strings are matched on the text
// and never reach the client. When a worker fails mid-stream the request
// continues on another worker with the prompt plus the tokens already
// produced, up to --migration-limit times, so the client sees one stream.
//
// Routing: with --router-mode kv the router service decides (Route with the
// model, the prompt's token ids and the request id, sent on a reused
// RouteStream; MarkPrefillComplete at the first token and Free at the end,
// in batches on one Report stream). If no router replica answers, the
// request is routed round-robin in process over the frontend's own registry
// view and counted in switchyard_frontend_router_fallback_total. With
// round-robin, random or least-loaded, and with kv plus --no-kv-events
// (approximate: caches predicted from this frontend's own decisions), an
// in-process core.Core (services/router/core) decides and the router service is not used.
//
// Migration: a worker that cannot be reached, breaks the stream, is draining
// or never answers is excluded and the request is routed again with the
// prompt plus the tokens generated so far; max_tokens and min_tokens shrink
// by what was produced and usage counts the original prompt. Past
// --migration-limit (0 disables migration) the request fails with 502
// worker_failed: before any output as a JSON error, during a stream as an
// error event followed by data: [DONE].
//
// Disaggregation: when the router's decision carries a prefill target, the
// attempt runs in two legs (disagg.go): the prefill leg on the prefill
// worker, whose answer is the KV handoff, then the decode leg with it on
// the decode worker; a leg that fails is routed again without what failed
// (another prefill worker, or a local prefill), within --handoff-deadline
// per leg, and a handoff not taken is released. Every generated response
// names its workers: X-Switchyard-Worker (the decode or whole-request
// worker) and X-Switchyard-Prefill-Worker (when the prompt was computed on
// a prefill worker), as hex instance ids.
//
// Errors have OpenAI's shape {"error":{"message","type","param","code"}}:
// 400 invalid_request_error (malformed JSON, invalid fields, a prompt over
// the context length with code context_length_exceeded), 401 invalid_api_key
// (when --api-key or --api-key-file is set, for /v1/* only), 404
// model_not_found, 429 rate_limit_exceeded (every live worker of the model
// has --max-inflight-per-worker of this frontend's requests, or the API key
// is over its requests or tokens per minute: then with Retry-After), 503 no_instance
// or model_assets_unavailable, 502 worker_failed. Once a stream has started,
// an error arrives as one SSE event carrying that object, followed by
// data: [DONE] (as vLLM does).
//
// /health answers 200 when at least one live worker instance serves a model
// and 503 before (with the instance count and model names); /live answers
// 200 while the process serves. A client that disconnects cancels its
// worker's generation through the request plane.
package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/obs"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/undo"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// Domain errors; writeError maps them to HTTP statuses and OpenAI error
// types, once.
var (
	// ErrInvalidRequest is a malformed body or an invalid field (400).
	ErrInvalidRequest = openai.ErrInvalidRequest
	// ErrUnauthorized is a missing or unknown API key (401).
	ErrUnauthorized = errors.New("invalid or missing API key")
	// ErrUnknownModel is a model no model card names (404).
	ErrUnknownModel = errors.New("model not found")
	// ErrOverloaded means every worker of the model has
	// --max-inflight-per-worker requests in flight (429).
	ErrOverloaded = errors.New("every worker of the model is saturated")
	// ErrNoInstance is a known model without a live worker (503).
	ErrNoInstance = errors.New("no live instance serves the model")
	// ErrModelAssets means the model's tokenizer or chat template could not
	// be fetched or loaded (503).
	ErrModelAssets = preprocess.ErrModelAssets
	// ErrWorkerFailed is a worker failure that migration could not hide
	// (502).
	ErrWorkerFailed = errors.New("worker failed")
	// ErrInternal is a failure of the frontend itself, a recovered panic
	// (500).
	ErrInternal = errors.New("internal error")
	// ErrToolChoice is a generation that did not call a tool although
	// tool_choice required one (required, or a named function): the answer
	// is an error (500), never a silent text answer.
	ErrToolChoice = preprocess.ErrToolChoice
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// Service is a running frontend.
type Service struct {
	cfg        Config
	log        *slog.Logger
	metrics    *metrics
	keys       *keyring // nil: no API keys
	keyMetrics *keyMetrics
	catalog    *catalog
	fence      *fence
	assets     *preprocess.AssetCache
	prompts    *promptCache // the chat prefix cache of every model; nil: none
	routing    *routing
	disagg     *disagg
	admission  *admission
	load       *load
	recent     *recent
	client     transport.Client
	reg        *registryclient.Client
	bus        *eventbusclient.Client
	instances  *registryclient.Watcher[*registryv1.Instance]
	models     *registryclient.Watcher[*registryv1.ModelCard]
	ln         net.Listener
	server     *http.Server
	created    int64
	// base is the context of requests and asset loads; it ends when the
	// shutdown timeout has passed.
	base       context.Context
	cancelBase context.CancelFunc
	done       chan struct{}
	err        error
	// admissionWait stops admission control's goroutines and waits for
	// them.
	admissionWait func()
	// hook, when set, is called at each point of a request's path that
	// testPoint names; only this package's tests set it (to inject a
	// failure there).
	hook func(point string)
	// legHook, when set, is called at the points of a two-leg attempt
	// with the leg's context, the request's X-Request-Id and the prefill
	// worker's instance; only this package's tests set it.
	legHook func(ctx context.Context, point, xRequestID string, prefill uint64)
}

// The points of a request's path where testPoint calls the hook.
const (
	pointServe  = "serve"  // the request is decoded, before its prompt is checked
	pointRouted = "routed" // a worker is chosen and counted, before it is called
	pointToken  = "token"  // a batch of generated tokens arrived
	pointEnd    = "end"    // the generation is over, before the response ends
)

// testPoint calls the test hook, if any, at point.
func (s *Service) testPoint(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

// Start connects to the registry, eventbus and router, starts the registry
// watches and serves the HTTP API until ctx ends. It returns once the HTTP
// address is bound.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Service, err error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, auth, err := cfg.Credentials()
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, metrics: newMetrics(), catalog: newCatalog(), fence: newFence(), load: newLoad(), recent: newRecent(),
		created: time.Now().Unix(), done: make(chan struct{}), keys: cfg.keys, keyMetrics: newKeyMetrics()}
	s.metrics.registry.MustRegister(s.keyMetrics.requests, s.keyMetrics.tokens, s.keyMetrics.rateLimited,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "switchyard_frontend_fenced_instances",
			Help: "Worker instances this frontend has fenced: unreachable, out of routing until a backoff passes, then on probation until a request to them succeeds."},
			func() float64 { return float64(len(s.fence.fencedNow())) }))
	if s.keys != nil {
		s.keys.start()
		s.metrics.registry.MustRegister(newKeyCollector(s.keys))
	}
	var u undo.Stack
	defer u.OnError(&err)
	if s.client, err = transport.NewClient(cfg.Transport, transport.WithLogger(log)); err != nil {
		return nil, fmt.Errorf("request plane: %w", err)
	}
	u.Push(func() { _ = s.client.Close() })
	if s.reg, err = registryclient.Dial(splitAddrs(cfg.RegistryAddr), registryclient.Options{Credentials: creds, Token: auth}); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	u.Push(func() { _ = s.reg.Close() })
	if s.bus, err = eventbusclient.Dial(splitAddrs(cfg.EventbusAddr), eventbusclient.Options{Credentials: creds, Log: log, Token: auth}); err != nil {
		return nil, fmt.Errorf("eventbus: %w", err)
	}
	u.Push(func() { _ = s.bus.Close() })
	s.assets = preprocess.NewAssetCache(s.bus)
	if cfg.ChatPrefixCacheBytes > 0 {
		s.prompts = newPromptCache(cfg.ChatPrefixCacheBytes, s.metrics.registry)
	}
	if s.routing, err = newRouting(&cfg, creds, auth, s.metrics, log); err != nil {
		return nil, err
	}
	u.Push(s.routing.close)
	s.disagg = newDisagg(grpcclient.Options{Credentials: creds, Token: auth, Log: log}, s.metrics.registry)
	u.Push(s.disagg.close)
	s.startAdmission()
	u.Push(s.stopAdmission)
	debug, err := obs.StartDebug(ctx, cfg.DebugAddr, log)
	if err != nil {
		return nil, err
	}
	u.Push(func() { _ = debug.Close() })
	if s.ln, err = net.Listen("tcp", cfg.listenAddr()); err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.listenAddr(), err)
	}
	u.Push(func() { _ = s.ln.Close() })

	s.instances = registryclient.WatchInstances(s.reg, &registryv1.InstanceFilter{Namespace: cfg.Namespace},
		registryclient.WatchOptions[*registryv1.Instance]{Logger: log, OnChange: func(ch []registryclient.Change[*registryv1.Instance]) {
			s.catalog.onInstances(ch)
			s.routing.local.OnInstances(ch)
			for _, c := range ch {
				if !c.Deleted {
					s.fence.alive(c.Item.GetInstanceId())
				} else {
					s.metrics.forgetWorker(c.Item.GetInstanceId())
				}
			}
		}})
	s.models = registryclient.WatchModels(s.reg, &registryv1.ModelFilter{Namespace: cfg.Namespace},
		registryclient.WatchOptions[*registryv1.ModelCard]{Logger: log, OnChange: func(ch []registryclient.Change[*registryv1.ModelCard]) {
			s.catalog.onModels(ch)
			s.routing.local.OnModels(ch)
		}})

	s.base, s.cancelBase = context.WithCancel(context.Background())
	// The body's read deadline is set by readBody: the server's own
	// ReadTimeout would also end a long generation's stream (its reads
	// watch for the client going away).
	s.server = &http.Server{Handler: s.handler(), ReadHeaderTimeout: cfg.HTTPReadTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
		BaseContext: func(net.Listener) context.Context { return s.base }}
	mode, _ := cfg.mode()
	log.Info("frontend starting", "http_addr", s.ln.Addr().String(), "router_mode", string(mode), "no_kv_events", cfg.approximate(), "kv_events_mode", cfg.KVEventsMode,
		"router_service", cfg.usesRouterService(), "router_addr", cfg.RouterAddr, "registry", cfg.RegistryAddr, "eventbus", cfg.EventbusAddr,
		"namespace", cfg.Namespace, "migration_limit", cfg.MigrationLimit, "max_inflight_per_worker", cfg.MaxInflightPerWorker,
		"api_keys", s.keys.len(), "key_requests_per_minute", cfg.KeyRequestsPerMinute, "key_tokens_per_minute", cfg.KeyTokensPerMinute, "request_plane", cfg.Transport,
		"cors_origins", cfg.CORSOrigins, "chat_prefix_cache_bytes", cfg.ChatPrefixCacheBytes, "http_read_timeout", cfg.HTTPReadTimeout.String(),
		"http_idle_timeout", cfg.HTTPIdleTimeout.String(), "max_conns_per_client", cfg.MaxConnsPerClient)
	served := make(chan error, 1)
	go func() { served <- s.server.Serve(limitConns(s.ln, cfg.MaxConnsPerClient)) }()
	go s.lifecycle(ctx, served)
	return s, nil
}

// lifecycle waits for ctx, then shuts down: no new connections, open
// requests get --shutdown-timeout to finish and are then cancelled, and
// every client and watch is closed.
func (s *Service) lifecycle(ctx context.Context, served chan error) {
	defer close(s.done)
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	s.log.Info("frontend shutting down", "timeout", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	if err := s.server.Shutdown(sctx); err != nil {
		s.cancelBase()
		_ = s.server.Close()
	}
	cancel()
	s.cancelBase()
	if serveErr == nil {
		serveErr = <-served
	}
	if !errors.Is(serveErr, http.ErrServerClosed) {
		s.err = serveErr
	}
	s.instances.Close()
	s.models.Close()
	s.stopAdmission()
	s.routing.close()
	s.disagg.close()
	_ = s.client.Close()
	_ = s.bus.Close()
	_ = s.reg.Close()
}

// Run starts the frontend and blocks until ctx ends and it has stopped.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Addr is the bound HTTP address.
func (s *Service) Addr() net.Addr { return s.ln.Addr() }

// Wait blocks until the service has stopped and returns why it stopped
// other than by its context.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}

// WaitReady blocks until the registry watches have loaded their first
// snapshot, or ctx ends.
func (s *Service) WaitReady(ctx context.Context) error {
	if err := s.instances.WaitReady(ctx); err != nil {
		return err
	}
	return s.models.WaitReady(ctx)
}

func (s *Service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", s.api("chat_completions", s.handleChat))
	mux.Handle("POST /v1/completions", s.api("completions", s.handleCompletion))
	mux.Handle("POST /v1/responses", s.api("responses", s.handleResponses))
	mux.Handle("POST /v1/embeddings", s.api("embeddings", s.handleEmbeddings))
	mux.Handle("GET /v1/models", s.api("models", s.handleModels))
	mux.Handle("GET /v1/models/{id...}", s.api("model", s.handleModel))
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
	})
	if !s.cfg.NoStatusPage {
		mux.HandleFunc("GET /status", s.handleStatusPage)
		mux.HandleFunc("GET /status.json", s.handleStatusJSON)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{Registry: s.metrics.registry}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow, ok := routeMethods[strings.TrimSuffix(r.URL.Path, "/")]; ok {
			w.Header().Set("Allow", allow)
			writeError(w, fmt.Errorf("%w: %s %s: use %s", errMethod, r.Method, r.URL.Path, allow))
			return
		}
		writeError(w, fmt.Errorf("%w: no route for %s %s", errNotFound, r.Method, r.URL.Path))
	})
	return s.cors(mux)
}

// routeMethods are the methods of each path, for 405 answers.
var routeMethods = map[string]string{
	"/v1/chat/completions": http.MethodPost,
	"/v1/completions":      http.MethodPost,
	"/v1/responses":        http.MethodPost,
	"/v1/models":           http.MethodGet,
	"/health":              http.MethodGet,
	"/live":                http.MethodGet,
	"/metrics":             http.MethodGet,
}

// cors answers browsers for the origins of --cors-origins; without it no
// CORS header is ever sent.
func (s *Service) cors(next http.Handler) http.Handler {
	if len(s.cfg.corsOrigins) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && (s.cfg.corsOrigins["*"] || s.cfg.corsOrigins[origin]) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "X-Request-Id, X-Switchyard-Worker, X-Switchyard-Prefill-Worker")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id, X-Session-Id, X-Dynamo-Session-Id, X-Switchyard-Priority, X-Switchyard-Fairness-Id, OpenAI-Organization, OpenAI-Project, X-Stainless-Arch, X-Stainless-Lang, X-Stainless-Os, X-Stainless-Package-Version, X-Stainless-Retry-Count, X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Timeout")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// errNotFound is an unknown path, errMethod a known path with the wrong
// method, and errTooLarge a body over maxBody.
var (
	errNotFound = errors.New("not found")
	errMethod   = errors.New("method not allowed")
	errTooLarge = errors.New("request body too large")
	// errReadTimeout is a body that did not arrive within
	// --http-read-timeout (408).
	errReadTimeout = errors.New("request body read timed out")
	// errAnswered marks an error already answered on the connection
	// (answerAndClose): writeError writes nothing for it.
	errAnswered = errors.New("answered")
)

// requestIDKey is the context key of a request's X-Request-Id.
type requestIDKey struct{}

// requestIDOf returns the request's X-Request-Id.
func requestIDOf(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// clientRequestID accepts a client's X-Request-Id when it is short and
// printable, so that it is safe to echo and to log.
func clientRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// recorder remembers the status and model of a response for the request
// counter.
type recorder struct {
	http.ResponseWriter
	status int
	model  string
	// key is the request's API key, for the access log (its name only).
	key *apiKey
	// gen is what a generation request did, for the access log and the
	// status page; nil for other requests.
	gen *generation
	// failed is the status of an error that ended the response after its
	// status line was out (a stream's error event); 0 if none. Choices
	// set it concurrently.
	failed atomic.Int32
}

// fail notes that the response failed with err (the first failure wins).
func (r *recorder) fail(err error) {
	code, _ := errorStatus(err)
	r.failed.CompareAndSwap(0, int32(code))
}

// counted is the status a request is counted with: the one sent, unless
// the response failed after it was sent with a success status.
func (r *recorder) counted() int {
	if f := int(r.failed.Load()); f != 0 && r.status < 400 {
		return f
	}
	return r.status
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// api wraps an /v1 handler with authentication and the request counter.
func (s *Service) api(endpoint string, h func(w *recorder, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := r.Header.Get("X-Request-Id")
		if !clientRequestID(rid) {
			rid = newID()
		}
		w.Header().Set("X-Request-Id", rid)
		ctx, span := startRequestSpan(r, endpoint)
		span.SetAttributes(attribute.String("switchyard.x_request_id", rid))
		r = r.WithContext(context.WithValue(ctx, requestIDKey{}, rid))
		rec := &recorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			if v := recover(); v != nil {
				s.recovered(rec, r, endpoint, v)
			}
			s.metrics.requests.WithLabelValues(endpoint, s.modelLabel(rec.model), strconv.Itoa(rec.counted())).Inc()
			s.accessLog(r, rec, endpoint, start)
			endRequestSpan(span, rec)
		}()
		k, err := s.authenticate(r)
		rec.key = k
		if err != nil {
			writeError(rec, err)
			return
		}
		if k != nil {
			r = r.WithContext(context.WithValue(r.Context(), apiKeyCtx{}, k))
		}
		h(rec, r)
	})
}

// recovered answers a request whose handler panicked with v: an OpenAI
// error (500 internal_error) when nothing was sent yet, a terminating error
// event when its stream had started. The request is counted with 500
// either way. The panic and its stack are logged; the client sees only the
// request id. A client that went away (http.ErrAbortHandler) is counted
// and let go.
func (s *Service) recovered(rec *recorder, r *http.Request, endpoint string, v any) {
	if v == http.ErrAbortHandler {
		rec.fail(context.Canceled)
		return
	}
	s.log.Error("request panicked", "x_request_id", requestIDOf(r.Context()), "endpoint", endpoint, "panic", fmt.Sprint(v),
		"stack", string(debug.Stack()))
	err := panicError(r.Context())
	rec.fail(err)
	switch {
	case rec.gen != nil && rec.gen.err == nil:
		rec.gen.err = err
	case rec.gen == nil && endpoint != "models" && endpoint != "model":
		// A generation request that failed before it started is still
		// one on the status page.
		rec.gen = &generation{err: err}
	}
	defer func() {
		// A response writer that panics in turn gets no answer written.
		if v := recover(); v != nil {
			s.log.Error("request panicked while answering its panic", "x_request_id", requestIDOf(r.Context()), "panic", fmt.Sprint(v))
		}
	}()
	switch {
	case rec.status == 0:
		writeError(rec, err)
	case strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
		_, body := errorStatus(err)
		if endpoint == "responses" {
			ev := map[string]any{"type": "error", "code": *body.Code, "message": body.Message, "param": nil}
			b, _ := json.Marshal(ev)
			_, _ = fmt.Fprintf(rec, "event: error\ndata: %s\n\n", b)
		} else {
			b, _ := json.Marshal(openai.ErrorBody{Error: body})
			_, _ = fmt.Fprintf(rec, "data: %s\n\ndata: [DONE]\n\n", b)
		}
	}
}

// writeFailure is how a sink's failure to write the response counts: a
// tool choice the answer did not satisfy as itself (the sink answered it),
// anything else as the client gone (its connection no longer takes what is
// written).
func writeFailure(err error) error {
	if errors.Is(err, ErrToolChoice) {
		return err
	}
	return fmt.Errorf("%w: writing the response: %v", context.Canceled, err)
}

// panicError is the error a request that panicked answers with.
func panicError(ctx context.Context) error {
	return fmt.Errorf("%w: the frontend failed serving this request (x_request_id %s)", ErrInternal, requestIDOf(ctx))
}

// readBody reads a request's body, within --http-read-timeout: a client
// that sends part of a body and goes quiet is answered 408 and its
// connection closed, rather than holding it and a goroutine for good.
func (s *Service) readBody(r *http.Request, w http.ResponseWriter) ([]byte, error) {
	rc := http.NewResponseController(w)
	if d := s.cfg.HTTPReadTimeout; d > 0 {
		// Not every writer can (a test's recorder): then the body has no
		// deadline of its own.
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			// The deadline is the body's only: the response may stream for
			// far longer while the server watches the connection.
			defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
		}
	}
	return s.readBodyWithin(r, w, rc, maxBody)
}

// readBodyWithin is readBody with the size limit as an argument. A body
// whose Content-Length is over limit is refused before any of it is read;
// one of unknown length (chunked) is read until it passes limit.
func (s *Service) readBodyWithin(r *http.Request, w http.ResponseWriter, rc *http.ResponseController, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: the request body is %d bytes; the limit is %d", errTooLarge, r.ContentLength, limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return nil, fmt.Errorf("%w: the request body exceeds %d bytes", errTooLarge, limit)
		case errors.As(err, &ne) && ne.Timeout():
			err := fmt.Errorf("%w: the request body did not arrive within %s", errReadTimeout, s.cfg.HTTPReadTimeout)
			if answerAndClose(w, rc, err) {
				return nil, fmt.Errorf("%w: %w", errAnswered, err)
			}
			return nil, err
		}
		return nil, fmt.Errorf("%w: reading the body: %v", ErrInvalidRequest, err)
	}
	return b, nil
}

// answerAndClose answers err on the connection itself and closes it: the
// server would otherwise wait on the connection for the rest of the body
// it gave up on. It reports false when the connection cannot be taken
// over (the caller answers as usual).
func answerAndClose(w http.ResponseWriter, rc *http.ResponseController, err error) bool {
	conn, buf, herr := rc.Hijack()
	if herr != nil {
		return false
	}
	defer conn.Close()
	code, e := errorStatus(err)
	body, _ := json.Marshal(openai.ErrorBody{Error: e})
	body = append(body, '\n')
	_ = conn.SetWriteDeadline(time.Now().Add(refuseTimeout))
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n",
		code, http.StatusText(code), w.Header().Get("X-Request-Id"), len(body))
	_, _ = buf.Write(body)
	_ = buf.Flush()
	if rec, ok := w.(*recorder); ok && rec.status == 0 {
		rec.status = code
	}
	return true
}

func (s *Service) handleChat(w *recorder, r *http.Request) {
	body, err := s.readBody(r, w)
	if err != nil {
		writeError(w, err)
		return
	}
	_, span := startSpan(r.Context(), "frontend.parse")
	req, p, err := decodeChat(body)
	endSpan(span, err)
	if err != nil {
		writeError(w, err)
		return
	}
	w.model = p.model
	card, a, err := s.modelAssets(r.Context(), p.model)
	if err != nil {
		writeError(w, err)
		return
	}
	prompt, err := a.chatPrompt(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	id, created := "chatcmpl-"+newID(), time.Now().Unix()
	g := newChoiceGroup(w, p)
	sks := make([]sink, p.n)
	for i := range sks {
		sk := newChatSink(g.writer(), p, card, req.tools, id, created)
		sk.index, sk.group, sk.logprobs = i, g, newLogprobOut(a.Tokenizer(), p)
		sks[i] = sk
	}
	s.serve(w, r, sks, card, a, prompt, p, "messages")
}

func (s *Service) handleCompletion(w *recorder, r *http.Request) {
	body, err := s.readBody(r, w)
	if err != nil {
		writeError(w, err)
		return
	}
	_, span := startSpan(r.Context(), "frontend.parse")
	_, p, text, ids, err := decodeCompletion(body)
	endSpan(span, err)
	if err != nil {
		writeError(w, err)
		return
	}
	w.model = p.model
	card, a, err := s.modelAssets(r.Context(), p.model)
	if err != nil {
		writeError(w, err)
		return
	}
	if ids != nil {
		if err := a.inVocab("prompt", ids); err != nil {
			writeError(w, err)
			return
		}
	} else {
		_, span := startSpan(r.Context(), "frontend.tokenize")
		ids = a.Encode(text)
		span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", len(ids)))
		span.End()
	}
	if p.echo && text == "" {
		text = a.Tokenizer().Decode(ids)
	}
	id, created := "cmpl-"+newID(), time.Now().Unix()
	g := newChoiceGroup(w, p)
	sks := make([]sink, p.n)
	for i := range sks {
		sk := &completionSink{w: g.writer(), stream: p.stream, includeUsage: p.includeUsage, id: id, index: i, group: g,
			model: p.model, fingerprint: systemFingerprint(card), created: created, logprobs: newLogprobOut(a.Tokenizer(), p)}
		if p.echo {
			sk.echo = &echoPrompt{text: text, ids: ids}
		}
		sks[i] = sk
	}
	s.serve(w, r, sks, card, a, ids, p, "prompt")
}

// modelAssets finds the model's card and its tokenizer and template.
func (s *Service) modelAssets(ctx context.Context, model string) (*registryv1.ModelCard, *assets, error) {
	card := s.catalog.card(model)
	if card == nil {
		return nil, nil, fmt.Errorf("%w: the model %q does not exist", ErrUnknownModel, model)
	}
	a, err := s.assets.Get(ctx, s.base, card)
	if err != nil {
		return nil, nil, err
	}
	return card, &assets{Assets: a, prompts: s.prompts}, nil
}

// serve checks the prompt against the model's limits, generates and writes
// the result through sks, one sink per choice (n), their generations run at
// once. promptParam names the request field of the prompt.
func (s *Service) serve(w *recorder, r *http.Request, sks []sink, card *registryv1.ModelCard, a *assets, prompt []uint32, p genParams, promptParam string) {
	start := time.Now()
	s.testPoint(pointServe)
	if base := card.GetModelName(); base != p.model {
		// The client named a LoRA adapter of base (catalog.card): the
		// sinks answer with its name, the router and the worker take the
		// base model and the adapter.
		p.lora, p.model = p.model, base
	}
	session, err := sessionOf(r.Header)
	if err != nil {
		writeError(w, err)
		return
	}
	p.session = session
	if err := a.inVocab("stop_token_ids", p.stopTokenIDs); err != nil {
		writeError(w, err)
		return
	}
	if cl := card.GetContextLength(); cl > 0 {
		if uint32(len(prompt)) >= cl {
			writeError(w, &openai.ParamError{Param: promptParam, Code: "context_length_exceeded",
				Message: fmt.Sprintf("the prompt is %d tokens; the model's context length is %d", len(prompt), cl)})
			return
		}
		if p.maxTokens > 0 && uint64(len(prompt))+uint64(p.maxTokens) > uint64(cl) {
			writeError(w, &openai.ParamError{Param: "max_tokens", Code: "context_length_exceeded",
				Message: fmt.Sprintf("max_tokens %d plus the prompt's %d tokens exceed the model's context length %d", p.maxTokens, len(prompt), cl)})
			return
		}
	}
	if err := s.admitTokens(r.Context(), len(prompt)*len(sks)); err != nil {
		writeError(w, err)
		return
	}
	tk, err := s.admit(r, p, len(prompt), len(sks))
	if err != nil {
		writeError(w, err)
		return
	}
	defer tk.done()
	// The request's route decisions are its ticket's (admission.go).
	ctx := withTicket(r.Context(), tk)
	if s.load.saturated(s.catalog.modelInstances(p.model), s.cfg.MaxInflightPerWorker) {
		writeError(w, fmt.Errorf("%w: %d requests in flight on each; retry later", ErrOverloaded, s.cfg.MaxInflightPerWorker))
		return
	}
	mm := s.metrics.model(p.model)
	inflight := mm.inflight
	inflight.Inc()
	defer inflight.Dec()
	defer func() { mm.duration.Observe(time.Since(start).Seconds()) }()
	if len(sks) == 1 {
		s.choice(ctx, r, w, true, sks[0], sks[0].requestID(), a, prompt, p, start)
		return
	}
	// n choices: n requests of the same prompt (the router sees their
	// common prefix and may put them on one worker), each with its own
	// seed so that the answers differ; the first failure cancels the rest.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var escaped atomic.Pointer[any]
	for i, sk := range sks {
		cp := p
		if i > 0 {
			cp.sampling = proto.Clone(p.sampling).(*workerv1.SamplingParameters)
			seed := rand.Uint64()
			if p.sampling.Seed != nil {
				seed = *p.sampling.Seed + uint64(i)
			}
			cp.sampling.Seed = &seed
		}
		wg.Go(func() {
			// choice answers its own failures; a panic that escapes it
			// (its sink failing in turn) goes to the handler, which
			// answers it once every choice has stopped.
			defer func() {
				if v := recover(); v != nil {
					escaped.CompareAndSwap(nil, &v)
					cancel()
				}
			}()
			if !s.choice(ctx, r, w, i == 0, sk, fmt.Sprintf("%s-%d", sk.requestID(), i), a, prompt, cp, start) {
				cancel()
			}
		})
	}
	wg.Wait()
	if v := escaped.Load(); v != nil {
		panic(*v)
	}
}

// choice generates one choice of a request into sk under the worker
// request id jobID; it reports whether it succeeded. A failure, a panic
// included, is answered through sk and noted in rec. With track, rec
// records the generation for the access log and status page (the first
// choice's).
func (s *Service) choice(ctx context.Context, r *http.Request, rec *recorder, track bool, sk sink, jobID string, a *assets, prompt []uint32,
	p genParams, start time.Time) (ok bool) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.Error("request panicked", "request_id", jobID, "x_request_id", requestIDOf(r.Context()), "model", p.model,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		err := panicError(r.Context())
		if track && rec.gen != nil && rec.gen.err == nil {
			rec.gen.err = err
		}
		rec.fail(err)
		sk.fail(err)
		ok = false
	}()
	text := newTextOut(a.Tokenizer(), p.stopStrings)
	var last time.Time
	mm := s.metrics.model(p.model)
	emit := func(ids []uint32, lps []*workerv1.TokenLogprob, more bool) error {
		now := time.Now()
		if last.IsZero() {
			mm.ttft.get().Observe(now.Sub(start).Seconds())
			firstTokenSpan(ctx, start, now)
		} else {
			per := now.Sub(last).Seconds() / float64(len(ids))
			for range ids {
				mm.itl.get().Observe(per)
			}
		}
		last = now
		s.testPoint(pointToken)
		sk.tokens(ids, lps, more)
		delta, stop := text.add(ids)
		if delta != "" {
			if err := sk.delta(delta); err != nil {
				return writeFailure(err)
			}
		}
		if stop {
			return errStopped
		}
		return nil
	}
	j := &job{id: jobID, model: p.model, prompt: prompt, p: p}
	if ps, ok := sk.(promptSink); ok {
		j.promptLogprobs = ps.promptLogprobs
	}
	// Each attempt names its workers in the response's headers; those of
	// the attempt whose output starts the response go out with it.
	hdr := sk.header()
	j.servedBy = func(d decision) { setServedBy(hdr, d) }
	if track {
		emit = rec.trackGeneration(j.id, len(prompt), start, emit)
	}
	out, err := s.generate(ctx, j, emit)
	s.chargeCompletion(r.Context(), out.completion)
	if track {
		rec.gen.done(out, err)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("request failed", "request_id", j.id, "x_request_id", requestIDOf(r.Context()), "model", p.model, "err", err.Error())
		}
		rec.fail(err)
		sk.fail(err)
		return false
	}
	rest, stopped := text.flush()
	if rest != "" {
		if err := sk.delta(rest); err != nil {
			rec.fail(writeFailure(err))
			sk.fail(err)
			return false
		}
	}
	finish := "stop"
	if !stopped && out.finish == workerFinishLength {
		finish = "length"
	}
	u := openai.Usage{PromptTokens: uint32(len(prompt)), CompletionTokens: out.completion, TotalTokens: uint32(len(prompt)) + out.completion}
	if out.cachedPrompt > 0 {
		u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: out.cachedPrompt}
	}
	mm.promptTokens.get().Add(float64(u.PromptTokens))
	mm.genTokens.get().Add(float64(u.CompletionTokens))
	mm.cachedTokens.get().Add(float64(out.cachedPrompt))
	s.testPoint(pointEnd)
	if err := sk.end(finish, u); err != nil {
		rec.fail(writeFailure(err))
		if r.Context().Err() == nil {
			s.log.Warn("request failed", "request_id", j.id, "x_request_id", requestIDOf(r.Context()), "model", p.model, "err", err.Error())
		}
		return false
	}
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("request done", "request_id", j.id, "x_request_id", requestIDOf(r.Context()), "model", p.model,
			"prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens, "finish", finish, "duration", time.Since(start).String())
	}
	return true
}

// modelLabel is the metrics label of a requested model: the name when the
// registry knows the model, unknownModel otherwise.
func (s *Service) modelLabel(model string) string {
	if model == "" || s.catalog.card(model) != nil {
		return model
	}
	return unknownModel
}

// handleModel answers GET /v1/models/{id}; model names hold slashes.
func (s *Service) handleModel(w *recorder, r *http.Request) {
	id := r.PathValue("id")
	if s.catalog.card(id) == nil {
		writeError(w, fmt.Errorf("%w: the model %q does not exist", ErrUnknownModel, id))
		return
	}
	w.model = id
	for _, m := range s.catalog.models() {
		if m.id == id {
			writeJSON(w, http.StatusOK, openai.Model{ID: id, Object: "model", Created: s.created, OwnedBy: "switchyard", Root: m.root, Parent: m.parent})
			return
		}
	}
	writeError(w, fmt.Errorf("%w: the model %q does not exist", ErrUnknownModel, id))
}

// handleModels lists every model and LoRA adapter the live cards name, an
// adapter with its base model as its parent (as vLLM lists them).
func (s *Service) handleModels(w *recorder, _ *http.Request) {
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	for _, m := range s.catalog.models() {
		list.Data = append(list.Data, openai.Model{ID: m.id, Object: "model", Created: s.created, OwnedBy: "switchyard", Root: m.root, Parent: m.parent})
	}
	writeJSON(w, http.StatusOK, list)
}

// handleHealth answers 200 when at least one live worker instance serves a
// model, 503 otherwise.
func (s *Service) handleHealth(w http.ResponseWriter, _ *http.Request) {
	n := s.catalog.liveModelInstances()
	body := map[string]any{"status": "healthy", "instances": n, "models": s.catalog.modelNames()}
	code := http.StatusOK
	if n == 0 {
		body["status"], code = "unhealthy", http.StatusServiceUnavailable
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// errorStatus maps an error to its HTTP status and OpenAI error body; it is
// the one place domain errors become statuses.
func errorStatus(err error) (int, openai.ErrorDetail) {
	e := openai.ErrorDetail{Message: err.Error(), Type: "invalid_request_error"}
	code := func(c string) *string { return &c }
	var pe *openai.ParamError
	switch {
	case errors.As(err, &pe):
		if pe.Param != "" {
			e.Param = &pe.Param
		}
		if pe.Code != "" {
			e.Code = &pe.Code
		}
		return http.StatusBadRequest, e
	case errors.Is(err, ErrInvalidRequest):
		return http.StatusBadRequest, e
	case errors.Is(err, ErrUnauthorized):
		e.Code = code("invalid_api_key")
		return http.StatusUnauthorized, e
	case errors.Is(err, ErrUnknownModel):
		e.Param, e.Code = code("model"), code("model_not_found")
		return http.StatusNotFound, e
	case errors.Is(err, errNotFound):
		e.Code = code("not_found")
		return http.StatusNotFound, e
	case errors.Is(err, errMethod):
		e.Code = code("method_not_allowed")
		return http.StatusMethodNotAllowed, e
	case errors.Is(err, errReadTimeout):
		e.Code = code("request_timeout")
		return http.StatusRequestTimeout, e
	case errors.Is(err, errTooLarge):
		e.Code = code("request_too_large")
		return http.StatusRequestEntityTooLarge, e
	case errors.Is(err, ErrRateLimited), errors.Is(err, ErrOverloaded):
		// A key over its limits and a model whose workers are all saturated
		// both mean: retry later.
		e.Type, e.Code = "rate_limit_error", code("rate_limit_exceeded")
		return http.StatusTooManyRequests, e
	case errors.Is(err, ErrShed):
		e.Type, e.Code = "service_unavailable", code("overloaded")
		return http.StatusServiceUnavailable, e
	case errors.Is(err, ErrNoInstance):
		e.Type, e.Code = "service_unavailable", code("no_instance")
		return http.StatusServiceUnavailable, e
	case errors.Is(err, ErrModelAssets):
		e.Type, e.Code = "service_unavailable", code("model_assets_unavailable")
		return http.StatusServiceUnavailable, e
	case errors.Is(err, ErrInternal):
		e.Type, e.Code = "server_error", code("internal_error")
		return http.StatusInternalServerError, e
	case errors.Is(err, ErrToolChoice):
		e.Type, e.Code = "server_error", code("tool_choice_not_satisfied")
		return http.StatusInternalServerError, e
	case errors.Is(err, ErrWorkerFailed):
		e.Type, e.Code = "server_error", code("worker_failed")
		return http.StatusBadGateway, e
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this (nginx's 499).
		e.Type = "client_closed_request"
		return 499, e
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, transport.ErrTimeout):
		e.Type, e.Code = "server_error", code("timeout")
		return http.StatusGatewayTimeout, e
	}
	e.Type = "server_error"
	return http.StatusInternalServerError, e
}

func writeError(w http.ResponseWriter, err error) {
	if errors.Is(err, errAnswered) {
		return
	}
	var shed *shedError
	if errors.As(err, &shed) {
		w.Header().Set("Retry-After", shed.retryAfter())
	}
	var rl *rateLimitError
	if errors.As(err, &rl) {
		// OpenAI's clients (and most HTTP clients) wait this long before
		// they retry.
		w.Header().Set("Retry-After", rl.retryAfter())
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(max(1, rl.wait.Milliseconds()), 10))
	}
	code, body := errorStatus(err)
	writeJSON(w, code, openai.ErrorBody{Error: body})
}

// newID returns a random request id suffix: 32 hex digits.
func newID() string {
	var b [32]byte
	for i, v := range [2]uint64{rand.Uint64(), rand.Uint64()} {
		for j := 15; j >= 0; j-- {
			b[i*16+j] = hexDigits[v&0xf]
			v >>= 4
		}
	}
	return string(b[:])
}
