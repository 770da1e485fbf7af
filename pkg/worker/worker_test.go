package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

func TestMain(m *testing.M) {
	// The tests wait out registry and etcd outages, leases and backoffs.
	testwait.AtLeastParallel(6)
	testleak.VerifyTestMain(m)
}

type env struct {
	regAddr, busAddr string
	bus              *eventbusclient.Client
	etcd             *registrytest.Etcd
	reg              *registrytest.Registry
}

func newEnv(t *testing.T) env {
	t.Helper()
	etcd, reg := registrytest.Start(t)
	_, svc := eventbustest.Start(t)
	return env{regAddr: reg.Addr, busAddr: svc.Addr().String(), bus: eventbustest.Client(t, svc.Addr().String()), etcd: etcd, reg: reg}
}

func (e env) config(t *testing.T) worker.Config {
	tc := transport.DefaultConfig()
	tc.TCP.Host = "127.0.0.1"
	return worker.Config{Namespace: "test", Component: "backend", Model: worker.Model{Name: "m", BlockSize: 4, ContextLength: 1024},
		RegistryAddr: e.regAddr, EventbusAddr: e.busAddr, Transport: tc, LeaseTTL: 5 * time.Second, DrainTimeout: 10 * time.Second, LoadInterval: 50 * time.Millisecond}
}

// call sends one generate request to the worker at addr.
func call(ctx context.Context, t *testing.T, addr transport.Address, req *workerv1.GenerateRequest) ([]*workerv1.GenerateResponse, error) {
	t.Helper()
	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return workertest.Generate(ctx, c, addr, req)
}

func addrOf(in *registryv1.Instance) transport.Address {
	return transport.Address{Kind: transport.PlaneTCP, Addr: in.Transport.GetTcp()}
}

// echo answers with one response per prompt token, slowly when asked;
// every response carries the usage of an engine that found all but the
// prompt's last token cached.
func echo(delay time.Duration, started chan<- struct{}) worker.Handler {
	return func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
		if started != nil {
			started <- struct{}{}
		}
		n := uint32(len(req.TokenIds))
		usage := &workerv1.Usage{PromptTokens: n, CachedPromptTokens: max(n, 1) - 1}
		for _, tok := range req.TokenIds {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(delay):
			}
			if err := send(&workerv1.GenerateResponse{TokenIds: []uint32{tok}, Usage: usage}); err != nil {
				return err
			}
		}
		return send(&workerv1.GenerateResponse{FinishReason: workerv1.FinishReason_FINISH_REASON_LENGTH})
	}
}

