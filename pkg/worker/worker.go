// Package worker is the Go SDK for Switchyard workers: one call registers a
// worker with the registry and keeps its lease alive, publishes its model
// card (tokenizer files uploaded to the eventbus object store and referenced
// by sha256), serves generate on the request plane, publishes KV cache events
// in order and in batches, publishes load every second, and on shutdown
// deregisters first, then lets in-flight requests finish within a bound.
//
// A worker never stops because the control plane is away: one started before
// the registry or etcd waits for them and registers when they answer; while
// the registry or etcd cannot be reached later it keeps serving and keeps its keep-alive going,
// and when the registry answers that the lease is gone it registers again (a
// new lease and instance id, the same endpoint, address and model card) and
// restarts its KV events with a cleared event.
//
// Every worker keeps a local indexer (KVIndex): the blocks it holds, from
// its own events, and a ring of its recent events. It serves them, and
// generate, as WorkerService over gRPC (address in the instance metadata
// under "worker_api"), so that routers in the core and direct KV event modes
// (pkg/kvevents) fill gaps and rebuild without a broker.
//
// The request plane serves before Start returns (while Start waits for the
// control plane and registers), so a program publishes its engine's KV
// events through a KVPublisher set in Config.KVPublisher rather than only
// through the *Worker: the batches of the requests served meanwhile are
// held and published first, in order, under the registered instance id.
package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/reasoning"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/toolcall"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// ErrInvalidRequest is what a generate payload that does not decode gets,
// as a transport handler error with code transport.CodeInvalidArgument.
var ErrInvalidRequest = errors.New("worker: invalid generate request")

// Model describes the model a worker serves.
type Model struct {
	// Name as clients request it, such as Qwen/Qwen3-0.6B.
	Name string
	// BlockSize is the KV block size in tokens.
	BlockSize uint32
	// ContextLength is the longest prompt plus output, in tokens.
	ContextLength uint32
	// TokenizerFiles are uploaded to the object store and referenced from
	// the model card (tokenizer.json, tokenizer_config.json, ...).
	TokenizerFiles []string
	// ToolCallParser names how the model writes tool calls (see
	// pkg/toolcall: hermes, qwen3, none); the frontend parses them with it.
	ToolCallParser string
	// ReasoningParser names how the model writes its reasoning (see
	// pkg/reasoning: qwen3, deepseek_r1, none).
	ReasoningParser string
	// LoRAs are the LoRA adapters the worker can serve on this model, and
	// MaxLoRAs how many it holds loaded at once (the card's lora_adapters
	// and max_loras); which are loaded now goes in its load reports.
	LoRAs    []LoRA
	MaxLoRAs uint32
	// DataParallelSize is the number of data-parallel ranks the worker
	// serves (the card's data_parallel_size); 0 or 1: one.
	DataParallelSize uint32
}

// LoRA is a LoRA adapter a worker serves: its name, as clients request it,
// and where the engine loads it from (informative; may be empty).
type LoRA struct{ Name, Path string }

// RegisterParserFlags adds --tool-call-parser and --reasoning-parser, the
// model card's parser names, to a worker command's flags.
func RegisterParserFlags(fs *flag.FlagSet, toolCall, reasoningParser *string, defToolCall, defReasoning string) {
	fs.StringVar(toolCall, "tool-call-parser", defToolCall, "how the model writes tool calls, for the frontend to parse: "+strings.Join(toolcall.Names(), ", "))
	fs.StringVar(reasoningParser, "reasoning-parser", defReasoning, "how the model writes its reasoning, for the frontend to parse: "+strings.Join(reasoning.Names(), ", "))
}

// Config says where a worker registers and how it serves.
type Config struct {
	Namespace, Component, Endpoint string
	Model                          Model
	// RegistryAddr and EventbusAddr are comma lists of replicas.
	RegistryAddr, EventbusAddr string
	// Credentials secure the registry and eventbus connections; nil is plaintext.
	Credentials credentials.TransportCredentials
	// Token, when set, sends a bearer token (a worker role's) on every call
	// to the registry and eventbus; see authtoken.Client.
	Token credentials.PerRPCCredentials
	// Transport is the request plane (see transport.ConfigFromEnv).
	Transport transport.Config
	// LeaseTTL of the registration; 0 is the registry's default (10 s).
	LeaseTTL time.Duration
	// DrainTimeout bounds how long in-flight requests may finish on shutdown.
	DrainTimeout time.Duration
	// LoadInterval is how often load is published; 0 is 1 s.
	LoadInterval time.Duration
	// LoadHeartbeat is the longest the worker goes without publishing its
	// load: at a LoadInterval tick whose reports equal the last ones
	// published (all of them, counters included, but for their
	// timestamps) nothing is published until then. 0 is
	// DefaultLoadHeartbeat; below LoadInterval (a negative value too),
	// every tick publishes.
	LoadHeartbeat time.Duration
	// Metadata is added to the registered instance.
	Metadata map[string]string
	// KVEventsMode is the KV event plane (--kv-events-mode): jetstream
	// (the default, also for ""), core (NATS Core subjects), direct (no
	// publishing: routers watch WorkerService), none (no publishing).
	KVEventsMode kvevents.Mode
	// KVEventsRing is how many recent events the local indexer keeps per
	// dp rank (--kv-events-ring); 0 is DefaultKVEventsRing.
	KVEventsRing int
	// API is the WorkerService gRPC server; an empty GRPCAddr listens on
	// the request plane's host (DYN_TCP_RPC_HOST) on a free port.
	API grpcserver.Config
	// KVPublishBuffer is how many KV event batches may wait to be
	// published (jetstream and core modes) while the eventbus or NATS is
	// away or slower than the engine; 0 is DefaultKVPublishBuffer. The
	// worker never gives a batch up because it waits: it is published once
	// the eventbus is back, however long that takes. A batch that finds the
	// buffer full is not published (it stays in the local indexer, whose
	// ring and state the worker serves), and PublishKVEvents does not block
	// the engine: a router sees the gap in the event ids at the next event
	// it receives and fills it from the ring (GetKvEvents), or rebuilds the
	// worker's blocks from its state (GetKvState) when the ring no longer
	// holds them. See KVEventsDropped.
	KVPublishBuffer int
	// KVPublishInterval is the least time between two publishes of KV
	// events (jetstream and core modes): the batches that come meanwhile
	// wait and go out together, each run of a rank's consecutive batches
	// merged into one batch, one eventbus event (up to maxMergedKVBytes).
	// The eventbus spends its CPU per message and per event more than per
	// byte, so a fleet of thousands of workers, each publishing several
	// batches a second, trades up to this much delay before its events are
	// indexed for that many fewer messages. A publish that found more
	// batches than it takes at once is followed by the next without
	// waiting, so a busy engine's events never fall behind. With it the
	// load reports go out with the KV events (outside the core mode): a
	// report due publishes at once, with the batches held so far, in one
	// message. 0 (the default) publishes batches as they come, and load
	// reports on a stream of their own, unless the eventbus asks for an
	// interval (it does while its publishers together send more batches a
	// second than its --publish-rate-target): the worker then holds and
	// merges its KV batches for that long as for this one.
	KVPublishInterval time.Duration
	// DropKVEvent, when set, is asked for each batch about to be published
	// to the eventbus and drops it when it answers true: a test hook that
	// loses events on the way (the local indexer still has them).
	DropKVEvent func(*workerv1.KvEventBatch) bool
	// KVPublisher, when set, is how the program publishes KV events from
	// its first request on, before Start has returned the *Worker: Start
	// publishes what it held once registered, first and in order, under the
	// registered instance id (see KVPublisher). While it holds its limit
	// before the registration, generate requests are refused (draining).
	KVPublisher *KVPublisher
	// Role is the part of requests the worker serves: ROLE_AGG (or unset)
	// serves whole requests; ROLE_PREFILL the prefill legs of disaggregated
	// requests, ROLE_DECODE their decode legs (and whole requests). It is
	// registered with the instance.
	Role commonv1.Role
	// KVTransfer is how a partner reaches the worker's KV: required for
	// prefill and decode workers, refused for aggregated ones. An empty
	// address registers the worker's WorkerService address.
	KVTransfer *commonv1.KvTransfer
	// KVHandoffs, when set, serves WorkerService's PullKvHandoff and
	// ReleaseKvHandoff (the mock KV transfer); unset, they are Unimplemented.
	KVHandoffs KVHandoffServer
	// Embed, when set, serves embeddings of the model on the embed endpoint
	// (wire.EmbedEndpoint) beside generate, and the model card lists both
	// tasks, so that frontends send it /v1/embeddings requests.
	Embed EmbedHandler
	// Log receives the worker's logs; nil discards them.
	Log *slog.Logger
}

