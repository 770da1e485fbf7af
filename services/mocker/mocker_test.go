package mocker_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

func TestMockerServesAndPublishesKVEvents(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	metricsAddr := make(chan net.Addr, 1)
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := runMocker(t, func(c *mocker.Config) { c.OnMetricsAddr = func(a net.Addr) { metricsAddr <- a } },
		"--registry-addr", reg.Addr, "--eventbus-addr", bus.Addr().String(), "--metrics-addr", "127.0.0.1:0")
	w := m.registered(t)

	c := tcpClient(t)
	prompt := seq(1000, 40)
	tokens, finish := generate(ctx, t, c, w.Instance(), &workerv1.GenerateRequest{RequestId: "r1", TokenIds: prompt, MaxTokens: 5})
	if len(tokens) != 5 || finish != workerv1.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("got %d tokens, finish %v; want 5 and LENGTH", len(tokens), finish)
	}
	// --metrics-addr: the engine's counters after that one request.
	resp, err := http.Get("http://" + (<-metricsAddr).String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"switchyard_engine_generated_tokens_total 5\n", "switchyard_engine_prompt_tokens_total 40\n",
		"switchyard_engine_prefix_cache_queried_blocks_total 2\n", "switchyard_engine_kv_blocks_total ", "switchyard_engine_running_requests "} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	b := firstKVBatch(ctx, t, bus.Addr().String())
	// 40 prompt tokens fill two 16-token blocks.
	if b.InstanceId != w.InstanceID() || b.FirstEventId != 1 || len(b.Events[0].GetStored().GetBlocks()) != 2 {
		t.Fatalf("first KV batch = %v", b)
	}
}

// runningMocker is a mocker that runs until its test ends.
type runningMocker struct {
	ready chan *worker.Worker // its worker, once registered
	done  chan error          // what Run returned
	// stop stops it and returns what Run returned; once, then the same.
	stop func() error
}

