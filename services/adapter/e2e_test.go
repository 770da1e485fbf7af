package adapter_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/adapter"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestMain checks for leaks, except two known library ones: nats.go's, and
// zmq4 v0.17.0's PUB socket, whose Close never stops its writer goroutine
// (only the stand-in engine publishes; the adapter's socket is a SUB).
func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

const (
	modelName = "test/model"
	topic     = "kv-events"
	slowAfter = 1000 // max_tokens from which the stand-in streams until cancelled
)

// standIn is a stand-in engine: vLLM's streaming completions endpoint with
// token ids in its chunks, its metrics, and its ZeroMQ KV event publisher
// with msgpack payloads laid out as msgspec encodes them.
type standIn struct {
	t         *testing.T
	http      *httptest.Server
	pub       zmq4.Socket
	endpoint  string
	seq       uint64
	mu        sync.Mutex
	cancelled chan struct{}
	// metrics is the text of its /metrics; rankHeaders the
	// X-Data-Parallel-Rank of each completions request, "-" when absent.
	metrics     string
	rankHeaders []string
}

func startStandIn(t *testing.T) *standIn {
	s := &standIn{t: t, cancelled: make(chan struct{}, 1),
		metrics: `vllm:num_requests_waiting{model_name="test/model"} 1.0` + "\n" + `vllm:kv_cache_usage_perc{model_name="test/model"} 0.5` + "\n"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprint(w, s.metrics)
	})
	s.http = httptest.NewServer(mux)
	t.Cleanup(s.http.Close)
	s.pub = zmq4.NewPub(context.Background())
	if err := s.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.pub.Close() })
	s.endpoint = "tcp://" + s.pub.Addr().String()
	return s
}

type chunk struct {
	Choices []map[string]any `json:"choices"`
	Usage   map[string]any   `json:"usage,omitempty"`
}