// DefaultKVPublishBuffer is the default Config.KVPublishBuffer: 4,096
// batches, besides the 16 eventbus batches in flight (of up to 256 KV
// batches each). A busy engine emits about 1,500 KV events a second, one
// batch each at most, so the buffer covers about 3 s of an eventbus outage
// at that rate; the ring (DefaultKVEventsRing) covers the rest for routers.
const DefaultKVPublishBuffer = 4096

// kvFlushTimeout bounds how long Shutdown waits for queued KV events to be
// published; what is left is not published (the instance deregisters).
const kvFlushTimeout = 5 * time.Second

// Handler serves one generate request, sending responses in order until it
// returns. Its context ends when the caller goes away.
type Handler func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error

// EmbedHandler serves one embed request: one embedding per input, in order.
type EmbedHandler func(ctx context.Context, req *workerv1.EmbedRequest) (*workerv1.EmbedResponse, error)

// Worker is a running worker.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	reg    *registryclient.Client
	bus    *eventbusclient.Client
	server transport.Server

	// mu guards sess, which re-registration replaces; instance is the
	// registration made on it.
	mu       sync.Mutex
	sess     *registryclient.Session
	instance atomic.Pointer[registryv1.Instance]
	// registrations counts successful registrations, the first included.
	registrations atomic.Uint64
	stopMaint     chan struct{}
	maintDone     chan struct{}

	kv     chan *workerv1.KvEventBatch
	kvDone chan struct{}
	// kvMu orders numbering in the local indexer with queueing for
	// publishing, so that batches are published in event id order.
	kvMu     sync.Mutex
	kvClosed bool
	// kvBacklog is, per dp rank, the first event id waiting in the ring
	// because the buffer was full (see backfill); under kvMu. kvWake
	// tells the publisher that a backlog began.
	kvBacklog map[uint32]uint64
	// kvUnnumbered holds unnumbered batches (a re-registration's cleared
	// event: not in the ring) that found the buffer full or a backlog;
	// they are published before the backlog. Under kvMu.
	kvUnnumbered []*workerv1.KvEventBatch
	kvWake       chan struct{}
	// kvClosing is closed with kv: a publisher waiting out
	// KVPublishInterval publishes what is left at once.
	kvClosing chan struct{}
	// loadRide hands a load report due to the KV publisher, which sends
	// it with the KV batches it holds (see publishLoad), while the KV
	// batches are held for an interval (kvPaced); nil in the core mode. It
	// holds the newest report only.
	loadRide chan []*eventbusv1.Event
	// kvPaced is whether the KV publisher holds its batches for an
	// interval (KVPublishInterval, or one the eventbus asked for).
	kvPaced atomic.Bool
	kvIndex *KVIndex
	// kvCtx ends the publisher's waits at shutdown, after kvFlushTimeout.
	kvCtx    context.Context
	kvCancel context.CancelFunc
	// kvQueued, kvPublished, kvLost and kvDropped count KV events (not
	// batches) queued for publishing (from the ring too), acknowledged by
	// the eventbus, failed for good (refused, not encodable, or still
	// unpublished at shutdown), and left in the ring because the buffer
	// was full.
	kvQueued, kvPublished, kvLost, kvDropped atomic.Uint64
	// requests, promptTokens and outputTokens count the generate requests
	// accepted, their prompt tokens and the output tokens sent, since the
	// start; cachedTokens the prompt tokens their engine said it served
	// from its prefix cache: the *_total fields of every load report.
	requests, promptTokens, outputTokens, cachedTokens atomic.Uint64
	// computed counts the requests that have ended by the prompt tokens
	// their engine computed (wire.ComputedPromptBucket): the load
	// reports' computed_prompt_requests_total.
	computed [wire.ComputedPromptBuckets]atomic.Uint64

	api      *grpcserver.Server
	apiDone  chan error
	loadFn   func() []*workerv1.LoadMetrics
	loadMu   sync.Mutex
	stopLoad chan struct{}
	loadDone chan struct{}
	stopAPI  context.CancelFunc
	closed   sync.Once
}

