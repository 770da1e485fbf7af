package mocker_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbus"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// nats.go v1.55 can leave one goroutine of a closed JetStream context blocked
// forever: cleanup nils the status channel before resetPendingAcksOnReconnect
// reads it (a race in the library, not a goroutine of ours).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

func TestMockerServesAndPublishesKVEvents(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	var cfg mocker.Config
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--no-delay", "--registry-addr", reg.Addr, "--eventbus-addr", bus.Addr().String(), "--namespace", "mock",
		"--metrics-addr", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	metricsAddr := make(chan net.Addr, 1)
	cfg.OnMetricsAddr = func(a net.Addr) { metricsAddr <- a }
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan *worker.Worker, 1)
	done := make(chan error, 1)
	go func() {
		done <- mocker.Run(runCtx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { ready <- w })
	}()
	var w *worker.Worker
	select {
	case w = <-ready:
	case err := <-done:
		t.Fatalf("mocker stopped: %v", err)
	}
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("mocker Run: %v", err)
		}
	}()

	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(1000 + i)
	}
	payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "r1", TokenIds: prompt, MaxTokens: 5})
	st, err := c.Call(ctx, transport.Address{Kind: transport.PlaneTCP, Addr: w.Instance().Transport.GetTcp()}, wire.GenerateEndpoint, nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []uint32
	var finish workerv1.FinishReason
	for {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		r := &workerv1.GenerateResponse{}
		if err := proto.Unmarshal(b, r); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, r.TokenIds...)
		if r.FinishReason != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED {
			finish = r.FinishReason
		}
	}
	st.Close()
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

	client := eventbustest.Client(t, bus.Addr().String())
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
	b, err := eventbus.Decode[workerv1.KvEventBatch](ev)
	if err != nil {
		t.Fatal(err)
	}
	// 40 prompt tokens fill two 16-token blocks.
	if b.InstanceId != w.InstanceID() || b.FirstEventId != 1 || len(b.Events[0].GetStored().GetBlocks()) != 2 {
		t.Fatalf("first KV batch = %v", b)
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
		{"bad request plane", nil, map[string]string{"DYN_REQUEST_PLANE": "carrier-pigeon"}},
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
