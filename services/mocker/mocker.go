// Package mocker is a simulated LLM worker: the mocker engine (a paged KV
// cache with prefix caching and eviction, continuous batching, and vLLM's
// timing) paced in real time behind the worker SDK, so that the whole system
// runs and is tested without GPUs. It registers like any worker, serves
// generate on the request plane and publishes real KV events and load.
package mocker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/reasoning"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/simengine/realtime"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/toolcall"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// Config is the mocker's configuration.
type Config struct {
	Namespace, Component, Endpoint string
	ModelName                      string
	ContextLength                  int
	TokenizerDir                   string
	// ToolCallParser and ReasoningParser go on the model card (the
	// built-in Qwen3 model writes both in the qwen3 form).
	ToolCallParser, ReasoningParser string
	Engine                          simengine.Config
	NoDelay                         bool
	DefaultMaxTokens                int
	// OutputText is what answers read from (tokenized with the model's
	// tokenizer); empty generates random ordinary tokens.
	OutputText string
	// ProcessConfig: the registry and eventbus, lease, drain, request
	// plane, KV event flags, and MetricsAddr (the switchyard_engine_*
	// metrics) and DebugAddr.
	worker.ProcessConfig
	// OnMetricsAddr, when set, learns the bound --metrics-addr (tests that
	// listen on port 0).
	OnMetricsAddr func(net.Addr)
	// DropKVEvent is worker.Config.DropKVEvent (a test hook).
	DropKVEvent func(*workerv1.KvEventBatch) bool
	// HandoffTimeout is how long a prefill leg's KV blocks stay held for
	// the decode leg after its answer (--handoff-timeout).
	HandoffTimeout time.Duration
	// KVTransferGbps is the link a decode leg's KV arrives over, in
	// gigabits per second (--kv-transfer-gbps); 0 arrives at once.
	KVTransferGbps float64
	// KVBytesPerToken is the size of one token's KV (--kv-bytes-per-token).
	KVBytesPerToken int
	// KVPullTimeout bounds a decode leg's pull of its KV from the prefill
	// worker (--kv-pull-timeout).
	KVPullTimeout time.Duration
	// OnHandoffEnd, when set, is told how each held handoff ended (a test
	// hook).
	OnHandoffEnd func(id string, end realtime.HandoffEnd, blocks int)
	// EmbeddingDimensions, when positive, serves embeddings of that many
	// dimensions beside generation (--embedding-dimensions; embed.go).
	EmbeddingDimensions int
	// LoRAs are the LoRA adapters it serves (--loras, a comma list of
	// names), in Engine.MaxLoras slots (--max-loras) loaded in
	// Engine.LoraLoadMs (--lora-load-ms).
	LoRAs []string
	// DataParallelSize is how many data-parallel ranks it serves
	// (--data-parallel-size): as many simulated engines, each with its own
	// KV cache (of Engine's size), queue and batch, its KV events and load
	// reports tagged with its rank. A request's dp_rank chooses the engine.
	DataParallelSize int
}

// maxDataParallelSize bounds --data-parallel-size, as the registry bounds
// a card's data_parallel_size.
const maxDataParallelSize = 1024

// DefaultLoraLoadMs is --lora-load-ms' default: the load time routers
// assume of a worker that publishes none.
const DefaultLoraLoadMs = timingmodel.DefaultLoraLoadMs

// validLoRAs checks --loras against --max-loras: adapters need slots,
// slots need adapters, and each name is one a model card may list (the
// registry's rules: 1..256 bytes, no control character), unique and not
// the model's.
func (c Config) validLoRAs() error {
	if len(c.LoRAs) > 0 && c.Engine.MaxLoras == 0 {
		return fmt.Errorf("--loras needs --max-loras > 0")
	}
	if len(c.LoRAs) == 0 && c.Engine.MaxLoras > 0 {
		return fmt.Errorf("--max-loras %d needs --loras", c.Engine.MaxLoras)
	}
	if len(c.LoRAs) > simengine.MaxLoras {
		return fmt.Errorf("--loras lists %d adapters, more than %d", len(c.LoRAs), simengine.MaxLoras)
	}
	for i, n := range c.LoRAs {
		if len(n) > simengine.MaxLoRALen || strings.ContainsFunc(n, unicode.IsControl) || !utf8.ValidString(n) {
			return fmt.Errorf("--loras: adapter %q must be at most %d bytes of UTF-8 without control characters", n, simengine.MaxLoRALen)
		}
		if n == c.ModelName || slices.Contains(c.LoRAs[:i], n) {
			return fmt.Errorf("--loras: adapter %q is listed twice or is the model's name", n)
		}
	}
	return nil
}