func (c *Config) defaults() {
	if c.Endpoint == "" {
		c.Endpoint = wire.GenerateEndpoint
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.LoadInterval == 0 {
		c.LoadInterval = time.Second
	}
	if c.LoadHeartbeat == 0 {
		c.LoadHeartbeat = DefaultLoadHeartbeat
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.KVEventsMode == "" {
		c.KVEventsMode = kvevents.JetStream
	}
	if c.KVPublishBuffer <= 0 {
		c.KVPublishBuffer = DefaultKVPublishBuffer
	}
}

// Start serves generate on the request plane, uploads the tokenizer files,
// registers the instance and its model card, and starts publishing. A
// control plane that cannot be reached yet (the registry, the eventbus or
// etcd behind them not up, or restarting) is waited for: Start retries with
// jittered backoff until it registers or ctx ends, and the request plane and
// WorkerService serve meanwhile. Give ctx a deadline to fail fast instead.
// When it fails midway it undoes what it did.
func Start(ctx context.Context, cfg Config, h Handler) (_ *Worker, err error) {
	cfg.defaults()
	if cfg.Model.Name == "" || cfg.Model.BlockSize == 0 {
		return nil, errors.New("worker: the model needs a name and a block size")
	}
	if err := toolcall.Validate(cfg.Model.ToolCallParser); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := reasoning.Validate(cfg.Model.ReasoningParser); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if _, err := kvevents.Parse(string(cfg.KVEventsMode)); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := validateDisaggregation(cfg.Role, cfg.KVTransfer); err != nil {
		return nil, err
	}
	if cfg.KVPublisher != nil {
		if err := cfg.KVPublisher.claim(); err != nil {
			return nil, err
		}
	}
	w := &Worker{cfg: cfg, log: cfg.Log, kv: make(chan *workerv1.KvEventBatch, cfg.KVPublishBuffer), kvDone: make(chan struct{}), kvIndex: NewKVIndex(cfg.KVEventsRing),
		stopLoad: make(chan struct{}), loadDone: make(chan struct{}), stopMaint: make(chan struct{}), maintDone: make(chan struct{})}
	w.kvCtx, w.kvCancel = context.WithCancel(context.Background())
	w.kvBacklog, w.kvWake, w.kvClosing = map[uint32]uint64{}, make(chan struct{}, 1), make(chan struct{})
	if cfg.KVEventsMode != kvevents.Core {
		w.loadRide = make(chan []*eventbusv1.Event, 1)
	}
	undo := []func(){w.kvCancel}
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	srv, err := transport.NewServer(cfg.Transport, transport.WithLogger(w.log))
	if err != nil {
		return nil, fmt.Errorf("worker: request plane: %w", err)
	}
	srv.Handle(cfg.Endpoint, w.handler(h))
	var tasks []registryv1.ModelTask
	if cfg.Embed != nil {
		srv.Handle(wire.EmbedEndpoint, w.embedHandler(cfg.Embed))
		tasks = []registryv1.ModelTask{registryv1.ModelTask_MODEL_TASK_GENERATE, registryv1.ModelTask_MODEL_TASK_EMBED}
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("worker: start request plane: %w", err)
	}
	w.server = srv
	undo = append(undo, func() { _ = srv.Close() })
	if err := w.startAPI(h); err != nil {
		return nil, err
	}
	apiCtx, stopAPI := context.WithCancel(context.Background())
	w.apiDone = make(chan error, 1)
	go func() { w.apiDone <- w.api.Serve(apiCtx, nil) }()
	w.stopAPI = stopAPI
	undo = append(undo, func() { stopAPI(); <-w.apiDone })

	bus, err := eventbusclient.Dial([]string{cfg.EventbusAddr}, eventbusclient.Options{Credentials: cfg.Credentials, Log: w.log, Token: cfg.Token})
	if err != nil {
		return nil, fmt.Errorf("worker: eventbus: %w", err)
	}
	w.bus = bus
	undo = append(undo, func() { _ = bus.Close() })
	// The control plane may not be up yet (a worker started before the
	// registry, the eventbus or etcd): every step that needs it is retried
	// until it answers, while the request plane already serves.
	var artifacts []*registryv1.TokenizerArtifact
	if err := w.untilReachable(ctx, "tokenizer upload", func(ctx context.Context) (err error) {
		artifacts, err = w.uploadTokenizer(ctx)
		return err
	}); err != nil {
		return nil, err
	}

	reg, err := registryclient.Dial([]string{cfg.RegistryAddr}, registryclient.Options{Credentials: cfg.Credentials, Log: w.log, Token: cfg.Token})
	if err != nil {
		return nil, fmt.Errorf("worker: registry: %w", err)
	}
	w.reg = reg
	undo = append(undo, func() { _ = reg.Close() })
	// Every plane the worker serves is registered (DYN_REQUEST_PLANE=tcp,http
	// serves two); each client calls the one it prefers.
	addrs := srv.Addresses(cfg.Endpoint)
	md := map[string]string{}
	maps.Copy(md, cfg.Metadata)
	md[wire.MetadataWorkerAPI] = w.apiAddr()
	want := &registryv1.Instance{Namespace: cfg.Namespace, Component: cfg.Component, Endpoint: cfg.Endpoint,
		Transport: transport.TransportOf(addrs...), Metadata: md, Role: cfg.Role, KvTransfer: w.registeredTransfer()}
	card := &registryv1.ModelCard{Namespace: cfg.Namespace, Component: cfg.Component, Endpoint: cfg.Endpoint,
		ModelName: cfg.Model.Name, BlockSize: cfg.Model.BlockSize, ContextLength: cfg.Model.ContextLength, Tokenizer: artifacts,
		ToolCallParser: cfg.Model.ToolCallParser, ReasoningParser: cfg.Model.ReasoningParser, Tasks: tasks,
		MaxLoras: cfg.Model.MaxLoRAs, DataParallelSize: cfg.Model.DataParallelSize}
	for _, l := range cfg.Model.LoRAs {
		card.LoraAdapters = append(card.LoraAdapters, &registryv1.LoraAdapter{Name: l.Name, Path: l.Path})
	}
	var sess *registryclient.Session
	var in *registryv1.Instance
	if err := w.untilReachable(ctx, "registration", func(ctx context.Context) (err error) {
		sess, in, err = w.register(ctx, want, card)
		return err
	}); err != nil {
		return nil, err
	}
	w.sess = sess
	w.instance.Store(in)
	w.registrations.Add(1)
	go w.publishKV()
	if cfg.KVPublisher != nil {
		// Before anything else the program publishes: the batches held
		// since the request plane started serving come first.
		cfg.KVPublisher.attach(w)
	}
	go w.publishLoad()
	go w.maintain(want, card)
	w.log.Info("worker registered", "instance", fmt.Sprintf("%x", in.InstanceId), "endpoint",
		cfg.Namespace+"/"+cfg.Component+"/"+cfg.Endpoint, "transport", fmt.Sprint(addrs), "model", cfg.Model.Name,
		"worker_api", w.apiAddr(), "kv_events_mode", string(cfg.KVEventsMode), "kv_events_ring", w.kvIndex.ringCap,
		"role", wire.RoleName(cfg.Role), "kv_transfer", wire.TransferKindName(cfg.KVTransfer.GetKind()))
	return w, nil
}

// register opens a session and registers the instance and its model card on
// it; on failure it revokes what it granted.
func (w *Worker) register(ctx context.Context, want *registryv1.Instance, card *registryv1.ModelCard) (*registryclient.Session, *registryv1.Instance, error) {
	sess, err := registryclient.NewSession(ctx, w.reg, registryclient.SessionOptions{TTL: w.cfg.LeaseTTL, Logger: w.log})
	if err != nil {
		return nil, nil, fmt.Errorf("worker: registry session: %w", err)
	}
	in, err := sess.Register(ctx, proto.Clone(want).(*registryv1.Instance))
	if err == nil {
		err = w.registerCard(ctx, sess, card)
	} else {
		err = fmt.Errorf("worker: register: %w", err)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = sess.Close(cctx)
		cancel()
		return nil, nil, err
	}
	return sess, in, nil
}

// registerCard publishes the model card on the lease the instance already
// holds, retrying a failure a later call may not meet (a registry replica
// that lost etcd between the two calls: the client moves on to another) on
// the same lease for as long as ctx lasts. Giving up at the first failure
// would revoke the lease, and everyone watching would see the instance
// deleted and registered again under a new id.
func (w *Worker) registerCard(ctx context.Context, sess *registryclient.Session, card *registryv1.ModelCard) error {
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second})
	for {
		err := sess.RegisterModel(ctx, proto.Clone(card).(*registryv1.ModelCard))
		if err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil || backoff.Sleep(ctx, bo.Next()) != nil {
			return fmt.Errorf("worker: register model card: %w", err)
		}
		w.log.Warn("model card registration failed; retrying on the same lease", "err", err.Error())
	}
}

