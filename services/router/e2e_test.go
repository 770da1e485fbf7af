package router_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// startMocker runs a mocker worker until the test ends.
func startMocker(t *testing.T, regAddr, busAddr string, args ...string) *worker.Worker {
	t.Helper()
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--no-delay", "--registry-addr", regAddr, "--eventbus-addr", busAddr}, args...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *worker.Worker, 1)
	done := make(chan error, 1)
	go func() {
		done <- mocker.Run(ctx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { ready <- w })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mocker: %v", err)
		}
	})
	select {
	case w := <-ready:
		return w
	case err := <-done:
		t.Fatalf("mocker stopped: %v", err)
	}
	return nil
}

// generate sends a request to the routed worker and drains its responses.
func generate(ctx context.Context, t *testing.T, c transport.Client, resp *routerv1.RouteResponse, id string, prompt []uint32) {
	t.Helper()
	if _, err := workertest.Generate(ctx, c, transport.Address{Kind: transport.PlaneTCP, Addr: resp.Transport.GetTcp()}, &workerv1.GenerateRequest{RequestId: id, TokenIds: prompt, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
}

// TestKVEventsFlowFromWorkersToTheRouter runs the real chain in each KV
// event mode: mockers publish KV events (through the eventbus's stream or
// its NATS Core subjects, or to routers watching them directly), the router
// consumes them, and a repeated prompt is routed to the worker that cached
// it, with its overlap. In mode none the router predicts the same from its
// own decision.
func TestKVEventsFlowFromWorkersToTheRouter(t *testing.T) {
	for _, mode := range []string{"jetstream", "core", "direct", "none"} {
		t.Run(mode, func(t *testing.T) { testKVEventsFlow(t, mode) })
	}
}

func testKVEventsFlow(t *testing.T, mode string) {
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busAddr := bus.Addr().String()
	startMocker(t, reg.Addr, busAddr, "--kv-events-mode", mode)
	startMocker(t, reg.Addr, busAddr, "--kv-events-mode", mode)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcfg := routertest.Config(reg.Addr, busAddr)
	rcfg.KVEventsMode = mode
	rpc, stop := routertest.Start(t, ctx, rcfg)
	defer stop()
	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	prompt := make([]uint32, 256) // 16 blocks of 16
	for i := range prompt {
		prompt[i] = uint32(2000 + i*3)
	}
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}
	var first *routerv1.RouteResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		first, err = rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "turn1", Target: target, TokenIds: prompt})
		if err == nil && len(first.Candidates) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("router never saw both workers: %v, %v", first, err)
		}
		if err == nil {
			_, _ = rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "turn1"})
		}
	}
	if first.OverlapBlocks != 0 {
		t.Fatalf("cold prompt has overlap %d", first.OverlapBlocks)
	}
	generate(ctx, t, tc, first, "turn1", prompt)
	_, _ = rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "turn1"})

	// The worker's KV events travel worker -> eventbus -> router.
	var second *routerv1.RouteResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		q, err := rpc.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: prompt})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range q.Candidates {
			if c.InstanceId == first.InstanceId && c.OverlapBlocks >= 15 {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never learned worker %x's blocks: %v", first.InstanceId, q)
		}
	}
	second, err = rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "turn2", Target: target, TokenIds: append(prompt, 7, 8, 9)})
	if err != nil {
		t.Fatal(err)
	}
	// 256 prompt tokens are 16 full blocks, all cached after the prefill.
	if second.InstanceId != first.InstanceId || second.OverlapBlocks < 15 {
		t.Fatalf("second turn went to %x with overlap %d; want %x with >= 15 (%s)", second.InstanceId, second.OverlapBlocks, first.InstanceId, fmt.Sprint(second.Candidates))
	}
	st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
	// In core and direct modes the blocks may have come from the worker's
	// state (read when the router first saw it) rather than its events.
	if err != nil || mode == "none" && st.EventsApplied != 0 || mode == "jetstream" && st.EventsApplied == 0 {
		t.Fatalf("stats = %v, %v", st, err)
	}
}

// TestRestartRecoversFromSnapshot stops a router that snapshotted its index
// and starts another: it restores the snapshot, replays the events after it,
// and ends up with the same index as the live one had.
func TestRestartRecoversFromSnapshot(t *testing.T) {
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busAddr := bus.Addr().String()
	startMocker(t, reg.Addr, busAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := routertest.Config(reg.Addr, busAddr)
	cfg.SnapshotInterval = 100 * time.Millisecond
	startRouter := func(cfg router.Config) (routerv1.RouterServiceClient, func()) { return routertest.Start(t, ctx, cfg) }
	a, stopA := startRouter(cfg)
	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}
	overlap := func(rpc routerv1.RouterServiceClient, prompt []uint32) uint32 {
		q, err := rpc.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: prompt})
		if err != nil || len(q.Candidates) == 0 {
			return 0
		}
		return q.Candidates[0].OverlapBlocks
	}
	waitOverlap := func(rpc routerv1.RouterServiceClient, prompt []uint32, want uint32) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); overlap(rpc, prompt) < want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("overlap stayed at %d, want %d", overlap(rpc, prompt), want)
			}
		}
	}
	for i := range 3 {
		prompt := make([]uint32, 128)
		for j := range prompt {
			prompt[j] = uint32(5000 + i*1000 + j)
		}
		id := fmt.Sprintf("p%d", i)
		var resp *routerv1.RouteResponse
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, err = a.Route(ctx, &routerv1.RouteRequest{RequestId: id, Target: target, TokenIds: prompt})
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		generate(ctx, t, tc, resp, id, prompt)
		_, _ = a.Free(ctx, &routerv1.FreeRequest{RequestId: id})
		waitOverlap(a, prompt, 8)
		if i == 0 {
			// A snapshot with the first prompt's blocks is stored: the
			// restarted router restores it and replays the rest.
			waitSnapshot(ctx, t, bus.Addr().String(), 8)
		}
	}
	live, err := a.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stopA()

	cfg.SnapshotInterval = 0
	b, stopB := startRouter(cfg)
	defer stopB()
	var st *routerv1.GetStatsResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err = b.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err == nil && st.IndexedEntries == live.IndexedEntries {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted router index = %v, want the live one's %d entries", st, live.IndexedEntries)
		}
	}
	if st.RestoredSnapshotTime == nil {
		t.Fatalf("the restarted router did not restore a snapshot: %v", st)
	}
}

// waitSnapshot waits until the stored index snapshot holds at least blocks
// block hashes: the event that a snapshot was taken, instead of a sleep
// that races the snapshot ticker.
func waitSnapshot(ctx context.Context, t *testing.T, busAddr string, blocks int) {
	t.Helper()
	bc := eventbustest.Client(t, busAddr)
	held := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var buf bytes.Buffer
		if _, err := bc.GetObject(ctx, wire.SnapshotBucket, wire.SnapshotObject, &buf); err != nil {
			continue
		}
		snap := &routerv1.IndexSnapshot{}
		if err := proto.Unmarshal(buf.Bytes(), snap); err != nil {
			t.Fatalf("stored snapshot does not decode: %v", err)
		}
		held = 0
		for _, w := range snap.Workers {
			held += len(w.BlockHashes)
		}
		if held >= blocks {
			return
		}
	}
	t.Fatalf("no snapshot with %d blocks stored (the last held %d)", blocks, held)
}