func TestWorkerRegistersServesAndPublishes(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := e.config(t)
	w, err := worker.Start(ctx, cfg, echo(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())

	// Registered, with a model card.
	dc, err := registryclient.Dial([]string{e.regAddr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "test"}})
	if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != w.InstanceID() {
		t.Fatalf("ListInstances = %v, %v", list, err)
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil || len(cards.Cards) != 1 || cards.Cards[0].ModelName != "m" || cards.Cards[0].BlockSize != 4 {
		t.Fatalf("ListModels = %v, %v", cards, err)
	}

	// Serves generate on the request plane.
	out, err := call(ctx, t, addrOf(list.Instances[0]), &workerv1.GenerateRequest{RequestId: "r", TokenIds: []uint32{5, 6, 7}})
	if err != nil || len(out) != 4 || out[2].TokenIds[0] != 7 {
		t.Fatalf("generate = %v, %v", out, err)
	}

	// KV events and load reach the eventbusclient.
	sub, err := e.bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "test", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	stored := &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: 42, LocalHash: 42}}}}}
	w.PublishKVEvents(&workerv1.KvEventBatch{FirstEventId: 1, Events: []*workerv1.KvCacheEvent{stored}})
	w.SetLoad(func() *workerv1.LoadMetrics { return &workerv1.LoadMetrics{KvBlocksTotal: 100} })
	var gotKV, gotLoad bool
	for !gotKV || !gotLoad {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("subscription: %v (kv %v, load %v)", err, gotKV, gotLoad)
		}
		switch ev.GetSubject() {
		case "test.backend." + wire.KVEventsName:
			b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
			if err != nil || b.InstanceId != w.InstanceID() || b.Events[0].GetStored().Blocks[0].SequenceHash != 42 {
				t.Fatalf("KV batch = %v, %v", b, err)
			}
			gotKV = true
		case "test.backend." + wire.LoadName:
			m, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
			// The counts since the start: the one request served above,
			// its 3 prompt tokens, the 2 of them its every response said
			// were cached (counted once) and the 3 it echoed.
			if err != nil || m.InstanceId != w.InstanceID() || m.KvBlocksTotal != 100 ||
				m.RequestsTotal != 1 || m.PromptTokensTotal != 3 || m.CachedPromptTokensTotal != 2 || m.OutputTokensTotal != 3 {
				t.Fatalf("load = %v, %v", m, err)
			}
			// The request counts by its computed prompt (1 token: bucket
			// 0) once its handler has returned, which a report taken
			// between its last response and then does not show yet.
			if len(m.ComputedPromptRequestsTotal) != wire.ComputedPromptBuckets {
				t.Fatalf("computed prompt buckets = %v, want %d", m.ComputedPromptRequestsTotal, wire.ComputedPromptBuckets)
			}
			total := uint64(0)
			for _, n := range m.ComputedPromptRequestsTotal {
				total += n
			}
			if total > 1 || total == 1 && m.ComputedPromptRequestsTotal[0] != 1 {
				t.Fatalf("computed prompt buckets = %v, want the one request in bucket 0", m.ComputedPromptRequestsTotal)
			}
			gotLoad = total == 1
		}
	}

	// A payload that is not a GenerateRequest is refused with a typed error.
	c, _ := transport.NewClient(transport.DefaultConfig())
	defer c.Close()
	st, err := c.Call(ctx, addrOf(list.Instances[0]), wire.GenerateEndpoint, nil, []byte{0xff, 0xff, 0xff})
	if err == nil {
		_, err = st.Recv()
		st.Close()
	}
	var he *transport.HandlerError
	if !errors.As(err, &he) || he.Code != "invalid_argument" {
		t.Fatalf("garbage payload = %v, want a HandlerError invalid_argument", err)
	}
}

// TestShutdownDrainsInFlight stops a worker (as SIGTERM would) while a
// request streams: the worker deregisters at once, and the request still
// completes.
func TestShutdownDrainsInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := make(chan struct{}, 1)
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan *worker.Worker, 1)
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(runCtx, e.config(t), echo(20*time.Millisecond, started), func(w *worker.Worker) { ready <- w })
	}()
	w := <-ready

	var wg sync.WaitGroup
	var out []*workerv1.GenerateResponse
	var callErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		out, callErr = call(ctx, t, addrOf(w.Instance()), &workerv1.GenerateRequest{RequestId: "long", TokenIds: make([]uint32, 40)})
	}()
	<-started
	stop() // SIGTERM
	wg.Wait()
	if callErr != nil || len(out) != 41 {
		t.Fatalf("in-flight request got %d responses, err %v; want all 41", len(out), callErr)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run after SIGTERM = %v, want nil (exit 0)", err)
	}
	dc, _ := registryclient.Dial([]string{e.regAddr}, registryclient.Options{})
	defer dc.Close()
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{})
	if err != nil || len(list.Instances) != 0 {
		t.Fatalf("after shutdown the registry still lists %v (%v)", list.GetInstances(), err)
	}
}

