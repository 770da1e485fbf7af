package router_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// modeStack is a registry, NATS (restartable in place), an eventbus,
// mockers in one KV event mode and a router in the same mode.
type modeStack struct {
	t       *testing.T
	mode    string
	regAddr string
	busAddr string
	natsDir string
	natsURL string
	nats    *natsserver.Server
	drop    func() func(*workerv1.KvEventBatch) bool // each mocker's DropKVEvent, or nil

	mu      sync.Mutex
	mockers map[*worker.Worker]func()
	router  *router.Service
	stopRt  func()
	tc      transport.Client
	seq     atomic.Int64
	started time.Time
}

func startModeStack(t *testing.T, mode string, workers int, drop bool) *modeStack {
	t.Helper()
	var everyTenth func() func(*workerv1.KvEventBatch) bool
	if drop {
		everyTenth = func() func(*workerv1.KvEventBatch) bool {
			var n atomic.Uint64
			return func(*workerv1.KvEventBatch) bool { return n.Add(1)%10 == 0 }
		}
	}
	return startModeStackDropping(t, mode, workers, everyTenth)
}

// startModeStackDropping is startModeStack with each mocker's own
// DropKVEvent hook, made by drop (nil: none).
func startModeStackDropping(t *testing.T, mode string, workers int, drop func() func(*workerv1.KvEventBatch) bool) *modeStack {
	t.Helper()
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	s := &modeStack{t: t, started: time.Now(), mode: mode, regAddr: reg.Addr, natsDir: t.TempDir(), drop: drop, mockers: map[*worker.Worker]func(){}}
	s.startNATS(-1)
	// Registered before the eventbus's cleanup, so it runs after it: the
	// eventbus stops while its NATS (the current one) is still up.
	t.Cleanup(func() { eventbustest.StopNATS(s.nats) })
	cfg := eventbustest.Config(s.natsURL)
	cfg.NATSMaxReconnects, cfg.NATSReconnectWait = -1, 50*time.Millisecond
	bus := eventbustest.StartEventbus(t, cfg)
	s.busAddr = bus.Addr().String()
	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	s.tc = tc
	// Mockers start at once: each loads and uploads its tokenizer.
	var waits []func() *worker.Worker
	for range workers {
		waits = append(waits, s.launchMocker())
	}
	for _, wait := range waits {
		wait()
	}
	t.Logf("mockers up at %s", time.Since(s.started).Round(time.Millisecond))
	s.startRouter()
	t.Logf("stack up at %s", time.Since(s.started).Round(time.Millisecond))
	return s
}

// startMocker starts one mocker with a small cache (so that blocks are
// evicted too); in drop mode one batch in ten never reaches the eventbus.
func (s *modeStack) startMocker() *worker.Worker { return s.launchMocker()() }

// launchMocker starts a mocker; the function it returns waits until it is
// registered.
func (s *modeStack) launchMocker() func() *worker.Worker {
	t := s.t
	t.Helper()
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--no-delay", "--num-gpu-blocks", "48", "--registry-addr", s.regAddr, "--eventbus-addr", s.busAddr,
		"--kv-events-mode", s.mode, "--kv-events-ring", "64"}); err != nil {
		t.Fatal(err)
	}
	cfg.DrainTimeout = time.Nanosecond // mocker.Run completes and validates the rest
	if s.drop != nil {
		cfg.DropKVEvent = s.drop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *worker.Worker, 1)
	done := make(chan error, 1)
	go func() {
		done <- mocker.Run(ctx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { ready <- w })
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("mocker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return func() *worker.Worker {
		t.Helper()
		select {
		case w := <-ready:
			s.mu.Lock()
			s.mockers[w] = stop
			s.mu.Unlock()
			return w
		case err := <-done:
			t.Fatalf("mocker stopped: %v", err)
		}
		return nil
	}
}

func (s *modeStack) startNATS(port int) {
	ns, err := eventbus.StartEmbeddedNATS(s.natsDir, port, eventbustest.Logger())
	if err != nil {
		s.t.Fatal(err)
	}
	s.nats, s.natsURL = ns, ns.ClientURL()
}

func (s *modeStack) stopMocker(w *worker.Worker) {
	s.mu.Lock()
	stop := s.mockers[w]
	delete(s.mockers, w)
	s.mu.Unlock()
	stop()
}

func (s *modeStack) workers() []*worker.Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*worker.Worker, 0, len(s.mockers))
	for w := range s.mockers {
		out = append(out, w)
	}
	return out
}

func (s *modeStack) startRouter() {
	cfg := routertest.Config(s.regAddr, s.busAddr)
	cfg.KVEventsMode = s.mode
	cfg.ResyncInterval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := router.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		s.t.Fatal(err)
	}
	if err := routertest.WaitReady(ctx, svc); err != nil {
		cancel()
		s.t.Fatal(err)
	}
	var once sync.Once
	s.router = svc
	s.stopRt = func() {
		once.Do(func() {
			cancel()
			if err := svc.Wait(); err != nil {
				s.t.Errorf("router: %v", err)
			}
		})
	}
	s.t.Cleanup(s.stopRt)
}

