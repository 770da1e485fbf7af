package stacktest

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// Live is a registry, an eventbus, mockers and a router at its defaults
// (those of make run), all in process and without a frontend, for tests
// that send requests through the router the way the frontend does.
type Live struct {
	// RPC is the router's client.
	RPC    routerv1.RouterServiceClient
	tc     transport.Client
	target *routerv1.Target
}

// StartLive starts a registry, an eventbus, n mockers started with
// mockerArgs and a router, and waits (bounded) until the router sees every
// worker. Everything stops when t's test ends.
func StartLive(t testing.TB, ctx context.Context, n int, mockerArgs ...string) *Live {
	t.Helper()
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busAddr := bus.Addr().String()
	for range n {
		var cfg mocker.Config
		fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(append([]string{"--registry-addr", reg.Addr, "--eventbus-addr", busAddr}, mockerArgs...)); err != nil {
			t.Fatal(err)
		}
		cfg.DrainTimeout = time.Nanosecond
		mctx, cancel := context.WithCancel(context.Background())
		ready := make(chan *worker.Worker, 1)
		done := make(chan error, 1)
		go func() {
			done <- mocker.Run(mctx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { ready <- w })
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("mocker: %v", err)
			}
		})
		select {
		case <-ready:
		case err := <-done:
			done <- err
			t.Fatalf("mocker stopped: %v", err)
		}
	}
	rpc, _ := routertest.Start(t, ctx, routertest.Config(reg.Addr, busAddr))
	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	s := &Live{RPC: rpc, tc: tc, target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
		// A worker serving several data-parallel ranks is a line per rank.
		seen := map[uint64]bool{}
		for _, w := range st.GetWorkers() {
			seen[w.InstanceId] = true
		}
		if err == nil && len(seen) == n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("router sees %v, want %d workers", st, n)
		}
	}
}

// Play sends one request through the router to its worker as the frontend
// does: route, stream, mark the prefill complete at the first token, free.
// It returns the worker and the engine's usage.
func (s *Live) Play(ctx context.Context, id string, prompt []uint32, maxTokens int) (uint64, *workerv1.Usage, error) {
	return s.PlayExcept(ctx, id, prompt, maxTokens)
}

// PlayExcept is Play with the workers exclude ruled out of the decision.
func (s *Live) PlayExcept(ctx context.Context, id string, prompt []uint32, maxTokens int, exclude ...uint64) (uint64, *workerv1.Usage, error) {
	instance, _, usage, err := s.PlayRanked(ctx, id, prompt, maxTokens, exclude...)
	return instance, usage, err
}

// PlayRanked is PlayExcept that also returns the data-parallel rank the
// router chose, which the request carries to the worker (dp_rank).
func (s *Live) PlayRanked(ctx context.Context, id string, prompt []uint32, maxTokens int, exclude ...uint64) (uint64, uint32, *workerv1.Usage, error) {
	resp, err := s.RPC.Route(ctx, &routerv1.RouteRequest{RequestId: id, Target: s.target, TokenIds: prompt, ExcludeInstanceIds: exclude})
	if err != nil {
		return 0, 0, nil, err
	}
	defer func() { _, _ = s.RPC.Free(context.WithoutCancel(ctx), &routerv1.FreeRequest{RequestId: id}) }()
	payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: id, TokenIds: prompt, MaxTokens: uint32(maxTokens), DpRank: resp.DpRank})
	st, err := s.tc.Call(ctx, transport.Address{Kind: transport.PlaneTCP, Addr: resp.Transport.GetTcp()}, wire.GenerateEndpoint, nil, payload)
	if err != nil {
		return 0, 0, nil, err
	}
	defer st.Close()
	var usage *workerv1.Usage
	for first := true; ; first = false {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return resp.InstanceId, resp.DpRank, usage, nil
		}
		if err != nil {
			return 0, 0, nil, err
		}
		var out workerv1.GenerateResponse
		if err := proto.Unmarshal(b, &out); err != nil {
			return 0, 0, nil, err
		}
		if out.Usage != nil {
			usage = out.Usage
		}
		if first {
			if _, err := s.RPC.MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: id}); err != nil {
				return 0, 0, nil, err
			}
		}
	}
}