// DefaultEmbeddingDimensions is --embedding-dimensions' default: 1,024, the
// size of Qwen3-Embedding-0.6B's vectors, the embedding model of the
// mocker's default model family.
const DefaultEmbeddingDimensions = 1024

// maxEmbeddingDimensions bounds --embedding-dimensions (the largest
// embedding models' vectors are 4,096 wide).
const maxEmbeddingDimensions = 16384

// EnvVars maps flags to their environment variables.
var EnvVars = worker.ProcessEnvVars()

// RegisterFlags adds the mocker's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Engine = simengine.DefaultConfig()
	fs.StringVar(&c.Namespace, "namespace", "dynamo", "registry namespace")
	fs.StringVar(&c.Component, "component", "backend", "registry component")
	fs.StringVar(&c.Endpoint, "endpoint", wire.GenerateEndpoint, "registry endpoint")
	fs.StringVar(&c.ModelName, "model-name", qwen3.ModelName, "model name served")
	fs.IntVar(&c.ContextLength, "context-length", 40960, "context length of the model card")
	fs.StringVar(&c.TokenizerDir, "tokenizer-dir", "", "directory with tokenizer.json(.gz) and tokenizer_config.json; empty: the built-in Qwen3 tokenizer")
	worker.RegisterParserFlags(fs, &c.ToolCallParser, &c.ReasoningParser, toolcall.Qwen3, reasoning.Qwen3)
	fs.IntVar(&c.Engine.BlockSize, "block-size", c.Engine.BlockSize, "KV block size in tokens")
	fs.IntVar(&c.Engine.NumGPUBlocks, "num-gpu-blocks", c.Engine.NumGPUBlocks, "KV blocks of the simulated GPU")
	fs.IntVar(&c.Engine.NumHostBlocks, "host-kv-blocks", c.Engine.NumHostBlocks, "KV blocks of a host-memory tier: blocks evicted from the GPU go there (published as stores on medium cpu) and a later prefix hit loads them back at the published CPU load time instead of recomputing them; 0: none")
	fs.IntVar(&c.Engine.MaxNumSeqs, "max-num-seqs", c.Engine.MaxNumSeqs, "most requests running at once")
	fs.IntVar(&c.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", c.Engine.MaxNumBatchedTokens, "most tokens per step")
	fs.Float64Var(&c.Engine.SpeedupRatio, "speedup-ratio", 1.0, "divides every simulated duration; 0 runs as fast as possible")
	fs.BoolVar(&c.NoDelay, "no-delay", false, "run as fast as possible (same as --speedup-ratio 0)")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", 256, "tokens generated when a request sets no max_tokens")
	fs.StringVar(&c.OutputText, "output-text", defaultOutputText, "text answers are read from, at a position each prompt picks (empty: random tokens)")
	fs.DurationVar(&c.HandoffTimeout, "handoff-timeout", 30*time.Second, "how long a prefill leg's KV blocks stay held for its decode leg before they are freed")
	fs.Float64Var(&c.KVTransferGbps, "kv-transfer-gbps", DefaultKVTransferGbps, "gigabits per second a decode leg's KV arrives at from the prefill worker (divided like every duration by --speedup-ratio; 0: at once)")
	fs.IntVar(&c.KVBytesPerToken, "kv-bytes-per-token", DefaultKVBytesPerToken, "bytes of KV per token, for the transfer time (default: Qwen/Qwen3-0.6B in bf16)")
	fs.DurationVar(&c.KVPullTimeout, "kv-pull-timeout", 5*time.Second, "bound on a decode leg's call that takes its KV from the prefill worker")
	fs.IntVar(&c.EmbeddingDimensions, "embedding-dimensions", DefaultEmbeddingDimensions, "serve /v1/embeddings with vectors of this many dimensions, made up from the tokens (0: generation only)")
	fs.Func("loras", "comma list of the LoRA adapters served on the model (each listed by /v1/models with the model as parent; needs --max-loras)", func(v string) error {
		c.LoRAs = nil
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				c.LoRAs = append(c.LoRAs, n)
			}
		}
		return nil
	})
	fs.IntVar(&c.Engine.MaxLoras, "max-loras", c.Engine.MaxLoras, "LoRA adapters held loaded at once (vLLM's --max-loras); a request whose adapter finds no slot waits")
	fs.IntVar(&c.DataParallelSize, "data-parallel-size", 1, "data-parallel ranks served (vLLM's --data-parallel-size): each an engine of its own with --num-gpu-blocks, its KV events and load published under its rank; a request's dp_rank picks the engine")
	fs.Float64Var(&c.Engine.LoraLoadMs, "lora-load-ms", DefaultLoraLoadMs, "milliseconds to load a LoRA adapter into a slot (divided like every duration by --speedup-ratio), published in the timing model")
	c.ProcessConfig.RegisterFlags(fs)
}

