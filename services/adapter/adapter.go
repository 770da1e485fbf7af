// Package adapter is a Switchyard worker that fronts an existing
// OpenAI-compatible engine (vLLM, SGLang): it registers the engine's model
// like any worker, serves generate by streaming the engine's completions
// endpoint with the prompt as token ids, and feeds the engine's real KV cache
// events (its ZeroMQ publisher, msgpack-encoded as vLLM does) to the router,
// with the block hashes recomputed as Switchyard's (pkg/kvhash). It also
// scrapes the engine's Prometheus metrics for load.
package adapter

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/sync/errgroup"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// Config is the adapter's configuration.
type Config struct {
	Namespace, Component, Endpoint string
	// ToolCallParser and ReasoningParser go on the model card, as the
	// engine's own --tool-call-parser and --reasoning-parser would.
	ToolCallParser, ReasoningParser string
	// EngineURL is the engine's OpenAI base URL, such as
	// http://127.0.0.1:8001/v1.
	EngineURL string
	// MetricsURL is the engine's Prometheus endpoint; empty is EngineURL's
	// host with /metrics, "off" disables load.
	MetricsURL string
	// KVEventsEndpoint is the engine's ZeroMQ publisher, such as
	// tcp://127.0.0.1:5557, and KVEventsTopic its topic.
	KVEventsEndpoint, KVEventsTopic string
	// KVEventsReplayEndpoint is the engine's replay socket (vLLM's
	// replay_endpoint), asked for the messages a sequence gap lost; empty:
	// gaps are only counted.
	KVEventsReplayEndpoint string
	ModelName              string
	// BlockSize must equal the engine's.
	BlockSize     int
	ContextLength int
	// TokenizerDir holds the model's tokenizer files for the model card.
	TokenizerDir string
	// MaxTrackedBlocks bounds the engine hash to Switchyard hash map.
	MaxTrackedBlocks int
	// ProcessConfig: the registry and eventbus, lease, drain, request
	// plane, KV event flags (where the bridged events go and how many the
	// local indexer keeps), and MetricsAddr (the adapter's KV event
	// counters and the engine load it scrapes) and DebugAddr.
	worker.ProcessConfig
	// Stats, when set, receives the KV event counters (tests, embedding).
	Stats *Stats
	// HandoffTimeout bounds a bootstrap prefill leg's engine request once
	// its handoff is out (--handoff-timeout).
	HandoffTimeout time.Duration
	// Embeddings serves embeddings through the engine's /v1/embeddings
	// (--embeddings; embed.go): for an engine that runs an embedding model.
	Embeddings bool
}

// EnvVars maps flags to their environment variables.
var EnvVars = worker.ProcessEnvVars()

// RegisterFlags adds the adapter's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Namespace, "namespace", "dynamo", "registry namespace")
	fs.StringVar(&c.Component, "component", "backend", "registry component")
	fs.StringVar(&c.Endpoint, "endpoint", wire.GenerateEndpoint, "registry endpoint")
	worker.RegisterParserFlags(fs, &c.ToolCallParser, &c.ReasoningParser, "", "")
	fs.StringVar(&c.EngineURL, "engine-url", "http://127.0.0.1:8001/v1", "the engine's OpenAI base URL")
	fs.StringVar(&c.MetricsURL, "engine-metrics-url", "", `the engine's Prometheus endpoint (empty: /metrics on --engine-url's host; "off": no load)`)
	fs.StringVar(&c.KVEventsEndpoint, "kv-events-endpoint", "tcp://127.0.0.1:5557", "the engine's ZeroMQ KV event publisher")
	fs.StringVar(&c.KVEventsTopic, "kv-events-topic", "kv-events", "topic of the engine's KV events")
	fs.StringVar(&c.KVEventsReplayEndpoint, "kv-events-replay-endpoint", "", "the engine's ZeroMQ replay socket, asked for messages a gap lost (empty: gaps are only counted)")
	fs.StringVar(&c.ModelName, "model-name", "", "model name served (as the engine serves it)")
	fs.IntVar(&c.BlockSize, "block-size", 16, "KV block size in tokens; must equal the engine's")
	fs.IntVar(&c.ContextLength, "context-length", 40960, "context length of the model card")
	fs.StringVar(&c.TokenizerDir, "tokenizer-dir", "", "directory with the model's tokenizer.json(.gz) and tokenizer_config.json")
	fs.IntVar(&c.MaxTrackedBlocks, "max-tracked-blocks", 1<<20, "engine block hashes remembered to resolve removals and parents")
	fs.BoolVar(&c.Embeddings, "embeddings", false, "serve /v1/embeddings through the engine's embeddings endpoint (an engine running an embedding model, such as vLLM with --runner pooling)")
	fs.DurationVar(&c.HandoffTimeout, "handoff-timeout", 30*time.Second, "with --kv-transfer-kind bootstrap, how long a prefill leg's engine request may wait for its decode leg once the handoff is out")
	c.ProcessConfig.RegisterFlags(fs)
	c.Disagg.RegisterTransferFlags(fs)
}