// runMocker runs a mocker of namespace mock without delays, with the flags
// args and then edit's changes; it stops in t's cleanup, and Run must end
// without an error.
func runMocker(t *testing.T, edit func(*mocker.Config), args ...string) *runningMocker {
	t.Helper()
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--no-delay", "--namespace", "mock"}, args...)); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &runningMocker{ready: make(chan *worker.Worker, 1), done: make(chan error, 1)}
	go func() {
		m.done <- mocker.Run(ctx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { m.ready <- w })
	}()
	var once sync.Once
	var runErr error
	m.stop = func() error {
		once.Do(func() {
			stop()
			runErr = <-m.done
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := m.stop(); err != nil {
			t.Errorf("mocker Run: %v", err)
		}
	})
	return m
}

// registered waits for the mocker's worker.
func (m *runningMocker) registered(t *testing.T) *worker.Worker {
	t.Helper()
	select {
	case w := <-m.ready:
		return w
	case err := <-m.done:
		m.done <- err // for the cleanup
		t.Fatalf("mocker stopped: %v", err)
		return nil
	}
}

// tcpClient is a request plane client for the test.
func tcpClient(t *testing.T) transport.Client {
	t.Helper()
	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seq is n token ids from from on.
func seq(from uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

// generate sends req to the instance's TCP address and reads the answer to
// its end: the tokens and the finish reason.
func generate(ctx context.Context, t *testing.T, c transport.Client, in *registryv1.Instance, req *workerv1.GenerateRequest) ([]uint32, workerv1.FinishReason) {
	t.Helper()
	rs, err := workertest.Generate(ctx, c, workertest.TCP(in), req)
	if err != nil {
		t.Fatal(err)
	}
	return workertest.Output(rs)
}

// firstKVBatch is the first KV event batch on namespace mock's stream.
func firstKVBatch(ctx context.Context, t *testing.T, busAddr string) *workerv1.KvEventBatch {
	t.Helper()
	client := eventbustest.Client(t, busAddr)
	sub, err := client.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "mock", FilterSubject: "mock.backend." + wire.KVEventsName,
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMockerPublishesKVEventsOfRequestsBeforeStartReturns holds the
// registry's answer to the mocker's RegisterModel: the card is stored and
// shows, and worker.Start has not returned, so the mocker has no *Worker
// yet. A request sent then, as a frontend that sees the card sends it, is
// served, and its blocks must be the first KV events on the stream, under
// the registered instance id, once the answer is let through. The mocker
// dropped them (it published only through a *Worker), so the first batch
// on the stream was the next request's, with event id 2.
func TestMockerPublishesKVEventsOfRequestsBeforeStartReturns(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	proxy, held, unhold := conformance.HoldAnswer(t, reg.Addr, registryv1.RegistryService_RegisterModel_FullMethodName)
	defer unhold()
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := runMocker(t, nil, "--registry-addr", proxy, "--eventbus-addr", bus.Addr().String())
	select {
	case <-held: // the card is stored; Start waits for the answer
	case err := <-m.done:
		m.done <- err // for the cleanup
		t.Fatalf("mocker stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("the mocker's RegisterModel was never answered by the registry")
	}
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "mock"}})
	if err != nil || len(list.Instances) != 1 {
		t.Fatalf("ListInstances while the answer is held = %v, %v; want the mocker", list, err)
	}
	in := list.Instances[0]

	c := tcpClient(t)
	prompt := seq(1000, 40)
	// Five tokens take five engine steps: the prefill step's events (the
	// two stored blocks) have been handed over before the last token is out.
	if tokens, _ := generate(ctx, t, c, in, &workerv1.GenerateRequest{RequestId: "early", TokenIds: prompt, MaxTokens: 5}); len(tokens) != 5 {
		t.Fatalf("generate before Start returned: %d tokens, want 5", len(tokens))
	}
	unhold()
	w := m.registered(t)
	if w.InstanceID() != in.InstanceId {
		t.Fatalf("the mocker registered %x; the registry listed %x", w.InstanceID(), in.InstanceId)
	}
	other := seq(5000, 40)
	generate(ctx, t, c, in, &workerv1.GenerateRequest{RequestId: "late", TokenIds: other, MaxTokens: 5})
	b := firstKVBatch(ctx, t, bus.Addr().String())
	blocks := b.Events[0].GetStored().GetBlocks()
	want := kvhash.Hashes(prompt, 16, nil)
	if b.InstanceId != in.InstanceId || b.FirstEventId != 1 || len(blocks) != 2 || blocks[1].GetSequenceHash() != want[1].Sequence {
		t.Fatalf("first KV batch = %v; want the early request's 2 blocks (%x, %x) as event 1 of instance %x", b, want[0].Sequence, want[1].Sequence, in.InstanceId)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"negative speed-up", []string{"--speedup-ratio", "-1"}, nil},
		{"zero blocks", []string{"--num-gpu-blocks", "0"}, nil},
		{"negative host blocks", []string{"--host-kv-blocks", "-1"}, nil},
		{"bad request plane", nil, map[string]string{"DYN_REQUEST_PLANE": "carrier-pigeon"}},
		{"zero handoff timeout", []string{"--handoff-timeout", "0s"}, nil},
		{"negative handoff timeout", []string{"--handoff-timeout", "-1s"}, nil},
		{"zero pull timeout", []string{"--kv-pull-timeout", "0s"}, nil},
		{"negative transfer rate", []string{"--kv-transfer-gbps", "-1"}, nil},
		{"NaN transfer rate", []string{"--kv-transfer-gbps", "NaN"}, nil},
		{"zero KV bytes per token", []string{"--kv-bytes-per-token", "0"}, nil},
		{"negative data-parallel size", []string{"--data-parallel-size", "-1"}, nil},
		{"data-parallel size over the limit", []string{"--data-parallel-size", "1025"}, nil},
		{"data-parallel ranks of a prefill worker", []string{"--data-parallel-size", "2", "--disaggregation-mode", "prefill"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var cfg mocker.Config
			fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
			cfg.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.Complete()
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				t.Fatal("Complete and Validate accepted it")
			}
		})
	}
}

// TestIdleMockerPublishesItsTimingModel: a mocker that has served nothing
// yet reports its timing model with its load, so that a router predicts
// its times from the first request on. It published an empty report, and
// a router took a mocker slowed by --speedup-ratio for an H100.
func TestIdleMockerPublishesItsTimingModel(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := eventbustest.Client(t, bus.Addr().String())
	sub, err := client.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "mock", FilterSubject: wire.LoadSubject("mock", "backend"),
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m := runMocker(t, nil, "--registry-addr", reg.Addr, "--eventbus-addr", bus.Addr().String(), "--no-delay=false", "--speedup-ratio", "0.5")
	w := m.registered(t)
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
	if err != nil {
		t.Fatal(err)
	}
	// Its engine's steps, and no overhead outside them, which it does not
	// add (its requests' is the real frontend's and request plane's).
	want := timingmodel.Default().Scaled(0.5).EngineOnly()
	if got := lm.GetTimingModel(); lm.GetInstanceId() != w.InstanceID() || got.GetPrefillMsPerBatch() != want.PrefillPerBatch ||
		got.GetPrefillMsPerRequest() != 0 || got.GetMaxBatchedTokens() == 0 {
		t.Fatalf("first load report %v, want the timing model of --speedup-ratio 0.5 (%v ms a batch, none a request)", lm, want.PrefillPerBatch)
	}
}
