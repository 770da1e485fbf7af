// Command goworker is the Go SDK's entry in the conformance suite: an echo
// engine (each response one token of the prompt, cycled) behind pkg/worker,
// which registers it, keeps its lease, uploads its tokenizer, publishes its
// KV events and load, and drains it on SIGTERM. The request plane comes from
// the DYN_* variables (transport.ConfigFromEnv).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

func main() {
	var cfg worker.Config
	var blockSize, contextLength int
	var tokenizerDir string
	var tokenDelay time.Duration
	flag.StringVar(&cfg.Namespace, "namespace", "dynamo", "registry namespace")
	flag.StringVar(&cfg.Component, "component", "backend", "registry component")
	flag.StringVar(&cfg.Endpoint, "endpoint", "generate", "registry endpoint")
	flag.StringVar(&cfg.Model.Name, "model-name", "switchyard/go-echo", "model name on the model card")
	flag.IntVar(&blockSize, "block-size", 16, "KV block size in tokens")
	flag.IntVar(&contextLength, "context-length", 40960, "context length on the model card")
	flag.StringVar(&tokenizerDir, "tokenizer-dir", "", "directory with the tokenizer files to upload; empty: none")
	flag.StringVar(&cfg.RegistryAddr, "registry-addr", "localhost:7001", "registry address")
	flag.StringVar(&cfg.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address")
	flag.DurationVar(&cfg.LeaseTTL, "lease-ttl", 10*time.Second, "registry lease TTL")
	flag.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "how long in-flight requests may take at shutdown")
	flag.DurationVar(&cfg.LoadInterval, "load-interval", time.Second, "how often load is published")
	flag.DurationVar(&tokenDelay, "token-delay", 5*time.Millisecond, "time between generated tokens")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(cfg, blockSize, contextLength, tokenizerDir, tokenDelay, log); err != nil {
		log.Error("worker failed", "err", err.Error())
		os.Exit(1)
	}
}

func run(cfg worker.Config, blockSize, contextLength int, tokenizerDir string, tokenDelay time.Duration, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tc, err := transport.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.Transport, cfg.Log = tc, log
	cfg.Model.BlockSize, cfg.Model.ContextLength = uint32(blockSize), uint32(contextLength)
	if tokenizerDir != "" {
		if cfg.Model.TokenizerFiles, err = worker.TokenizerFiles(tokenizerDir); err != nil {
			return err
		}
	}
	e := &echo{blockSize: blockSize, delay: tokenDelay, cached: map[uint64]bool{}}
	return worker.Run(ctx, cfg, e.generate, func(w *worker.Worker) {
		e.w.Store(w)
		w.SetLoad(e.load)
	})
}

// echo caches every full prompt block it sees (no eviction) and echoes the
// prompt.
type echo struct {
	blockSize int
	delay     time.Duration
	// w is set once Start has returned. The request plane serves before
	// that (while the registry is not up, and between the registration and
	// Start's return): a request then caches nothing, since its KV events
	// could not be published.
	w atomic.Pointer[worker.Worker]

	mu      sync.Mutex
	cached  map[uint64]bool
	nextID  uint64
	running int
}

func (e *echo) load() *workerv1.LoadMetrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	return &workerv1.LoadMetrics{InstanceId: e.w.Load().InstanceID(), RunningRequests: uint32(e.running),
		KvBlocksUsed: uint64(len(e.cached)), KvBlocksTotal: 1 << 20, Timestamp: timestamppb.Now()}
}

// prefill reports the prompt's new blocks as one stored event.
func (e *echo) prefill(prompt []uint32) uint32 {
	w := e.w.Load()
	if w == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var stored *workerv1.KvBlocksStored
	cached := uint32(0)
	for i, b := range kvhash.Hashes(prompt, e.blockSize, nil) {
		if e.cached[b.Sequence] {
			cached += uint32(e.blockSize)
			continue
		}
		e.cached[b.Sequence] = true
		if stored == nil {
			stored = &workerv1.KvBlocksStored{}
			if i > 0 {
				parent := kvhash.Hashes(prompt[:i*e.blockSize], e.blockSize, nil)[i-1].Sequence
				stored.ParentSequenceHash = &parent
			}
		}
		stored.Blocks = append(stored.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	if stored != nil {
		e.nextID++
		w.PublishKVEvents(&workerv1.KvEventBatch{InstanceId: w.InstanceID(), FirstEventId: e.nextID,
			Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: stored}}}})
	}
	return cached
}

func (e *echo) generate(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
	if len(req.TokenIds) == 0 {
		return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "empty prompt"}
	}
	cached := e.prefill(req.TokenIds)
	e.mu.Lock()
	e.running++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running--
		e.mu.Unlock()
	}()
	n := max(req.MaxTokens, 1)
	t := time.NewTicker(e.delay)
	defer t.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		r := &workerv1.GenerateResponse{TokenIds: []uint32{req.TokenIds[int(i)%len(req.TokenIds)]}}
		if i+1 == n {
			r.FinishReason = workerv1.FinishReason_FINISH_REASON_LENGTH
			r.Usage = &workerv1.Usage{PromptTokens: uint32(len(req.TokenIds)), CompletionTokens: n, CachedPromptTokens: cached}
		}
		if err := send(r); err != nil {
			return err
		}
	}
	return nil
}