// Complete fills --engine-metrics-url from --engine-url when it is empty,
// reads the request plane from DYN_REQUEST_PLANE and friends unless
// Transport is set, and reads the token and TLS files. Run calls it, then
// Validate.
func (c *Config) Complete() error {
	if c.MetricsURL == "" {
		if u, err := url.Parse(c.EngineURL); err == nil && u.Host != "" {
			c.MetricsURL = u.Scheme + "://" + u.Host + "/metrics"
		}
	}
	return c.ProcessConfig.Complete()
}

// Validate checks the configuration; it reads nothing and changes nothing.
func (c Config) Validate() error {
	if c.ModelName == "" || c.TokenizerDir == "" {
		return errors.New("--model-name and --tokenizer-dir are required")
	}
	if c.BlockSize < 1 || c.ContextLength < 1 || c.MaxTrackedBlocks < 1 {
		return errors.New("--block-size, --context-length and --max-tracked-blocks must be positive")
	}
	if err := checkHTTPURL(c.EngineURL); err != nil {
		return fmt.Errorf("--engine-url %q is not an http(s) URL", c.EngineURL)
	}
	if c.MetricsURL != "off" {
		if err := checkHTTPURL(c.MetricsURL); err != nil {
			return fmt.Errorf(`--engine-metrics-url %q is not an http(s) URL nor "off"`, c.MetricsURL)
		}
	}
	if c.KVEventsReplayEndpoint != "" && !strings.Contains(c.KVEventsReplayEndpoint, "://") {
		return fmt.Errorf("--kv-events-replay-endpoint %q is not a ZeroMQ endpoint such as tcp://host:port", c.KVEventsReplayEndpoint)
	}
	if c.KVEventsEndpoint != "" && !strings.Contains(c.KVEventsEndpoint, "://") {
		return fmt.Errorf("--kv-events-endpoint %q is not a ZeroMQ endpoint such as tcp://host:port", c.KVEventsEndpoint)
	}
	if err := c.ProcessConfig.Validate(); err != nil {
		return err
	}
	return c.validateDisagg()
}

// validateDisagg checks that a prefill or decode adapter names a transfer
// whose protocol it relays, and that a bootstrap prefill adapter names its
// engine's bootstrap server.
func (c Config) validateDisagg() error {
	if c.HandoffTimeout <= 0 {
		return fmt.Errorf("--handoff-timeout %v must be positive", c.HandoffTimeout)
	}
	role := c.Disagg.Role()
	if role != commonv1.Role_ROLE_PREFILL && role != commonv1.Role_ROLE_DECODE {
		return nil
	}
	k := c.Disagg.Transfer().GetKind()
	if !isVLLMKind(k) && k != commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP {
		return fmt.Errorf("--disaggregation-mode %s needs --kv-transfer-kind nixl or mooncake (vLLM's kv_transfer_params) or bootstrap (SGLang's), not %q",
			c.Disagg.Mode, c.Disagg.TransferKind)
	}
	if k == commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP && role == commonv1.Role_ROLE_PREFILL {
		host, port, err := net.SplitHostPort(c.Disagg.TransferAddr)
		if p, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || p == 0 {
			return fmt.Errorf("--kv-transfer-kind bootstrap on a prefill adapter needs --kv-transfer-addr, the engine's bootstrap server as host:port (got %q)", c.Disagg.TransferAddr)
		}
	}
	return nil
}