// Complete fills what other settings imply (--no-delay is speed-up 0),
// reads the request plane from DYN_REQUEST_PLANE and friends unless
// Transport is set, and reads the token and TLS files. Run calls it, then
// Validate.
func (c *Config) Complete() error {
	if c.NoDelay {
		c.Engine.SpeedupRatio = 0
	}
	return c.ProcessConfig.Complete()
}

// Validate checks the configuration; it reads nothing and changes nothing.
func (c Config) Validate() error {
	if c.Engine.SpeedupRatio < 0 {
		return fmt.Errorf("--speedup-ratio %v must not be negative", c.Engine.SpeedupRatio)
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if err := c.validLoRAs(); err != nil {
		return err
	}
	if c.HandoffTimeout <= 0 || c.KVPullTimeout <= 0 {
		return fmt.Errorf("--handoff-timeout %v and --kv-pull-timeout %v must be positive", c.HandoffTimeout, c.KVPullTimeout)
	}
	if c.KVTransferGbps < 0 || c.KVTransferGbps != c.KVTransferGbps || c.KVBytesPerToken < 1 {
		return fmt.Errorf("--kv-transfer-gbps %v must not be negative and --kv-bytes-per-token %d must be positive", c.KVTransferGbps, c.KVBytesPerToken)
	}
	if c.DataParallelSize < 0 || c.DataParallelSize > maxDataParallelSize {
		return fmt.Errorf("--data-parallel-size %d must be between 1 and %d (0 is 1)", c.DataParallelSize, maxDataParallelSize)
	}
	if r := c.Disagg.Role(); c.DataParallelSize > 1 && (r == commonv1.Role_ROLE_PREFILL || r == commonv1.Role_ROLE_DECODE) {
		return fmt.Errorf("--data-parallel-size %d goes with --disaggregation-mode agg only (the mock KV handoff serves one engine)", c.DataParallelSize)
	}
	if c.EmbeddingDimensions < 0 || c.EmbeddingDimensions > maxEmbeddingDimensions {
		return fmt.Errorf("--embedding-dimensions %d must be between 0 and %d", c.EmbeddingDimensions, maxEmbeddingDimensions)
	}
	if c.ModelName == "" || c.ContextLength < 1 || c.DefaultMaxTokens < 1 {
		return errors.New("--model-name, a positive --context-length and --default-max-tokens are required")
	}
	if err := toolcall.Validate(c.ToolCallParser); err != nil {
		return fmt.Errorf("--tool-call-parser: %w", err)
	}
	if err := reasoning.Validate(c.ReasoningParser); err != nil {
		return fmt.Errorf("--reasoning-parser: %w", err)
	}
	return c.ProcessConfig.Validate()
}

// builtinTokenizer loads the built-in Qwen3 tokenizer once per process:
// mockers of one process (the tests') share it, as it is safe for
// concurrent use, and loading it takes a second (ten under -race).
var builtinTokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	tmp, err := os.MkdirTemp("", "mocker-tokenizer-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	files, err := qwen3.WriteTo(tmp)
	if err != nil {
		return nil, err
	}
	return tokenizer.Load(files[0])
})

