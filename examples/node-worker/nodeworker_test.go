// Package nodeworker_test runs the example Node worker (src/worker.ts, on the
// generated TypeScript stubs) against real services in this process: it
// answers chats through the frontend beside Go mockers, serves HTTP/1.1 and
// typed errors, and registers again when its lease is taken away. The rows
// every worker shares (register, keep-alive, model card, KV events, generate,
// cancellation, drain) are examples/conformance's.
package nodeworker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

// requireNode skips the test without node and the npm packages (npm ci in
// this folder) on a developer machine, and fails it in CI.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "tsx"))
	}
	if err != nil {
		msg := fmt.Sprintf("the Node worker needs node and `npm ci` in examples/node-worker: %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node
}

type workerOpts struct {
	namespace, model    string
	blockSize, leaseTTL int
}

func startWorker(t *testing.T, node, regAddr, busAddr string, o workerOpts) *conformance.Process {
	t.Helper()
	cmd := exec.Command(node, "--import", "tsx", "src/worker.ts", "--namespace", o.namespace, "--model-name", o.model,
		"--block-size", strconv.Itoa(o.blockSize), "--context-length", "4096", "--registry-addr", regAddr, "--eventbus-addr", busAddr,
		"--lease-ttl", strconv.Itoa(o.leaseTTL), "--drain-timeout", "5", "--token-delay", "0.002", "--load-interval", "0.2")
	cmd.Env = []string{"DYN_REQUEST_PLANE=http", "DYN_HTTP_RPC_HOST=127.0.0.1", "DYN_HTTP_RPC_PORT=0"}
	return conformance.StartProcess(t, cmd)
}

// watchInstances dials the registry at addr and watches the instances of
// namespace ns; the caller closes both.
func watchInstances(t *testing.T, addr, ns string) (*registryclient.Client, *registryclient.Watcher[*registryv1.Instance]) {
	t.Helper()
	dc, err := registryclient.Dial([]string{addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dc, registryclient.WatchInstances(dc, &registryv1.InstanceFilter{Namespace: ns}, registryclient.WatchOptions[*registryv1.Instance]{})
}

// TestNodeUnitTests runs the Node side's own tests (XXH3 block hashes against
// pkg/kvhash's golden values, the http plane's framing) and type-checks the worker and gen/ts with tsc.
func TestNodeUnitTests(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	tests, err := filepath.Glob(filepath.Join("src", "*.test.ts"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no src/*.test.ts: %v", err)
	}
	if out, err := exec.Command(node, append([]string{"--import", "tsx", "--test"}, tests...)...).CombinedOutput(); err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if testing.Short() {
		return // tsc takes a while on a shared machine; make test-long runs it
	}
	if out, err := exec.Command(node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "--noEmit", "-p", ".").CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
}

// TestNodeWorkerBesideMockers serves one model from two Go mockers and the
// Node worker; the frontend, routing round-robin, answers every
// chat and the Node worker answers its share.
func TestNodeWorkerBesideMockers(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	const ns = "nodefe"
	// A bound for a hang, not a timing: the frontend builds the Qwen
	// tokenizer, which takes minutes under the race detector on a loaded
	// machine and seconds on a quiet one.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, reg := registrytest.Start(t)
	nats, bus := eventbustest.Start(t)
	plane := func(p transport.Plane) transport.Config {
		c := transport.DefaultConfig()
		c.Plane, c.TCP.Host, c.HTTP.Host, c.HTTP.Port, c.NATS.URL = p, "127.0.0.1", "127.0.0.1", 0, nats.ClientURL()
		return c
	}
	for i := range 2 {
		var cfg mocker.Config
		fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse([]string{"--namespace", ns, "--registry-addr", reg.Addr, "--eventbus-addr", bus.Addr().String(),
			"--context-length", "4096", "--speedup-ratio", "0"}); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Complete(); err != nil {
			t.Fatal(err)
		}
		cfg.Transport = plane(transport.PlaneHTTP)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		cfg.DrainTimeout = 5 * time.Second
		mctx, mcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mocker.Run(mctx, cfg, slog.New(slog.DiscardHandler), nil) }()
		t.Cleanup(func() {
			mcancel()
			if err := <-done; err != nil {
				t.Errorf("mocker %d: %v", i, err)
			}
		})
	}
	w := startWorker(t, node, reg.Addr, bus.Addr().String(), workerOpts{namespace: ns, model: qwen3.ModelName, blockSize: 16, leaseTTL: 10})

	var cfg frontend.Config
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cfg.HTTPAddr, cfg.RouterMode, cfg.Namespace = "127.0.0.1:0", "round-robin", ns
	cfg.RegistryAddr, cfg.EventbusAddr = reg.Addr, bus.Addr().String()
	cfg.ShutdownTimeout = 5 * time.Second
	// pkg/transport's client speaks the one plane it is built for, so the
	// whole fleet serves http, the plane the Node worker serves.
	cfg.Transport = plane(transport.PlaneHTTP)
	fctx, fcancel := context.WithCancel(ctx)
	fe, err := frontend.Start(fctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fcancel()
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(func() {
		fcancel()
		if err := fe.Wait(); err != nil {
			t.Errorf("frontend: %v", err)
		}
		tr.CloseIdleConnections()
	})
	hc := &http.Client{Transport: tr}
	url := "http://" + fe.Addr().String()

	// Three instances of one model, the Node worker's among them.
	w.Logs.WaitFor(ctx, t, "worker registered", nil)
	for {
		var h struct {
			Instances int `json:"instances"`
		}
		resp, err := hc.Get(url + "/health")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		if err == nil && h.Instances == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the frontend sees %d instances; want 3 (%v)", h.Instances, err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	const chats = 6
	for i := range chats {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Hello number %d from Go"}],"max_tokens":6}`, qwen3.ModelName, i)
		resp, err := hc.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 ||
			out.Choices[0].FinishReason != "length" || out.Usage.CompletionTokens != 6 {
			t.Fatalf("chat %d: %s %s", i, resp.Status, raw)
		}
	}
	// Round-robin over three instances: the Node worker answered a third.
	if got := len(w.Logs.Lines("generate done", nil)); got != chats/3 {
		t.Errorf("the Node worker answered %d of %d chats; want %d", got, chats, chats/3)
	}
}

// TestNodeWorkerProtocol checks what the conformance rows do not: HTTP/1.1
// beside h2c, the typed errors, and a new registration after the lease is
// taken away, with a cleared event first under the new instance id.
func TestNodeWorkerProtocol(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	const ns = "nodeproto"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	etcd, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busClient := eventbustest.Client(t, bus.Addr().String())
	kv, err := busClient.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns, FilterSubject: ns + ".backend.kv_cache_update",
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	dc, watch := watchInstances(t, reg.Addr, ns)
	defer dc.Close()
	defer watch.Close()
	w := startWorker(t, node, reg.Addr, bus.Addr().String(), workerOpts{namespace: ns, model: "test/echo", blockSize: 4, leaseTTL: 5})
	in := conformance.WaitInstances(ctx, t, watch, 1, w.Logs)[0]
	base := in.Transport.GetHttp()
	if in.Role != commonv1.Role_ROLE_AGG {
		t.Fatalf("registered role %v, want the default agg", in.Role)
	}

	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: base}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

	t.Run("HTTP/1.1", func(t *testing.T) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{TokenIds: prompt, MaxTokens: 3})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/generate", bytes.NewReader(payload))
		req.Header.Set("X-Request-Id", "h1")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || resp.Header.Get("Content-Type") != "application/x-switchyard-frames" {
			t.Fatalf("response %s %s, Content-Type %q", resp.Proto, resp.Status, resp.Header.Get("Content-Type"))
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var types []byte
		var tokens []uint32
		for len(body) >= 5 {
			typ, n := body[0], binary.BigEndian.Uint32(body[1:5])
			r := &workerv1.GenerateResponse{}
			if typ == 2 {
				if err := proto.Unmarshal(body[5:5+n], r); err != nil {
					t.Fatal(err)
				}
				tokens = append(tokens, r.TokenIds...)
			}
			types = append(types, typ)
			body = body[5+n:]
		}
		if !bytes.Equal(types, []byte{2, 2, 2, 3}) || fmt.Sprint(tokens) != "[1 2 3]" || len(body) != 0 {
			t.Errorf("frames %v with tokens %v and %d bytes left; want three data frames of tokens 1 2 3 and an end frame", types, tokens, len(body))
		}
		w.Logs.WaitFor(ctx, t, "generate done", map[string]any{"request_id": "h1"})
	})

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name     string
			endpoint string
			payload  []byte
			code     string
		}{
			{"undecodable payload", "generate", []byte{0xff, 0xff, 0xff}, "invalid_argument"},
			{"empty prompt", "generate", nil, "invalid_argument"},
			{"unknown endpoint", "nope", nil, transport.CodeNoHandler},
			{"over the context", "generate", func() []byte {
				b, _ := proto.Marshal(&workerv1.GenerateRequest{TokenIds: make([]uint32, 5000)})
				return b
			}(), "invalid_argument"},
			// What the echo engine cannot do is refused, not ignored.
			{"guided decoding", "generate", func() []byte {
				b, _ := proto.Marshal(&workerv1.GenerateRequest{TokenIds: []uint32{1, 2}, GuidedDecoding: &workerv1.GuidedDecoding{
					Format: &workerv1.GuidedDecoding_JsonObject{JsonObject: true}}})
				return b
			}(), transport.CodeUnimplemented},
			{"prompt log probabilities", "generate", func() []byte {
				one := uint32(1)
				b, _ := proto.Marshal(&workerv1.GenerateRequest{TokenIds: []uint32{1, 2}, PromptLogprobs: &one})
				return b
			}(), transport.CodeUnimplemented},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				st, err := client.Call(ctx, addr, tt.endpoint, nil, tt.payload)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				_, err = st.Recv()
				var he *transport.HandlerError
				if !errors.As(err, &he) || he.Code != tt.code {
					t.Errorf("Recv = %v; want a handler error with code %q", err, tt.code)
				}
			})
		}
	})

	t.Run("registers again after losing its lease", func(t *testing.T) {
		// Only the worker holds its lease token: the lease is revoked in
		// etcd itself, as an operator would.
		etcd.RevokeLease(ctx, in.InstanceId)
		// The watch sees the old instance go and a new one come, on the
		// same address.
		var next *registryv1.Instance
		for next == nil {
			for _, it := range conformance.WaitInstances(ctx, t, watch, 1, w.Logs) {
				if it.InstanceId != in.InstanceId {
					next = it
				}
			}
			if next == nil {
				select {
				case <-watch.Changed():
				case <-ctx.Done():
					t.Fatalf("no new instance; the worker logged:\n%s", w.Logs.String())
				}
			}
		}
		if next.Transport.GetHttp() != base {
			t.Errorf("new instance serves %q; want the same %q", next.Transport.GetHttp(), base)
		}
		cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: ns}})
		for err == nil && (len(cards.Cards) != 1 || cards.Cards[0].InstanceId != next.InstanceId) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			cards, err = dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: ns}})
		}
		if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != next.InstanceId {
			t.Fatalf("model cards = %v, %v; want one of instance %x", cards, err, next.InstanceId)
		}
		// Its first KV event says its cache is empty; the next ones follow.
		if _, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "after", TokenIds: prompt, MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		var batches []*workerv1.KvEventBatch
		for {
			ev, err := kv.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ev.Headers[wire.HeaderType], "switchyard.worker.v1.KvEventBatch"; got != want {
				t.Errorf("%s header = %q; want %q", wire.HeaderType, got, want)
			}
			b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
			if err != nil {
				t.Fatal(err)
			}
			if b.InstanceId == next.InstanceId {
				batches = append(batches, b)
			}
			if len(batches) == 2 {
				break
			}
		}
		if batches[0].FirstEventId != 1 || len(batches[0].Events) != 1 || batches[0].Events[0].GetCleared() == nil ||
			batches[1].FirstEventId != 2 || len(batches[1].Events[0].GetStored().GetBlocks()) != 2 {
			t.Errorf("KV batches of the new instance = %v; want a cleared event (id 1), then the two blocks stored (id 2)", batches)
		}
	})

	parent := t // the restarted registry must outlive the subtest
	t.Run("keeps serving while the registry is away, registers again once it is back", func(t *testing.T) {
		cur := conformance.WaitInstances(ctx, t, watch, 1, w.Logs)[0]
		regAddr := reg.Addr
		reg.Stop()
		// Past the lease's deadline the worker goes on asking, and serving.
		w.Logs.WaitFor(ctx, t, "lease deadline passed without reaching the registry; still trying", map[string]any{"lease": fmt.Sprintf("%x", cur.InstanceId)})
		if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "away", TokenIds: prompt, MaxTokens: 2}); err != nil || len(got) != 2 {
			t.Fatalf("generate with the registry away = %d responses, %v; want 2", len(got), err)
		}
		// No keep-alive reached etcd, so it drops the lease; the registry
		// comes back on its address and says so to the worker.
		etcd.RevokeLease(ctx, cur.InstanceId)
		registrytest.StartRegistryAt(parent, etcd.Endpoints, regAddr)
		for {
			items := watch.Items()
			if len(items) == 1 && items[0].InstanceId != cur.InstanceId {
				break
			}
			select {
			case <-watch.Changed():
			case <-w.Done():
				t.Fatalf("the worker exited; it logged:\n%s", w.Logs.String())
			case <-ctx.Done():
				t.Fatalf("no new registration after the registry came back; the worker logged:\n%s", w.Logs.String())
			}
		}
	})

	// SIGTERM still ends it cleanly after a re-registration.
	if err := w.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := w.Wait(t); code != 0 {
		t.Errorf("exit code %d after SIGINT; want 0", code)
	}
}