// checkHTTPURL accepts an absolute http or https URL with a host.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an http(s) URL")
	}
	return nil
}

func (c *Config) tokenizerFiles() ([]string, error) { return worker.TokenizerFiles(c.TokenizerDir) }

// Run serves as a worker in front of the engine until ctx ends, then
// deregisters and drains. ready, when set, is called once the worker is
// registered.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready func(*worker.Worker)) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	files, err := cfg.tokenizerFiles()
	if err != nil {
		return err
	}
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	client := &http.Client{}
	defer client.CloseIdleConnections()
	wcfg := worker.Config{
		Namespace: cfg.Namespace, Component: cfg.Component, Endpoint: cfg.Endpoint,
		Model: worker.Model{Name: cfg.ModelName, BlockSize: uint32(cfg.BlockSize), ContextLength: uint32(cfg.ContextLength), TokenizerFiles: files,
			ToolCallParser: cfg.ToolCallParser, ReasoningParser: cfg.ReasoningParser},
		Log: log, Metadata: map[string]string{"engine_url": cfg.EngineURL},
	}
	if err := cfg.ProcessConfig.Apply(&wcfg); err != nil {
		return err
	}
	wcfg.KVTransfer = cfg.Disagg.Transfer()
	if n := cfg.Disagg.DataParallelSize; n > 1 {
		// The card declares the engine's ranks, so the router routes to
		// each as a candidate of its own (its KV events carry their rank)
		// and generate names the chosen rank to the engine.
		wcfg.Model.DataParallelSize = uint32(n)
	}
	log.Info("adapter starting", "model", cfg.ModelName, "engine", cfg.EngineURL, "kv_events", cfg.KVEventsEndpoint,
		"block_size", cfg.BlockSize, "request_plane", string(cfg.Transport.Plane))
	var load atomic.Pointer[[]*workerv1.LoadMetrics]
	load.Store(&[]*workerv1.LoadMetrics{{}})
	stopMetrics, err := serveMetrics(ctx, cfg, &load, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	g, gctx := errgroup.WithContext(ctx)
	// The side loops stop once the worker has drained.
	sideCtx, stopSide := context.WithCancel(context.Background())
	defer stopSide()
	started := make(chan *worker.Worker, 1)
	// The engine's KV events are heard from before the worker registers:
	// the request plane serves while worker.Start registers and the model
	// card shows as soon as the registry stored it, so a frontend sends
	// requests before Start returns, and the engine publishes their events
	// then (PUB/SUB keeps nothing for a late subscriber). The SDK's
	// publisher holds them until the registration and publishes them
	// first, in order, under the registered instance id (see
	// worker.KVPublisher; past its limit a batch is dropped and logged).
	kvPub := worker.NewKVPublisher(0, log)
	wcfg.KVPublisher = kvPub
	if cfg.KVEventsEndpoint != "" {
		g.Go(func() error {
			return subscribe(sideCtx, cfg, log, func(b *workerv1.KvEventBatch) { _ = kvPub.Publish(b) })
		})
	}
	var self atomic.Pointer[worker.Worker]
	l := &legs{client: client, url: completionsURL(cfg.EngineURL), kind: wcfg.KVTransfer.GetKind(), addr: cfg.Disagg.TransferAddr,
		timeout: cfg.HandoffTimeout, self: self.Load, log: log, ranks: dpRanks(cfg.Disagg.DataParallelSize), pending: map[string]context.CancelFunc{}}
	defer l.close()
	wcfg.KVHandoffs = l
	if cfg.Embeddings {
		wcfg.Embed = embed(client, cfg.EngineURL, cfg.ModelName)
	}
	g.Go(func() error {
		defer stopSide()
		return worker.Run(gctx, wcfg, generate(client, cfg.EngineURL, cfg.ModelName, l), func(w *worker.Worker) {
			self.Store(w)
			started <- w
			if ready != nil {
				ready(w)
			}
		})
	})
	g.Go(func() error {
		var w *worker.Worker
		select {
		case w = <-started:
		case <-sideCtx.Done():
			return nil
		}
		if cfg.MetricsURL != "off" {
			w.SetRankLoads(func() []*workerv1.LoadMetrics { return *load.Load() })
			g.Go(func() error {
				scrapeLoad(sideCtx, client, cfg.MetricsURL, max(cfg.Disagg.DataParallelSize, 1), time.Second, &load, log)
				return nil
			})
		}
		return nil
	})
	return g.Wait()
}