// attemptTimeout bounds one attempt of a step untilReachable retries, so that
// a registry that accepts connections but does not answer is tried again.
const attemptTimeout = 10 * time.Second

// untilReachable runs step until it succeeds, retrying with jittered backoff
// (100 ms to 5 s) for as long as its error may be the control plane being
// away or not up yet, and ctx lasts. An error no retry can change (see
// retryable) is returned at once, as is the last error once ctx ends: a main
// that is told to stop while it waits exits cleanly.
func (w *Worker) untilReachable(ctx context.Context, what string, step func(context.Context) error) error {
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := step(actx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		wait := bo.Next()
		w.log.Warn(what+" failed; retrying", "err", err.Error(), "backoff", wait.String())
		if backoff.Sleep(ctx, wait) != nil {
			return err
		}
	}
}

// retryable tells an error of the control plane that a later attempt may not
// get (it is away, restarting, overloaded, or its etcd is: Unavailable,
// DeadlineExceeded, ResourceExhausted, Aborted, and the Internal or Unknown
// of a connection cut mid-call) from one that says the worker's own request
// or credentials are wrong, and from a local failure (a tokenizer file that
// cannot be read), which no retry changes.
func retryable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return errors.Is(err, context.DeadlineExceeded)
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// maintain waits for the session's lease to be lost and registers again,
// retrying with jittered backoff until it succeeds or the worker shuts down.
// A registry that is merely unreachable never gets here: the session keeps
// trying, and the lease often outlives the outage.
func (w *Worker) maintain(want *registryv1.Instance, card *registryv1.ModelCard) {
	defer close(w.maintDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stopMaint:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		w.mu.Lock()
		sess := w.sess
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
		}
		old := w.InstanceID()
		w.log.Error("registration lost; registering again", "instance", fmt.Sprintf("%x", old), "err", fmt.Sprint(sess.Err()))
		bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
		for {
			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			next, in, err := w.register(actx, want, card)
			acancel()
			if err == nil {
				w.mu.Lock()
				w.sess = next
				w.mu.Unlock()
				w.instance.Store(in)
				w.registrations.Add(1)
				// Routers of the JetStream plane know nothing of the new
				// instance's cache; say so before any other event of it
				// (unnumbered, and not in the local indexer: the engine
				// still holds its blocks). Core and direct routers ask the
				// new instance for its state instead.
				if w.cfg.KVEventsMode == kvevents.JetStream {
					w.kvMu.Lock()
					w.queue(&workerv1.KvEventBatch{InstanceId: in.InstanceId, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}}})
					w.kvMu.Unlock()
				}
				w.log.Info("worker registered again", "instance", fmt.Sprintf("%x", in.InstanceId), "previous_instance", fmt.Sprintf("%x", old))
				_ = sess.Close(context.Background()) // already lost: nothing to revoke
				break
			}
			if ctx.Err() != nil {
				return
			}
			wait := bo.Next()
			w.log.Warn("registering again failed; retrying", "err", err.Error(), "backoff", wait.String())
			if backoff.Sleep(ctx, wait) != nil {
				return
			}
		}
	}
}

// uploadTokenizer stores each tokenizer file under its sha256.
func (w *Worker) uploadTokenizer(ctx context.Context) ([]*registryv1.TokenizerArtifact, error) {
	var out []*registryv1.TokenizerArtifact
	for _, path := range w.cfg.Model.TokenizerFiles {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("worker: tokenizer file: %w", err)
		}
		name := filepath.Base(path)
		// The object name is content-addressed after upload; upload under a
		// per-file name first, keyed by the basename.
		info, err := w.bus.PutObject(ctx, wire.TokenizerBucket, wire.TokenizerObject(w.cfg.Model.Name, name), f, eventbusclient.PutObjectOptions{})
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("worker: upload %s: %w", name, err)
		}
		out = append(out, &registryv1.TokenizerArtifact{Name: name, Sha256: info.GetSha256(), Size: int64(info.GetSize()),
			ObjectKey: wire.TokenizerBucket + "/" + wire.TokenizerObject(w.cfg.Model.Name, name)})
	}
	return out, nil
}