func (c *Config) tokenizerFiles(tmp string) ([]string, error) {
	if c.TokenizerDir == "" {
		return qwen3.WriteTo(tmp)
	}
	return worker.TokenizerFiles(c.TokenizerDir)
}

// Run serves as a worker until ctx ends, then deregisters and drains.
// ready, when set, is called once the worker is registered.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready func(*worker.Worker)) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mocker-tokenizer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	files, err := cfg.tokenizerFiles(tmp)
	if err != nil {
		return err
	}
	loadTokenizer := tokenizer.Load
	if cfg.TokenizerDir == "" {
		loadTokenizer = func(string) (*tokenizer.Tokenizer, error) { return builtinTokenizer() }
	}
	tok, err := loadTokenizer(files[0])
	if err != nil {
		return fmt.Errorf("load tokenizer: %w", err)
	}
	if cfg.OutputText != "" {
		cfg.Engine.OutputText = tok.Encode(cfg.OutputText)
	}
	ranks := max(cfg.DataParallelSize, 1)
	engines := make([]*simengine.Engine, ranks)
	for i := range engines {
		if engines[i], err = simengine.New(cfg.Engine); err != nil {
			return err
		}
	}
	wcfg := worker.Config{
		Namespace: cfg.Namespace, Component: cfg.Component, Endpoint: cfg.Endpoint,
		Model: worker.Model{Name: cfg.ModelName, BlockSize: uint32(cfg.Engine.BlockSize), ContextLength: uint32(cfg.ContextLength), TokenizerFiles: files,
			ToolCallParser: cfg.ToolCallParser, ReasoningParser: cfg.ReasoningParser, MaxLoRAs: uint32(cfg.Engine.MaxLoras)},
		Log: log, DropKVEvent: cfg.DropKVEvent,
	}
	for _, n := range cfg.LoRAs {
		wcfg.Model.LoRAs = append(wcfg.Model.LoRAs, worker.LoRA{Name: n})
	}
	if cfg.EmbeddingDimensions > 0 {
		wcfg.Embed = embedder{dims: cfg.EmbeddingDimensions}.handle
	}
	// Apply loads the token and TLS files: before anything starts.
	if err := cfg.ProcessConfig.Apply(&wcfg); err != nil {
		return err
	}
	// A prefill or decode mocker hands KV over by the mock transfer, from
	// its WorkerService (the SDK registers that address).
	if r := wcfg.Role; r == commonv1.Role_ROLE_PREFILL || r == commonv1.Role_ROLE_DECODE {
		wcfg.KVTransfer = &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, DataParallelSize: 1}
	}
	if ranks > 1 {
		wcfg.Model.DataParallelSize = uint32(ranks)
	}
	var w atomic.Pointer[worker.Worker]
	loads := make([]atomic.Pointer[workerv1.LoadMetrics], ranks)
	// The mocker publishes the model it simulates by, so that routers
	// predict its times exactly: its engine's steps, and no overhead of
	// a request outside them, since it adds none (the frontend, request
	// plane and tokenizer in front of it are that overhead, and a router
	// learns their time from the first tokens it is told of).
	timing := cfg.Engine.Timing().EngineOnly()
	// The engine's KV events go through the SDK's publisher from the first
	// request on: those of requests served before worker.Start returns are
	// published at the registration, first and in order, under the
	// registered instance id (see worker.KVPublisher). Its instance id and
	// refusals once it is full are the SDK's.
	kvPub := worker.NewKVPublisher(0, log)
	wcfg.KVPublisher = kvPub
	// Until its first step, an engine reports itself idle, with its
	// timing model: a router that had no model of it would predict with
	// the default (an H100's, which a slowed mocker is not).
	idle := engines[0].Metrics()
	// A runner per rank, each publishing its events and load under its
	// rank.
	runners := make([]*realtime.Runner, ranks)
	for i, e := range engines {
		rank := uint32(i)
		runners[i] = realtime.New(e, realtime.Options{
			OnEvents: func(events []simengine.Event) {
				b, err := simengine.BatchProto(0, rank, events)
				if err != nil {
					log.Error("KV events out of order", "err", err.Error(), "dp_rank", rank)
					return
				}
				_ = kvPub.Publish(b) // a batch past its limit is logged there
			},
			OnMetrics: func(m simengine.Metrics, at time.Time) {
				if wk := w.Load(); wk != nil {
					loads[rank].Store(m.Proto(wk.InstanceID(), rank, at, timing))
				}
			},
			HandoffTimeout: cfg.HandoffTimeout,
			OnHandoffEnd: func(id string, end realtime.HandoffEnd, blocks int) {
				if end == realtime.HandoffTimedOut {
					log.Warn("KV handoff not taken in time: blocks freed", "handoff_id", id, "blocks", blocks, "handoff_timeout", cfg.HandoffTimeout.String())
				}
				if cfg.OnHandoffEnd != nil {
					cfg.OnHandoffEnd(id, end, blocks)
				}
			},
		})
	}
	// Disaggregated legs run on rank 0, the only one (Validate).
	runner := runners[0]
	wcfg.KVHandoffs = handoffs{runner}
	pull := newPuller(grpcclient.Options{Credentials: wcfg.Credentials, Token: wcfg.Token, Log: log}, cfg.KVPullTimeout)
	defer pull.close()
	l := &legs{cfg: cfg, r: runner, self: w.Load, puller: pull}
	stopMetrics, err := serveMetrics(ctx, cfg, runners, loads, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	g, gctx := errgroup.WithContext(ctx)
	engineCtx, stopEngine := context.WithCancel(context.Background())
	for _, r := range runners {
		g.Go(func() error { return r.Run(engineCtx) })
	}
	log.Info("mocker starting", "model", cfg.ModelName, "block_size", cfg.Engine.BlockSize, "num_gpu_blocks", cfg.Engine.NumGPUBlocks, "host_kv_blocks", cfg.Engine.NumHostBlocks,
		"data_parallel_size", ranks,
		"speedup_ratio", cfg.Engine.SpeedupRatio, "request_plane", string(cfg.Transport.Plane), "kv_events_mode", cfg.KV.Mode)
	g.Go(func() error {
		defer stopEngine() // after the worker has drained
		return worker.Run(gctx, wcfg, generate(runners, cfg.DefaultMaxTokens, newPlayer(tok), l, cfg.LoRAs), func(wk *worker.Worker) {
			w.Store(wk)
			wk.SetRankLoads(func() []*workerv1.LoadMetrics {
				out := make([]*workerv1.LoadMetrics, ranks)
				for i := range out {
					if out[i] = loads[i].Load(); out[i] == nil {
						out[i] = idle.Proto(wk.InstanceID(), uint32(i), time.Now(), timing)
					}
				}
				return out
			})
			if ready != nil {
				ready(wk)
			}
		})
	})
	return g.Wait()
}