// subscribe reads the engine's KV events until ctx ends, publishing each
// message's translation in order.
func subscribe(ctx context.Context, cfg Config, log *slog.Logger, publish func(*workerv1.KvEventBatch)) error {
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
	defer sub.Close()
	if err := sub.Dial(cfg.KVEventsEndpoint); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kv events: %w", err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, cfg.KVEventsTopic); err != nil {
		return fmt.Errorf("kv events: subscribe: %w", err)
	}
	log.Info("subscribed to the engine's KV events", "endpoint", cfg.KVEventsEndpoint, "topic", cfg.KVEventsTopic)
	tr := NewTranslator(cfg.BlockSize, cfg.MaxTrackedBlocks, log, cfg.Stats)
	var rp *replayer
	if cfg.KVEventsReplayEndpoint != "" {
		rp = newReplayer(cfg.KVEventsReplayEndpoint, log)
		defer rp.close()
	}
	for {
		msg, err := sub.Recv()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			log.Warn("kv events: receive failed", "err", err.Error())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if rp != nil {
			fillGap(ctx, rp, tr, cfg.Stats, log, msg.Frames, publish)
		}
		if b := HandleMessage(tr, cfg.Stats, log, msg.Frames); b != nil {
			publish(b)
		}
	}
}

// fillGap asks the replay socket for the messages between the last one seen
// and this one, and handles them first, in order. A failed replay leaves the
// gap to be counted as before.
func fillGap(ctx context.Context, rp *replayer, tr *Translator, stats *Stats, log *slog.Logger, frames [][]byte, publish func(*workerv1.KvEventBatch)) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		return
	}
	next, seen := tr.Next()
	seq := binary.BigEndian.Uint64(frames[1])
	if !seen || seq <= next {
		return
	}
	msgs, err := rp.fetch(ctx, next, seq-1)
	if err != nil {
		log.Warn("kv events: replay failed; the gap stays", "from", next, "to", seq-1, "err", err.Error())
	}
	var seqBytes [8]byte
	for _, m := range msgs {
		binary.BigEndian.PutUint64(seqBytes[:], m.seq)
		if b := HandleMessage(tr, stats, log, [][]byte{frames[0], seqBytes[:], m.payload}); b != nil {
			publish(b)
		}
		stats.Replayed.Add(1)
	}
}

// HandleMessage decodes one multipart message [topic, sequence, payload] and
// translates it; it returns nil when there is nothing to publish.
func HandleMessage(tr *Translator, stats *Stats, log *slog.Logger, frames [][]byte) *workerv1.KvEventBatch {
	if len(frames) != 3 || len(frames[1]) != 8 {
		stats.Malformed.Add(1)
		log.Warn("kv events: message is not [topic, 8-byte sequence, payload]", "frames", len(frames))
		return nil
	}
	tr.Sequence(binary.BigEndian.Uint64(frames[1]))
	b, err := DecodeBatch(frames[2])
	if err != nil {
		stats.Malformed.Add(1)
		log.Error("kv events: payload does not decode", "err", err.Error())
		return nil
	}
	stats.Messages.Add(1)
	return tr.Translate(b)
}