// InstanceID is the registered instance id (the lease id). It changes when
// the worker registers again after its lease was lost.
func (w *Worker) InstanceID() uint64 { return w.instance.Load().GetInstanceId() }

// Instance is the current registration.
func (w *Worker) Instance() *registryv1.Instance { return w.instance.Load() }

// Registrations counts the worker's registrations: 1 after Start, one more
// each time it registered again after losing its lease.
func (w *Worker) Registrations() uint64 { return w.registrations.Load() }

// KVEventCounts returns how many KV events (events, not batches) the worker
// queued for publishing, how many of them the eventbus has acknowledged, and
// how many failed for good: refused by the eventbus (too large), not
// encodable, or still unpublished when the worker shut down. The rest are
// still on their way: the worker retries through eventbus and NATS outages
// for as long as it runs. Those a Config.DropKVEvent hook dropped count as
// published. A fault test compares published with what a router applied.
func (w *Worker) KVEventCounts() (queued, published, lost uint64) {
	return w.kvQueued.Load(), w.kvPublished.Load(), w.kvLost.Load()
}

// KVEventsWaiting is how many KV events are still to be published: queued
// and not yet acknowledged (nor failed), or waiting in the local ring for
// the publish buffer to drain. Events of a ring that overran while they
// waited do not count: they are not published (backfill goes on from the
// ring's oldest event), and routers rebuild from the worker's state. Zero
// once publishing has caught up; queued then stays put until the engine's
// next event, which a fault test needs before it compares queued with
// published (a router may have its index complete, from a rebuild, before
// the ring's backlog is published).
func (w *Worker) KVEventsWaiting() uint64 {
	// published and lost first: queued, read after them, is at least their sum.
	done := w.kvPublished.Load() + w.kvLost.Load()
	w.kvMu.Lock()
	defer w.kvMu.Unlock()
	waiting := w.kvQueued.Load() - done
	for _, b := range w.kvUnnumbered {
		waiting += uint64(len(b.Events))
	}
	for rank, from := range w.kvBacklog {
		waiting += w.kvIndex.held(rank, from)
	}
	return waiting
}

// KVEventsDropped is how many KV events found the publish buffer
// (Config.KVPublishBuffer) full and waited in the local ring instead; they
// are published from it once the buffer drains (and count in queued then),
// unless the ring no longer holds them, when routers rebuild from the
// worker's state.
func (w *Worker) KVEventsDropped() uint64 { return w.kvDropped.Load() }

// Session is the registry session of the current registration; its Expired
// and Done report a keep-alive that cannot reach the registry and a lost lease
// (after which the worker registers again on a new session).
func (w *Worker) Session() *registryclient.Session {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sess
}

// PublishKVEvents applies a batch of KV events to the local indexer (which
// numbers it when FirstEventId is 0) and, in the jetstream and core modes,
// queues it for publishing, in order. It does not block on the eventbus:
// when Config.KVPublishBuffer batches already wait, the batch is not
// published and routers fill the gap from the local indexer. Calls are
// serialized.
func (w *Worker) PublishKVEvents(b *workerv1.KvEventBatch) {
	if b == nil || len(b.Events) == 0 {
		return
	}
	w.kvMu.Lock()
	defer w.kvMu.Unlock()
	b.InstanceId = w.InstanceID()
	if w.kvIndex.Apply(b) {
		w.log.Warn("KV event ids do not follow on; the local ring restarts", "dp_rank", b.DpRank, "first_event_id", b.FirstEventId)
	}
	if !w.cfg.KVEventsMode.Published() {
		return
	}
	w.queue(b)
}

// queue hands a batch to the publisher; kvMu is held.
func (w *Worker) queue(b *workerv1.KvEventBatch) {
	if w.kvClosed {
		return
	}
	if len(w.kvBacklog) > 0 || len(w.kvUnnumbered) > 0 {
		// Events wait in the ring: this one joins them, so that a rank's
		// events are published in id order.
		w.deferToRing(b)
		return
	}
	select {
	case w.kv <- b:
		w.kvQueued.Add(uint64(len(b.Events)))
	case <-w.kvDone:
	default:
		w.log.Warn("KV event publish buffer full (the eventbus is away or slow): events wait in the local ring and are published from it once the buffer drains",
			"buffer_batches", cap(w.kv), "first_event_id", b.FirstEventId, "dp_rank", b.DpRank)
		w.deferToRing(b)
		select {
		case w.kvWake <- struct{}{}:
		default:
		}
	}
}

// deferToRing leaves a batch in the local ring, to be published from it by
// backfill; kvMu is held.
func (w *Worker) deferToRing(b *workerv1.KvEventBatch) {
	w.kvDropped.Add(uint64(len(b.Events)))
	if b.FirstEventId == 0 {
		w.kvUnnumbered = append(w.kvUnnumbered, b)
		return
	}
	if _, ok := w.kvBacklog[b.DpRank]; !ok {
		w.kvBacklog[b.DpRank] = b.FirstEventId
	}
}

// backfill publishes the events that found the buffer full from the local
// ring, in id order per rank, until it has caught up with the ring's newest
// event; from then on events are queued again. A rank whose ring no longer
// holds the first event waiting (a long outage of a busy engine) goes on
// from the ring's oldest event, leaving a gap before it that routers see
// and close by rebuilding the worker's blocks from its state. It runs on
// the publishing goroutine and returns batches to publish, at most max
// events each call.
func (w *Worker) backfill(max int) []*workerv1.KvEventBatch {
	w.kvMu.Lock()
	defer w.kvMu.Unlock()
	out := w.kvUnnumbered
	for _, b := range out {
		w.kvQueued.Add(uint64(len(b.Events)))
	}
	w.kvUnnumbered = nil
	for rank, from := range w.kvBacklog {
		b, last, err := w.kvIndex.Events(rank, from, max)
		if errors.Is(err, ErrOutOfRange) {
			// The ring overran while its events waited: publish what it
			// still holds. Routers see the gap at its oldest event and
			// rebuild this worker's blocks from its state. Skipping to the
			// newest events instead would leave the gap unseen until the
			// engine's next event, which an idle engine may never emit.
			oldest := w.kvIndex.oldest(rank)
			w.log.Warn("KV events waiting to be published are no longer in the local ring; publishing from the oldest it holds, routers rebuild this worker's blocks from its state",
				"dp_rank", rank, "from_event_id", from, "oldest_event_id", oldest)
			from = oldest
			b, last, err = w.kvIndex.Events(rank, from, max)
		}
		if err != nil {
			w.log.Warn("KV events waiting to be published cannot be read from the local ring; routers rebuild this worker's blocks from its state",
				"dp_rank", rank, "from_event_id", from, "err", err.Error())
			delete(w.kvBacklog, rank)
			continue
		}
		next := from + uint64(len(b.Events))
		if next > last {
			delete(w.kvBacklog, rank) // caught up: new events are queued
		} else {
			w.kvBacklog[rank] = next
		}
		if len(b.Events) > 0 {
			b.InstanceId = w.InstanceID()
			w.kvQueued.Add(uint64(len(b.Events)))
			out = append(out, b)
		}
		if len(w.kvBacklog) == 0 {
			w.log.Info("KV events waiting in the local ring caught up; queueing again", "dp_rank", rank, "last_event_id", last)
		}
	}
	return out
}