// TestLostLeaseRegistersAgain: the lease is revoked behind the worker's
// back (as when it expired during an outage). The worker does not exit: it
// registers again with a new instance id, the same address and model card,
// and starts its KV events with a cleared event under the new id.
func TestLostLeaseRegistersAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan *worker.Worker, 1)
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx, e.config(t), echo(0, nil), func(w *worker.Worker) { ready <- w }) }()
	w := <-ready
	first := w.Instance()
	sub, err := e.bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "test", FilterSubject: "test.backend." + wire.KVEventsName,
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	dc, _ := registryclient.Dial([]string{e.regAddr}, registryclient.Options{})
	defer dc.Close()
	// Only the worker holds its lease token: the lease is revoked in etcd
	// itself, as an operator would.
	e.etcd.RevokeLease(ctx, first.InstanceId)
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("no KV event after the lease loss: %v", err)
	}
	b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
	if err != nil || len(b.Events) != 1 || b.Events[0].GetCleared() == nil {
		t.Fatalf("first KV batch after registering again = %v, %v; want one cleared event", b, err)
	}
	if b.InstanceId == first.InstanceId || b.InstanceId != w.InstanceID() || w.Registrations() != 2 {
		t.Fatalf("cleared event of instance %x; worker now %x after %d registrations, was %x", b.InstanceId, w.InstanceID(), w.Registrations(), first.InstanceId)
	}
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "test"}})
	if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != w.InstanceID() ||
		list.Instances[0].Transport.GetTcp() != first.Transport.GetTcp() {
		t.Fatalf("ListInstances = %v, %v; want the new id at %s", list, err, first.Transport.GetTcp())
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != w.InstanceID() || cards.Cards[0].ModelName != "m" {
		t.Fatalf("ListModels = %v, %v", cards, err)
	}
	if out, err := call(ctx, t, addrOf(list.Instances[0]), &workerv1.GenerateRequest{RequestId: "r", TokenIds: []uint32{1}}); err != nil || len(out) != 2 {
		t.Fatalf("generate after registering again = %v, %v", out, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v after a lost lease", err)
	default:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after SIGTERM = %v", err)
	}
}

// TestWorkerOutlivesRegistryOutage: the only registry is gone for longer
// than the lease TTL while etcd stays up, so the lease expires (the test
// revokes it in etcd then, to be sure). The worker keeps serving all along
// and registers again once the registry is back.
func TestWorkerOutlivesRegistryOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := e.config(t)
	cfg.LeaseTTL = time.Second
	w, err := worker.Start(ctx, cfg, echo(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	first := w.Instance()
	e.reg.Stop()
	// Wait for the session to pass its lease's deadline without an answer,
	// on its keep-alive outcomes (bounded by ctx), not a guessed sleep.
	for sess := w.Session(); ; {
		_, next := sess.Progress()
		if sess.Expired() {
			break
		}
		select {
		case <-next:
		case <-ctx.Done():
			t.Fatal("the session never passed its lease's deadline")
		}
	}
	// etcd drops the lease about now on its own (TTL 1 s); revoking it
	// makes that certain instead of racing etcd's expiry, which a sleep did.
	e.etcd.RevokeLease(ctx, first.InstanceId)
	if out, err := call(ctx, t, addrOf(first), &workerv1.GenerateRequest{RequestId: "during", TokenIds: []uint32{1}}); err != nil || len(out) != 2 {
		t.Fatalf("generate during the outage = %v, %v", out, err)
	}
	registrytest.StartRegistryAt(t, e.etcd.Endpoints, e.regAddr)
	for w.Registrations() < 2 {
		if ctx.Err() != nil {
			t.Fatal("the worker never registered again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if w.InstanceID() == first.InstanceId {
		t.Fatalf("registered again under the expired lease %x", first.InstanceId)
	}
}

// logWatch is a slog handler that counts records by message, so that a test
// waits for "the worker tried and failed" as an event, not a guessed sleep.
type logWatch struct {
	mu     sync.Mutex
	counts map[string]int
	// addrs is the "addr" attribute of each message's last record.
	addrs   map[string]string
	changed chan struct{}
}

func newLogWatch() *logWatch {
	return &logWatch{counts: map[string]int{}, addrs: map[string]string{}, changed: make(chan struct{})}
}

func (l *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (l *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logWatch) WithGroup(string) slog.Handler            { return l }
func (l *logWatch) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "addr" {
			l.addrs[r.Message] = a.Value.String()
		}
		return true
	})
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// wait returns once msg has been logged n times, failing t when ctx ends first.
func (l *logWatch) wait(ctx context.Context, t *testing.T, msg string, n int) {
	t.Helper()
	for {
		l.mu.Lock()
		got, ch := l.counts[msg], l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%q logged %d times; want %d", msg, got, n)
		}
	}
}

// TestWorkerStartsBeforeTheControlPlane starts a worker while the registry,
// or the etcd behind it, is not up: Start keeps trying (with backoff) and
// the request plane serves meanwhile; once the control plane comes up the
// worker registers, with its model card, and Start returns. An error no
// retry changes (a name the registry refuses) still fails Start at once.
func TestWorkerStartsBeforeTheControlPlane(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// failures to wait for before bringing it up: one, logged as
		// retried, and Start then succeeding on a later attempt show the
		// retry (each failed attempt takes the attempt timeout when nothing
		// listens, or the registry's store timeout when etcd is away).
		failures int
		// down makes the control plane unreachable and returns the
		// registry address to give the worker and how to bring it up.
		down func(t *testing.T, e *env) (regAddr string, up func())
	}{
		{"registry not started", 1, func(t *testing.T, e *env) (string, func()) {
			e.reg.Stop()
			addr := testport.Reserve(t).Addr() // refused until the registry starts there
			return addr, func() { e.reg = registrytest.StartRegistryAt(t, e.etcd.Endpoints, addr) }
		}},
		{"etcd down behind the registry", 1, func(t *testing.T, e *env) (string, func()) {
			e.etcd.Stop()
			return e.regAddr, e.etcd.Start
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			regAddr, up := tc.down(t, &e)
			logs := newLogWatch()
			cfg := e.config(t)
			cfg.RegistryAddr = regAddr
			cfg.Log = slog.New(logs)
			started := make(chan error, 1)
			var w *worker.Worker
			go func() {
				var err error
				w, err = worker.Start(ctx, cfg, echo(0, nil))
				started <- err
			}()
			logs.wait(ctx, t, "registration failed; retrying", tc.failures)
			// The request plane's address before Start returns, from its log
			// (port 0: until it registers, only the log says which port).
			logs.wait(ctx, t, "transport: tcp request plane listening", 1)
			logs.mu.Lock()
			addr := transport.Address{Kind: transport.PlaneTCP, Addr: logs.addrs["transport: tcp request plane listening"]}
			logs.mu.Unlock()
			if out, err := call(ctx, t, addr, &workerv1.GenerateRequest{RequestId: "early", TokenIds: []uint32{1}}); err != nil || len(out) != 2 {
				t.Fatalf("generate before registering = %v, %v; want it served", out, err)
			}
			select {
			case err := <-started:
				t.Fatalf("Start returned %v while the control plane was down", err)
			default:
			}
			up()
			if err := <-started; err != nil {
				t.Fatalf("Start after the control plane came up = %v", err)
			}
			defer w.Shutdown(context.Background())
			dc, err := registryclient.Dial([]string{regAddr}, registryclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "test"}})
			if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != w.InstanceID() || list.Instances[0].Transport.GetTcp() != addr.Addr {
				t.Fatalf("ListInstances = %v, %v; want the worker's %x at %s", list, err, w.InstanceID(), addr.Addr)
			}
			cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
			if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != w.InstanceID() {
				t.Fatalf("ListModels = %v, %v", cards, err)
			}
			if w.Registrations() != 1 {
				t.Fatalf("registrations = %d; want 1", w.Registrations())
			}
		})
	}

	t.Run("refused, not retried", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		logs := newLogWatch()
		cfg := e.config(t)
		cfg.Namespace = "Not A Name"
		cfg.Log = slog.New(logs)
		_, err := worker.Start(ctx, cfg, echo(0, nil))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Start with a name the registry refuses = %v; want InvalidArgument", err)
		}
		if n := logs.counts["registration failed; retrying"]; n != 0 {
			t.Fatalf("retried %d times an error no retry changes", n)
		}
	})
}
