package router_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/replay"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// liveStack is a registry, an eventbus, n mockers started with args and
// a router at its defaults (those of make run).
type liveStack struct {
	rpc    routerv1.RouterServiceClient
	tc     transport.Client
	target *routerv1.Target
}

func startLive(t *testing.T, ctx context.Context, n int, mockerArgs ...string) *liveStack {
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
	s := &liveStack{rpc: rpc, tc: tc, target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}}
	// Wait (bounded) until the router sees every worker.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err == nil && len(st.Workers) == n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("router sees %v, want %d workers", st, n)
		}
	}
}

// play sends one request through the router to its worker as the frontend
// does: route, stream, mark the prefill complete at the first token, free.
// It returns the worker and the engine's usage.
func (s *liveStack) play(ctx context.Context, id string, prompt []uint32, maxTokens int) (uint64, *workerv1.Usage, error) {
	resp, err := s.rpc.Route(ctx, &routerv1.RouteRequest{RequestId: id, Target: s.target, TokenIds: prompt})
	if err != nil {
		return 0, nil, err
	}
	defer func() { _, _ = s.rpc.Free(context.WithoutCancel(ctx), &routerv1.FreeRequest{RequestId: id}) }()
	payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: id, TokenIds: prompt, MaxTokens: uint32(maxTokens)})
	st, err := s.tc.Call(ctx, transport.Address{Kind: transport.PlaneTCP, Addr: resp.Transport.GetTcp()}, wire.GenerateEndpoint, nil, payload)
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	var usage *workerv1.Usage
	for first := true; ; first = false {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return resp.InstanceId, usage, nil
		}
		if err != nil {
			return 0, nil, err
		}
		var out workerv1.GenerateResponse
		if err := proto.Unmarshal(b, &out); err != nil {
			return 0, nil, err
		}
		if out.Usage != nil {
			usage = out.Usage
		}
		if first {
			if _, err := s.rpc.MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: id}); err != nil {
				return 0, nil, err
			}
		}
	}
}

// TestLiveGroupsStayOnTheirWorker is the case of chats sharing long
// system prompts, on 4 mockers at make run's defaults (real time, router
// weight 1): 5 groups sharing 4,096-token prefixes, sent one at a time,
// then 8 at a time. Every group's requests after its first land on one
// worker: no group moves, so none pays a cold prefill twice.
func TestLiveGroupsStayOnTheirWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startLive(t, ctx, 4)
	const groups, prefixLen = 5, 4096
	prompt := func(g, i int) []uint32 {
		p := make([]uint32, prefixLen+40)
		for j := range p {
			if j < prefixLen {
				p[j] = uint32(2000 + g*prefixLen + j)
			} else {
				p[j] = uint32(100000 + i*64 + j - prefixLen)
			}
		}
		return p
	}
	var mu sync.Mutex
	where := make([][]uint64, groups)
	n := 0
	send := func(g int) error {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		w, _, err := s.play(ctx, "r"+strconv.Itoa(k), prompt(g, k), 4)
		mu.Lock()
		where[g] = append(where[g], w)
		mu.Unlock()
		return err
	}
	rounds := 3
	if testing.Short() {
		rounds = 2
	}
	for range rounds {
		for g := range groups {
			if err := send(g); err != nil {
				t.Fatal(err)
			}
		}
	}
	for wave := range rounds * groups * 2 / 8 {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				if err := send((wave*8 + i) % groups); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for g, ws := range where {
		for _, w := range ws[1:] {
			if w != ws[1] {
				t.Errorf("group %d moved between workers: %x", g, ws)
				break
			}
		}
	}
}

// TestReplayAgreesWithLive plays a ~200-request generated trace through a
// real router and 4 mockers, in real time sped up 2 times, and replays it
// in the replay's virtual time: the prefix hit rates agree within 5 points.
func TestReplayAgreesWithLive(t *testing.T) {
	g := replay.Presets["sessions"]
	g.Requests, g.Groups, g.Seed = 200, 12, 7
	g.Output = replay.Dist{Median: 8, Sigma: 0.5, Min: 2, Max: 32}
	g.Think = 4 * time.Second
	trace, err := replay.Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	const speedup, workers = 2.0, 4
	// Replayed: the mocker's engine at its defaults, sped up alike.
	cfg := replay.Config{Workers: workers, Engine: simengine.DefaultConfig(), TraceBlockSize: g.BlockSize, RateScale: speedup,
		OverlapWeight: 1, ApproxTTL: 2 * time.Minute, ApproxMaxEntries: 1 << 20, Seed: 1,
		EventDelay: 5 * time.Millisecond, SyncDelay: 5 * time.Millisecond, LoadInterval: time.Second, RequestTTL: 30 * time.Minute}
	cfg.Engine.SpeedupRatio = speedup
	replayed, err := replay.Run(trace, cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startLive(t, ctx, workers, "--speedup-ratio", fmt.Sprint(speedup))
	var mu sync.Mutex
	var hit, queried int
	var wg sync.WaitGroup
	errs := make(chan error, len(trace))
	start := time.Now()
	for i, r := range trace {
		if d := time.Until(start.Add(time.Duration(float64(r.Arrival) / speedup))); d > 0 {
			time.Sleep(d) // the trace's arrival times, not a race with a ticker
		}
		wg.Go(func() {
			prompt := replay.Tokens(r, g.BlockSize, nil)
			_, u, err := s.play(ctx, "t"+strconv.Itoa(i), prompt, r.OutputLength)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			hit += int(u.GetCachedPromptTokens()) / cfg.Engine.BlockSize
			queried += len(prompt) / cfg.Engine.BlockSize
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	live := float64(hit) / float64(queried)
	t.Logf("prefix hit rate: live %.3f, replayed %.3f (%d requests)", live, replayed.HitRate, len(trace))
	if replayed.Completed != len(trace) || math.Abs(live-replayed.HitRate) > 0.05 {
		t.Fatalf("live hit rate %.3f, replayed %.3f (%d of %d completed): want within 5 points", live, replayed.HitRate, replayed.Completed, len(trace))
	}
}