// SetLoad sets the function whose result is published every LoadInterval.
func (w *Worker) SetLoad(fn func() *workerv1.LoadMetrics) {
	w.SetRankLoads(func() []*workerv1.LoadMetrics { return []*workerv1.LoadMetrics{fn()} })
}

// SetRankLoads sets the function whose results, a report per data-parallel
// rank (each with its dp_rank), are published every LoadInterval, for a
// worker serving several ranks (Model.DataParallelSize). It replaces
// SetLoad's function. The worker's totals (requests_total and the token
// totals) go on the first report only, so that summing the reports counts
// them once.
func (w *Worker) SetRankLoads(fn func() []*workerv1.LoadMetrics) {
	w.loadMu.Lock()
	w.loadFn = fn
	w.loadMu.Unlock()
}

// publishKV publishes queued batches in order, several per eventbus call.
func (w *Worker) publishKV() {
	defer close(w.kvDone)
	pub := w.bus.NewPublisher(context.Background(), eventbusclient.PublisherOptions{Core: w.cfg.KVEventsMode == kvevents.Core})
	defer pub.Close()
	// Batches are pipelined (the publisher keeps up to 16 in flight, in
	// order); their acknowledgements are awaited here, apart, so that a
	// round trip to the eventbus does not hold the next batch back.
	type sentBatch struct {
		b     *eventbusclient.Batch
		n     uint64 // KV events in it
		loads int    // load reports in it
	}
	acks := make(chan sentBatch, 64)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		for sb := range acks {
			// No deadline: the publisher sends the batch again through
			// every eventbus and NATS outage; only a refusal for good or
			// the shutdown (kvCtx) ends the wait without it.
			if _, err := sb.b.Wait(w.kvCtx); err != nil {
				if sb.n > 0 {
					w.kvLost.Add(sb.n)
					w.log.Error("KV events not published", "err", err.Error())
				}
				if sb.loads > 0 {
					w.log.Warn("load not published", "err", err.Error(), "reports", sb.loads)
				}
			} else {
				w.kvPublished.Add(sb.n)
			}
		}
	}()
	defer func() {
		close(acks)
		<-acked
	}()
	subject := wire.KVEventsSubject(w.cfg.Namespace, w.cfg.Component)
	leads := kvLeads{}
	var lastSent time.Time
	behind := false // the last publish left batches waiting
	// load is a load report due (see loadRide): it goes out now, with
	// whatever KV batches wait.
	var load []*eventbusv1.Event
	for {
		iv := w.kvInterval(pub)
		w.kvPaced.Store(iv > 0)
		if iv > 0 && load == nil && !behind && !lastSent.IsZero() {
			// A load report waits out an interval the eventbus asked for;
			// one of KVPublishInterval (which can be long) it ends.
			load = w.waitKV(lastSent.Add(iv), iv > w.cfg.KVPublishInterval)
		}
		var batch []*workerv1.KvEventBatch
		if len(w.kv) == 0 {
			// The buffer drained: publish what waits in the ring first.
			batch = w.backfill(256)
		}
		behind = len(batch) > 0
		if len(batch) == 0 && load == nil {
			select {
			case b, ok := <-w.kv:
				if !ok {
					return
				}
				batch = append(batch, b)
			case <-w.kvWake:
				continue
			case load = <-w.loadRide:
			}
		}
	more:
		for len(batch) < 256 {
			select {
			case nb, ok := <-w.kv:
				if !ok {
					break more
				}
				batch = append(batch, nb)
			default:
				break more
			}
		}
		behind = behind || len(batch) >= 256
		if w.cfg.DropKVEvent != nil {
			kept := batch[:0]
			for _, kb := range batch {
				if w.cfg.DropKVEvent(kb) {
					w.kvPublished.Add(uint64(len(kb.Events)))
				} else {
					kept = append(kept, kb)
				}
			}
			batch = kept
		}
		if w.kvInterval(pub) > 0 {
			batch = mergeKVRuns(batch, maxMergedKVBytes)
			lastSent = time.Now()
		}
		events := make([]*eventbusv1.Event, 0, len(batch))
		var n uint64 // KV events in events
		// send publishes events (pipelined) and starts over; it returns
		// the eventbus batch, nil when there was nothing to send or it
		// failed.
		loads := 0 // load reports in events, after the KV events
		send := func() *eventbusclient.Batch {
			if len(events) == 0 {
				return nil
			}
			// Send waits while 16 batches are unacknowledged: the buffer
			// (w.kv) fills meanwhile, and beyond it events wait in the ring.
			sent, err := pub.Send(w.kvCtx, events)
			if err != nil {
				w.kvLost.Add(n)
				w.log.Error("KV events not published", "events", len(events)-loads, "load_reports", loads, "err", err.Error())
			} else {
				acks <- sentBatch{sent, n, loads}
			}
			events, n, loads = make([]*eventbusv1.Event, 0, len(batch)), 0, 0
			return sent
		}
		for _, kb := range batch {
			id := wire.KVEventsMsgID(kb.InstanceId, kb.DpRank, kb.FirstEventId)
			ev, err := eventbusclient.NewEvent(subject, kb, eventbusclient.WithMsgID(id))
			if err != nil {
				w.kvLost.Add(uint64(len(kb.Events)))
				w.log.Error("cannot encode KV events", "err", err.Error())
				continue
			}
			lead := leads.first(kb)
			if lead {
				send() // what came before it, of other ranks or instances
			}
			events = append(events, ev)
			n += uint64(len(kb.Events))
			if lead {
				// Nothing more is sent until the stream has this batch, so
				// that nothing of its rank can be stored before it.
				if sent := send(); sent != nil {
					_, _ = sent.Wait(w.kvCtx) // the acknowledging goroutine counts it
				}
			}
		}
		if load == nil && w.loadRide != nil {
			// A report that fell due meanwhile goes with these.
			select {
			case load = <-w.loadRide:
			default:
			}
			if load != nil && len(w.kv) > 0 {
				// Batches were queued meanwhile too (while a leading
				// batch's acknowledgement was awaited): the report goes
				// after them, in the next round, which does not wait.
				send()
				continue
			}
		}
		events, loads, load = append(events, load...), len(load), nil
		send()
	}
}