// generate serves requests from the engine of their data-parallel rank (one
// runner per rank), cancelling the engine's request when the caller goes
// away. The player scripts how answers start; l serves the legs of
// disaggregated requests.
func generate(runners []*realtime.Runner, defaultMaxTokens int, pl *player, l *legs, loras []string) worker.Handler {
	vocab := uint32(pl.tok.VocabSize())
	return func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
		er, err := simengine.RequestFromProto(req, defaultMaxTokens)
		if err != nil {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
		}
		if int64(req.GetDpRank()) >= int64(len(runners)) {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument,
				Message: fmt.Sprintf("dp_rank %d is out of range: this worker serves %d data-parallel rank(s), 0 to %d", req.GetDpRank(), len(runners), len(runners)-1)}
		}
		r := runners[req.GetDpRank()]
		if er.LoRA != "" && !slices.Contains(loras, er.LoRA) {
			// A router sends an adapter only to workers whose card lists
			// it: this one was called directly.
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("LoRA adapter %q is not served here", er.LoRA)}
		}
		if req.Logprobs != nil && req.GetLogprobs() > 20 {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "logprobs must be at most 20"}
		}
		if req.PromptLogprobs != nil && req.GetPromptLogprobs() > 20 {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "prompt_logprobs must be at most 20"}
		}
		// The prompt's log probabilities go out with the first response,
		// before any generated token's; the first token has none.
		var promptLogprobs []*workerv1.TokenLogprob
		if req.PromptLogprobs != nil && len(req.TokenIds) > 1 {
			promptLogprobs = logprobs(req.TokenIds[1:], 1, req.GetPromptLogprobs(), vocab)
		}
		if g := req.GetGuidedDecoding(); g != nil {
			text, err := guidedAnswer(g)
			if err != nil {
				return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
			}
			er.Script, er.ScriptEnds = pl.structured(er.Prompt, text), true
		} else {
			er.Script, er.ScriptEnds = pl.script(er.Prompt)
		}
		handoff, err := l.prepare(req, &er)
		if err != nil {
			return err
		}
		generated := 0
		submitted := time.Now()
		stream, err := r.Submit(er)
		if err != nil {
			if errors.Is(err, simengine.ErrRequestTooLarge) || errors.Is(err, simengine.ErrDuplicateRequest) {
				return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
			}
			return err
		}
		if handoff != nil {
			if err := l.takeKV(ctx, r, stream, er.ID, handoff); err != nil {
				_ = r.Cancel(er.ID)
				return err
			}
		}
		first := true
		for {
			out, err := stream.Recv(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				_ = r.Cancel(er.ID)
				return err
			}
			if first {
				first = false
				engineSpans(ctx, submitted, stream.AdmittedAt(), time.Now(), out.Usage)
			}
			if out.Finish == simengine.FinishHeld {
				// A prefill leg's one answer; an undelivered one frees
				// the blocks it held.
				resp, err := l.prefillResponse(er.ID, out, l.self())
				if err == nil {
					err = send(resp)
				}
				if err != nil {
					_ = r.Cancel(er.ID)
					return err
				}
				continue
			}
			resp := out.Proto()
			resp.PromptLogprobs, promptLogprobs = promptLogprobs, nil
			if req.Logprobs != nil {
				resp.Logprobs = logprobs(out.Tokens, generated, req.GetLogprobs(), vocab)
			}
			generated += len(out.Tokens)
			if err := send(resp); err != nil {
				_ = r.Cancel(er.ID)
				return err
			}
		}
	}
}