// traffic sends n requests of fresh 128-token prompts (some sharing a
// prefix) to every worker, directly: each stores blocks, and the small
// caches evict older ones.
func (s *modeStack) traffic(ctx context.Context, n int) {
	t := s.t
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(s.seq.Add(1)), 7))
	for _, w := range s.workers() {
		addr := transport.Address{Kind: transport.PlaneTCP, Addr: w.Instance().GetTransport().GetTcp()}
		for range n {
			prompt := make([]uint32, 128)
			for i := range prompt {
				prompt[i] = uint32(rng.IntN(30000) + 100)
			}
			if rng.IntN(3) == 0 {
				copy(prompt, []uint32{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26})
			}
			payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: fmt.Sprint("r", s.seq.Add(1)), TokenIds: prompt, MaxTokens: 2})
			st, err := s.tc.Call(ctx, addr, wire.GenerateEndpoint, nil, payload)
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := st.Recv(); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			st.Close()
		}
	}
}

// truth is the union of every worker's GetKvState, by worker.
func (s *modeStack) truth(ctx context.Context) map[index.WorkerID][]uint64 {
	out := map[index.WorkerID][]uint64{}
	for _, w := range s.workers() {
		cc, api, err := worker.DialAPI(w.APIAddr(), grpcclient.Options{})
		if err != nil {
			s.t.Fatal(err)
		}
		inst, ranks, err := worker.ReadKVState(ctx, api)
		cc.Close()
		if err != nil {
			s.t.Fatal(err)
		}
		for _, r := range ranks {
			if len(r.Hashes) > 0 {
				h := slices.Clone(r.Hashes)
				slices.Sort(h)
				out[index.WorkerID{Instance: inst, DPRank: r.DPRank}] = h
			}
		}
	}
	return out
}

func indexOf(c *core.Core) map[index.WorkerID][]uint64 {
	out := map[index.WorkerID][]uint64{}
	for _, d := range c.Index().Dump() {
		if len(d.Hashes) > 0 {
			slices.Sort(d.Hashes)
			out[d.ID] = d.Hashes
		}
	}
	return out
}

// waitEqual waits until the router's index is exactly the workers' state.
func (s *modeStack) waitEqual(ctx context.Context, what string) {
	s.t.Helper()
	var want, got map[index.WorkerID][]uint64
	for {
		want, got = s.truth(ctx), indexOf(s.router.Core())
		if len(want) > 0 && equalState(want, got) {
			s.t.Logf("%s: exact (%d workers) at %s", what, len(want), time.Since(s.started).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("%s: the router's index never equalled the workers' state:\n%s", what, diffState(want, got))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func equalState(a, b map[index.WorkerID][]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func diffState(want, got map[index.WorkerID][]uint64) string {
	out := ""
	for k, v := range want {
		out += fmt.Sprintf("  worker %x/%d: state %d blocks, index %d blocks\n", k.Instance, k.DPRank, len(v), len(got[k]))
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out += fmt.Sprintf("  worker %x/%d: not in any state, index %d blocks\n", k.Instance, k.DPRank, len(v))
		}
	}
	return out
}

// TestKVEventModesStayExact runs each KV event mode through the failures
// it must survive and, after each, compares the router's index with the
// union of the workers' GetKvState, exactly: a router restart (core and
// direct rebuild from the workers, jetstream replays its stream), a worker
// restart, and in core mode a NATS restart and a hook that drops one event
// batch in ten on its way to the eventbus (the gaps are filled from the
// workers' rings). The short form runs fewer requests.
func TestKVEventModesStayExact(t *testing.T) {
	n := 30
	if testing.Short() {
		n = 8
	}
	for _, mode := range []string{"jetstream", "core", "direct"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			s := startModeStack(t, mode, 2, mode == "core")
			s.traffic(ctx, n)
			s.waitEqual(ctx, "after traffic")

			s.stopRt()
			s.traffic(ctx, n/2) // while the router is away
			s.startRouter()
			s.waitEqual(ctx, "after a router restart")

			s.stopMocker(s.workers()[0])
			t.Logf("worker stopped at %s", time.Since(s.started).Round(time.Millisecond))
			s.startMocker()
			t.Logf("worker started at %s", time.Since(s.started).Round(time.Millisecond))
			s.traffic(ctx, n)
			s.waitEqual(ctx, "after a worker restart")

			if mode != "direct" {
				eventbustest.StopNATS(s.nats)
				s.traffic(ctx, n/2) // events published meanwhile are lost in core mode
				port, _ := strconv.Atoi(portOfURL(s.natsURL))
				s.startNATS(port)
				s.traffic(ctx, n/2)
				s.waitEqual(ctx, "after a NATS restart")
			}
			st := s.router.FollowStats()
			t.Logf("follow stats: %+v", st)
			switch {
			case mode == "core" && st.Filled == 0:
				t.Errorf("core mode with dropped events filled no gap from the workers: %+v", st)
			case mode != "jetstream" && st.Rebuilds == 0:
				t.Errorf("%s mode rebuilt nobody from its state: %+v", mode, st)
			}
		})
	}
}

// TestCoreModeLearnsAWorkerWhoseBatchesTheBusLost: in core mode a worker
// whose state had no events when the router began following it, and whose
// every batch is lost on its way to the eventbus, is still learned by the
// router's periodic catch-up. Before, the catch-up asked only the ranks the
// first state read had listed, which were none, so such a worker's blocks
// were never learned (seen on CI as "the router never learned worker X's
// blocks" when a first batch was lost).
func TestCoreModeLearnsAWorkerWhoseBatchesTheBusLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := startModeStackDropping(t, "core", 1, func() func(*workerv1.KvEventBatch) bool {
		return func(*workerv1.KvEventBatch) bool { return true }
	})
	s.traffic(ctx, 2)
	s.waitEqual(ctx, "with every batch lost on the bus")
}

func portOfURL(u string) string {
	_, port, _ := net.SplitHostPort(u[len("nats://"):])
	return port
}