// kvInterval is the least time between two KV publishes: the configured
// KVPublishInterval, or the longer one the eventbus asks for while its
// publishers together send more batches than it takes at its target rate.
func (w *Worker) kvInterval(pub *eventbusclient.Publisher) time.Duration {
	return max(w.cfg.KVPublishInterval, pub.Interval())
}

// kvLeads tells the batches that must be in the stream before any later
// batch of their worker (instance and dp rank) is sent: the first one of
// each, and the first numbered one (after a re-registration's unnumbered
// cleared event).
//
// The eventbus pipelines a worker's batches to JetStream, and while a
// replicated stream starts, or changes leader, an event can be lost in
// flight (or answered "no responders") while a later one is stored; the lost
// one is stored when the eventbus publishes it again, after the later one
// (seen while a 3-node cluster started slowly: a worker's first 11 events
// stored after its 12th to 16th). A router fills such a gap from the
// worker's ring when it sees the later event, but only past an event of the
// worker it has seen: the first event it sees of a worker is where that
// worker starts for it, and what comes later with lower ids is taken for
// duplicates. So the first event must be stored first; after it, a
// reordering is a gap that routers fill.
type kvLeads map[kvWorker]uint8

// kvWorker is a worker's instance and dp rank: whose event ids run on.
type kvWorker struct {
	instance uint64
	rank     uint32
}

// first reports whether b leads its worker (see kvLeads) and records it.
func (l kvLeads) first(b *workerv1.KvEventBatch) bool {
	const seen, numbered = 1, 2
	k := kvWorker{b.InstanceId, b.DpRank}
	st := l[k]
	switch {
	case st&numbered != 0:
		return false
	case b.FirstEventId != 0:
		l[k] = st | seen | numbered
		return true
	case st&seen != 0:
		return false
	default:
		l[k] = seen
		return true
	}
}

// publishLoad publishes the load reports every LoadInterval, those of all
// ranks in one batch, on a publishing stream of its own: a message on a
// stream costs the eventbus a fraction of a unary call (a call is a new
// HTTP/2 stream, its headers and the server's interceptors each time), and a
// fleet sends one a second per worker. Each batch is awaited, up to 2 s, as
// the unary call was; one not acknowledged by then stays in the stream's
// order and goes out again after a reconnect, before the newer ones (a
// router keeps the last report, so the newest still wins). While the KV
// batches are held for an interval (KVPublishInterval, or one the eventbus
// asked for) the reports go to the KV publisher instead (loadRide), which
// sends each in one message with the KV batches it holds, at once with
// KVPublishInterval, at the interval's end with one the eventbus asked for
// (at most 1 s later): a worker then sends one message where it sent two.
func (w *Worker) publishLoad() {
	defer close(w.loadDone)
	var pub *eventbusclient.Publisher // opened on the first report that does not ride
	defer func() {
		if pub != nil {
			pub.Close()
		}
	}()
	subject := wire.LoadSubject(w.cfg.Namespace, w.cfg.Component)
	t := time.NewTicker(w.cfg.LoadInterval)
	defer t.Stop()
	var same LoadSampler
	for {
		var now time.Time
		select {
		case <-w.stopLoad:
			return
		case now = <-t.C:
		}
		w.loadMu.Lock()
		fn := w.loadFn
		w.loadMu.Unlock()
		if fn == nil {
			continue
		}
		ms := fn()
		events := make([]*eventbusv1.Event, 0, len(ms))
		for i, m := range ms {
			m.InstanceId = w.InstanceID()
			if i == 0 {
				m.RequestsTotal, m.PromptTokensTotal, m.OutputTokensTotal = w.requests.Load(), w.promptTokens.Load(), w.outputTokens.Load()
				m.CachedPromptTokensTotal = w.cachedTokens.Load()
				m.ComputedPromptRequestsTotal = make([]uint64, len(w.computed))
				for i := range w.computed {
					m.ComputedPromptRequestsTotal[i] = w.computed[i].Load()
				}
			}
			ev, err := eventbusclient.NewEvent(subject, m)
			if err != nil {
				w.log.Warn("load not published", "err", err.Error(), "dp_rank", m.GetDpRank())
				continue
			}
			events = append(events, ev)
		}
		// The heartbeat is reached at the tick nearest to it.
		if len(events) == 0 || !same.Due(now, w.cfg.LoadHeartbeat-w.cfg.LoadInterval/2, ms) {
			continue
		}
		if w.loadRide != nil && w.kvPaced.Load() {
			// The KV publisher sends it at once with the KV batches it
			// holds; a report it has not taken yet is replaced.
			select {
			case <-w.loadRide:
			default:
			}
			select {
			case w.loadRide <- events:
			default:
			}
			same.Published(now)
			continue
		}
		if pub == nil {
			pub = w.bus.NewPublisher(context.Background(), eventbusclient.PublisherOptions{MaxInFlight: loadInFlight})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		b, err := pub.Send(ctx, events)
		if err == nil {
			_, err = b.Wait(ctx)
		}
		if err != nil {
			w.log.Warn("load not published", "err", err.Error(), "reports", len(events))
		} else {
			same.Published(now)
		}
		cancel()
	}
}

// DefaultLoadHeartbeat is Config.LoadHeartbeat's default. A router counts
// a report's requests for 5 s after it receives it (its report freshness,
// scheduler.ReportTTL), and a planner reads reports up to three of its
// intervals old: at 2 s, below half of the router's 5 s, an unchanged
// worker's load stays counted even when one report is lost or late. A
// fleet of idle workers then sends half the reports it sent at 1 s; a busy
// worker's load changes every interval and is published every interval.
const DefaultLoadHeartbeat = 2 * time.Second

// loadInFlight bounds the load batches sent and not acknowledged: past it
// (the eventbus away for as many intervals) a report is skipped, not
// queued behind older ones.
const loadInFlight = 4

// handler adapts a Handler to the request plane.
func (w *Worker) handler(h Handler) transport.Handler {
	return func(ctx context.Context, req *transport.Request, rw transport.ResponseWriter) error {
		gr := &workerv1.GenerateRequest{}
		if err := proto.Unmarshal(req.Payload, gr); err != nil {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("%v: %v", ErrInvalidRequest, err)}
		}
		if gr.RequestId == "" {
			gr.RequestId = req.Headers[transport.HeaderRequestID]
		}
		if p := w.cfg.KVPublisher; p != nil {
			if err := p.admit(); err != nil {
				return err
			}
		}
		w.requests.Add(1)
		w.promptTokens.Add(uint64(len(gr.TokenIds)))
		// The worker's span of the request, a child of the caller's (the
		// request plane carried its trace context); the engine's spans
		// (queue, prefill) nest in it.
		ctx, span := tracer.Start(ctx, "worker.generate", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("switchyard.request_id", gr.RequestId),
				attribute.Int("switchyard.prompt_tokens", len(gr.TokenIds)),
				attribute.String("switchyard.instance_id", fmt.Sprintf("%x", w.InstanceID()))))
		defer span.End()
		var buf []byte
		sent := 0
		// A response may repeat the request's usage: its cached prompt
		// tokens count once, at the most any response said.
		var cached uint32
		err := h(ctx, gr, func(resp *workerv1.GenerateResponse) error {
			if c := min(resp.GetUsage().GetCachedPromptTokens(), uint32(len(gr.TokenIds))); c > cached {
				w.cachedTokens.Add(uint64(c - cached))
				cached = c
			}
			var err error
			buf, err = proto.MarshalOptions{}.MarshalAppend(buf[:0], resp)
			if err != nil {
				return err
			}
			sent += len(resp.GetTokenIds())
			w.outputTokens.Add(uint64(len(resp.GetTokenIds())))
			return rw.Send(buf)
		})
		w.computed[wire.ComputedPromptBucket(len(gr.TokenIds)-int(cached))].Add(1)
		span.SetAttributes(attribute.Int("switchyard.output_tokens", sent))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
		}
		return err
	}
}