func (s *standIn) completions(w http.ResponseWriter, r *http.Request) {
	rank := "-"
	if v := r.Header.Values("X-Data-Parallel-Rank"); len(v) > 0 {
		rank = strings.Join(v, ",")
	}
	s.mu.Lock()
	s.rankHeaders = append(s.rankHeaders, rank)
	s.mu.Unlock()
	var req struct {
		Model          string   `json:"model"`
		Prompt         []uint32 `json:"prompt"`
		MaxTokens      int      `json:"max_tokens"`
		Stream         bool     `json:"stream"`
		ReturnTokenIDs bool     `json:"return_token_ids"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream || !req.ReturnTokenIDs || len(req.Prompt) == 0 || req.Model != modelName {
		http.Error(w, fmt.Sprintf("bad request %+v: %v", req, err), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	write := func(c chunk) {
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	if req.MaxTokens >= slowAfter {
		write(chunk{Choices: []map[string]any{{"index": 0, "text": "slow", "token_ids": []uint32{7}, "finish_reason": nil}}})
		select {
		case <-r.Context().Done():
			s.cancelled <- struct{}{}
		case <-time.After(20 * time.Second):
		}
		return
	}
	for i := range req.MaxTokens {
		c := map[string]any{"index": 0, "text": fmt.Sprintf("t%d ", i), "token_ids": []uint32{uint32(1000 + i)}, "finish_reason": nil}
		if i == req.MaxTokens-1 {
			c["finish_reason"] = "length"
		}
		write(chunk{Choices: []map[string]any{c}})
	}
	write(chunk{Choices: []map[string]any{}, Usage: map[string]any{"prompt_tokens": len(req.Prompt), "completion_tokens": req.MaxTokens,
		"total_tokens": len(req.Prompt) + req.MaxTokens, "prompt_tokens_details": map[string]any{"cached_tokens": 16}}})
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// publish sends one KV event message [topic, sequence, payload]; skip leaves
// a gap of that many sequence numbers before it.
func (s *standIn) publish(skip uint64, events ...[]any) {
	s.t.Helper()
	s.publishRank(skip, nil, events...)
}

// publishRank is publish with the batch's data-parallel rank (nil: none).
func (s *standIn) publishRank(skip uint64, rank any, events ...[]any) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq += 1 + skip
	evs := make([]any, len(events))
	for i, e := range events {
		evs[i] = e
	}
	payload, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, evs, rank})
	if err != nil {
		s.t.Fatal(err)
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], s.seq)
	if err := s.pub.Send(zmq4.NewMsgFrom([]byte(topic), seq[:], payload)); err != nil {
		s.t.Fatal(err)
	}
}

// runningAdapter is an adapter in front of the stand-in engine.
type runningAdapter struct {
	stats *adapter.Stats
	ready chan *worker.Worker // its worker, once registered
	done  chan error          // what Run returned
	stop  func()              // stops it; Run must end without an error
}

// runAdapter runs an adapter for eng's model (block size 16, the Qwen3
// tokenizer files), with the flags extra after the others.
func runAdapter(t *testing.T, eng *standIn, files []string, regAddr, busAddr string, extra ...string) *runningAdapter {
	t.Helper()
	var cfg adapter.Config
	fs := flag.NewFlagSet("adapter", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--engine-url", eng.http.URL + "/v1", "--kv-events-endpoint", eng.endpoint, "--model-name", modelName,
		"--block-size", "16", "--tokenizer-dir", filepath.Dir(files[0]), "--registry-addr", regAddr, "--eventbus-addr", busAddr,
		"--drain-timeout", "5s"}, extra...)); err != nil {
		t.Fatal(err)
	}
	a := &runningAdapter{stats: &adapter.Stats{}, ready: make(chan *worker.Worker, 1), done: make(chan error, 1)}
	cfg.Stats = a.stats
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		a.done <- adapter.Run(ctx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { a.ready <- w })
	}()
	a.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-a.done; err != nil {
			t.Errorf("adapter: %v", err)
		}
	})
	return a
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// TestAdapterFeedsTheRouterAndServesGenerate runs a registry, an eventbus,
// a router, the stand-in engine and the adapter in front of it: the engine's
// KV events reach the router's index as Switchyard blocks (removals
// resolved, a wrong block size reported and not published, a sequence gap
// counted), load is scraped from its metrics, and generate streams through the adapter and cancels the
// engine's request when the caller goes away.
func TestAdapterFeedsTheRouterAndServesGenerate(t *testing.T) {
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busAddr := bus.Addr().String()
	eng := startStandIn(t)
	files, err := qwen3.WriteTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := runAdapter(t, eng, files, reg.Addr, busAddr)
	defer a.stop()
	stats, ready, done := a.stats, a.ready, a.done
	var w *worker.Worker
	select {
	case w = <-ready:
	case err := <-done:
		t.Fatalf("adapter stopped: %v", err)
	}

	rpc, stop := routertest.Start(t, ctx, routertest.Config(reg.Addr, busAddr))
	defer stop()
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: modelName}}
	overlap := func(prompt []uint32) (uint32, bool) {
		q, err := rpc.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: prompt})
		if err != nil {
			return 0, false
		}
		for _, c := range q.Candidates {
			if c.InstanceId == w.InstanceID() {
				return c.OverlapBlocks, true
			}
		}
		return 0, false
	}

	// PUB/SUB drops what is sent before the subscription: probe until the
	// adapter hears the engine (a clear is harmless).
	testwait.Until(t, 20*time.Second, "the adapter to subscribe", func() bool {
		eng.publish(0, []any{"AllBlocksCleared"})
		return stats.Messages.Load() > 0
	})
	prompt := make([]uint32, 64) // 4 blocks of 16
	for i := range prompt {
		prompt[i] = uint32(3000 + 7*i)
	}
	testwait.Until(t, 20*time.Second, "the router to see the worker", func() bool { _, ok := overlap(prompt); return ok })

	// Signed and unsigned engine hashes, unknown trailing fields, a parent
	// given by engine hash, and a CPU event: the first block offloaded to
	// host, which the router keeps (on its CPU tier).
	parent := uint64(1<<63 + 5)
	eng.publish(0, []any{"BlockStored", []any{int64(-101), parent}, nil, anys(prompt[:32]), 16, nil, "GPU", nil, "a-future-field", 7})
	eng.publish(0,
		[]any{"BlockStored", []any{int64(-103), 104}, parent, anys(prompt[32:]), 16, nil, nil},
		[]any{"BlockStored", []any{999}, nil, anys(prompt[:16]), 16, nil, "CPU"})
	testwait.Until(t, 20*time.Second, "the router to index the engine's blocks", func() bool { n, _ := overlap(prompt); return n == 4 })

	// A wrong block size is counted and not published.
	other := make([]uint32, 32)
	for i := range other {
		other[i] = uint32(9000 + i)
	}
	eng.publish(0, []any{"BlockStored", []any{500}, nil, anys(other), 32, nil, nil})
	testwait.Until(t, 20*time.Second, "the block size mismatch to be reported", func() bool { return stats.BlockSizeMismatches.Load() == 1 })

	// After a gap, a removal by engine hash resolves to the last block.
	eng.publish(1, []any{"BlockRemoved", []any{104}, "GPU", "trailing"})
	testwait.Until(t, 20*time.Second, "the removal to reach the router", func() bool { n, _ := overlap(prompt); return n == 3 })
	if n, _ := overlap(other); n != 0 {
		t.Fatalf("the mismatched block size was published: overlap %d", n)
	}
	if stats.Gaps.Load() != 1 || stats.Skipped.Load() != 0 {
		t.Fatalf("gaps %d, skipped %d; want 1, 0", stats.Gaps.Load(), stats.Skipped.Load())
	}
	eng.publish(0, []any{"AllBlocksCleared"})
	testwait.Until(t, 20*time.Second, "the clear to reach the router", func() bool { n, _ := overlap(prompt); return n == 0 })

	// Generate streams through the adapter.
	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	addr := transport.Address{Kind: transport.PlaneTCP, Addr: w.Instance().Transport.GetTcp()}
	call := func(ctx context.Context, maxTokens uint32) transport.Stream {
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: fmt.Sprint("r", maxTokens), TokenIds: prompt, MaxTokens: maxTokens,
			Model: modelName, Sampling: &workerv1.SamplingParameters{Temperature: 0.5, TopK: 5}})
		st, err := tc.Call(ctx, addr, wire.GenerateEndpoint, nil, payload)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := call(ctx, 4)
	var tokens []uint32
	var text string
	var last *workerv1.GenerateResponse
	for {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = &workerv1.GenerateResponse{}
		if err := proto.Unmarshal(b, last); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, last.TokenIds...)
		text += last.GetText()
		if last.FinishReason != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED && len(tokens) != 4 {
			t.Fatalf("finish reason before the last response: %v", last)
		}
	}
	st.Close()
	if fmt.Sprint(tokens) != "[1000 1001 1002 1003]" || text != "t0 t1 t2 t3 " || last.FinishReason != workerv1.FinishReason_FINISH_REASON_LENGTH ||
		last.Usage.GetPromptTokens() != 64 || last.Usage.GetCompletionTokens() != 4 || last.Usage.GetCachedPromptTokens() != 16 {
		t.Fatalf("tokens %v, text %q, last %v", tokens, text, last)
	}
	// One rank: the engine is not told one.
	eng.mu.Lock()
	if fmt.Sprint(eng.rankHeaders) != "[-]" {
		t.Errorf("rank headers %v, want none on a single-rank engine", eng.rankHeaders)
	}
	eng.mu.Unlock()

	// Load is scraped from the engine's metrics and published.
	sub, err := eventbustest.Client(t, busAddr).Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "dynamo",
		FilterSubject: "dynamo.backend." + wire.LoadName, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("no load with the engine's numbers: %v", err)
		}
		m, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
		if err != nil {
			t.Fatal(err)
		}
		if m.InstanceId == w.InstanceID() && m.WaitingRequests == 1 && m.KvBlocksUsed == 500 && m.KvBlocksTotal == 1000 {
			break
		}
	}

	// The caller going away cancels the engine's request.
	cctx, ccancel := context.WithCancel(ctx)
	st = call(cctx, slowAfter)
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	ccancel()
	st.Close()
	select {
	case <-eng.cancelled:
	case <-time.After(15 * time.Second):
		t.Fatal("the engine's request was not cancelled")
	}
}