// tracer makes the engine's spans; a no-op until the process installs a
// tracer provider.
var tracer = otel.Tracer("github.com/switchyard-llm/switchyard/services/mocker")

// engineSpans records, once a request's first output is out, the two phases
// before it as children of the worker's span: engine.queue (submitted until
// the engine admitted it) and engine.prefill (admitted until the first
// token), with the prompt's cached share.
func engineSpans(ctx context.Context, submitted, admitted, firstToken time.Time, u simengine.Usage) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	if admitted.IsZero() || admitted.Before(submitted) {
		admitted = submitted
	}
	_, q := tracer.Start(ctx, "engine.queue", trace.WithTimestamp(submitted))
	q.End(trace.WithTimestamp(admitted))
	_, p := tracer.Start(ctx, "engine.prefill", trace.WithTimestamp(admitted), trace.WithAttributes(
		attribute.Int("switchyard.prompt_tokens", u.PromptTokens), attribute.Int("switchyard.cached_prompt_tokens", u.CachedPromptTokens)))
	p.End(trace.WithTimestamp(firstToken))
}

// defaultOutputText is what a mocker answers with: readable, and long enough
// that answers starting at different places look different.
const defaultOutputText = "Switchyard is a control plane for distributed inference. " +
	"A registry keeps track of every worker and the models it serves. " +
	"An eventbus carries the events that tell the router which blocks of the key-value cache each worker holds. " +
	"The router sends every request to the worker that already holds most of its prefix, " +
	"so the prompt does not have to be computed again, while it keeps the load spread across the fleet. " +
	"The frontend speaks the OpenAI protocol, turns messages into tokens with the model's own template and tokenizer, " +
	"and streams the answer back as it is generated. " +
	"When a worker fails in the middle of an answer, the request moves to another worker and the stream carries on. " +
	"This answer comes from a simulated engine, which models a real cache and real timing without a GPU. "