// embedHandler adapts an EmbedHandler to the request plane: the request
// decoded, its answer checked (one embedding per input) and sent as one
// message.
func (w *Worker) embedHandler(h EmbedHandler) transport.Handler {
	return func(ctx context.Context, req *transport.Request, rw transport.ResponseWriter) error {
		er := &workerv1.EmbedRequest{}
		if err := proto.Unmarshal(req.Payload, er); err != nil {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("%v: %v", ErrInvalidRequest, err)}
		}
		if er.RequestId == "" {
			er.RequestId = req.Headers[transport.HeaderRequestID]
		}
		if len(er.Inputs) == 0 {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("%v: no inputs", ErrInvalidRequest)}
		}
		ctx, span := tracer.Start(ctx, "worker.embed", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("switchyard.request_id", er.RequestId), attribute.Int("switchyard.inputs", len(er.Inputs))))
		defer span.End()
		resp, err := h(ctx, er)
		if err == nil && len(resp.GetEmbeddings()) != len(er.Inputs) {
			err = fmt.Errorf("worker: %d embeddings for %d inputs", len(resp.GetEmbeddings()), len(er.Inputs))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
			return err
		}
		w.requests.Add(1)
		w.promptTokens.Add(uint64(resp.GetPromptTokens()))
		b, err := proto.Marshal(resp)
		if err != nil {
			return err
		}
		return rw.Send(b)
	}
}

// tracer makes the worker's spans; a no-op until the process installs a
// tracer provider (obs.SetupTracing).
var tracer = otel.Tracer("github.com/switchyard-llm/switchyard/pkg/worker")

// Shutdown deregisters (routers stop sending at once), lets in-flight
// requests finish within DrainTimeout (or ctx), flushes the KV events and
// closes every connection. It is idempotent.
func (w *Worker) Shutdown(ctx context.Context) error {
	var errs []error
	w.closed.Do(func() {
		w.log.Info("worker shutting down: deregistering, then draining", "drain_timeout", w.cfg.DrainTimeout.String())
		close(w.stopMaint)
		<-w.maintDone
		if err := w.Session().Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("deregister: %w", err))
		}
		dctx, cancel := context.WithTimeout(ctx, w.cfg.DrainTimeout)
		if err := w.server.Drain(dctx); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
		cancel()
		_ = w.server.Close()
		close(w.stopLoad)
		<-w.loadDone
		w.kvMu.Lock()
		close(w.kv)
		close(w.kvClosing)
		w.kvClosed = true
		w.kvMu.Unlock()
		select {
		case <-w.kvDone:
		case <-time.After(kvFlushTimeout):
		case <-ctx.Done():
		}
		w.kvCancel() // what is left is not published
		<-w.kvDone
		w.stopAPI()
		if err := <-w.apiDone; err != nil {
			errs = append(errs, fmt.Errorf("worker API: %w", err))
		}
		_ = w.bus.Close()
		_ = w.reg.Close()
	})
	return errors.Join(errs...)
}

// Run starts a worker and serves until ctx ends (SIGTERM in a main), then
// shuts down. A lost lease does not end it: the worker registers again.
func Run(ctx context.Context, cfg Config, h Handler, ready func(*Worker)) error {
	w, err := Start(ctx, cfg, h)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(w)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), w.cfg.DrainTimeout+10*time.Second)
	defer cancel()
	return w.Shutdown(sctx)
}

// TokenizerFiles lists the tokenizer files a model directory holds
// (tokenizer.json or tokenizer.json.gz, and tokenizer_config.json), for
// Model.TokenizerFiles. A directory without tokenizer.json is an error.
func TokenizerFiles(dir string) ([]string, error) {
	var out []string
	for _, name := range []string{"tokenizer.json", "tokenizer.json.gz", "tokenizer_config.json"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 || filepath.Base(out[0]) == "tokenizer_config.json" {
		return nil, fmt.Errorf("worker: tokenizer directory %s has no tokenizer.json", dir)
	}
	return out, nil
}
