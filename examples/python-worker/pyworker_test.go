// Package pyworker_test runs the example Python worker (worker.py) against a
// real registry and eventbus in this process: the polyglot proof that a
// worker built on the generated Python stubs registers, keeps its lease,
// serves generate on the request plane to Switchyard's Go client and
// publishes KV events with the block hashes the router computes.
package pyworker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

func TestMain(m *testing.M) {
	// The tests wait on worker processes through outages and restarts.
	testwait.AtLeastParallel(4)
	testleak.VerifyTestMain(m)
}

// python is Debian's interpreter: another python3 earlier on PATH may lack
// the Debian packages.
const python = "/usr/bin/python3"

// debianPackages are what worker.py imports beyond the standard library.
const debianPackages = "python3-grpcio python3-protobuf python3-xxhash python3-h2"

const (
	namespace = "pytest"
	component = "backend"
	blockSize = 4
	leaseTTL  = 3 * time.Second
)

// requirePython skips the test on a developer machine without the Python
// packages and fails it in CI, where they must be installed.
func requirePython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import grpc, google.protobuf, xxhash, h2").CombinedOutput()
	if err == nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	msg := fmt.Sprintf("the Python worker needs the Debian packages %s (apt-get install %[1]s): %s cannot import grpc, google.protobuf, xxhash and h2: %v: %s",
		debianPackages, python, err, lines[len(lines)-1])
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// logBuffer collects the worker's stderr (JSON lines) and lets the test
// wait for a line.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{}, 1)} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits for a log line whose msg is msg and whose attributes
// include attrs.
func (b *logBuffer) waitFor(ctx context.Context, t *testing.T, msg string, attrs map[string]any) {
	t.Helper()
	b.waitForN(ctx, t, msg, 1, attrs)
}

// first is the first log line whose msg is msg, nil if none.
func (b *logBuffer) first(msg string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			return line
		}
	}
	return nil
}

// waitForN waits for n log lines whose msg is msg and whose attributes
// include attrs (all of them, with no attrs).
func (b *logBuffer) waitForN(ctx context.Context, t *testing.T, msg string, n int, attrs ...map[string]any) {
	t.Helper()
	for {
		got := 0
		sc := bufio.NewScanner(strings.NewReader(b.String()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != msg {
				continue
			}
			match := true
			for _, a := range attrs {
				for k, v := range a {
					if line[k] != v {
						match = false
					}
				}
			}
			if match {
				got++
			}
		}
		if got >= n {
			return
		}
		select {
		case <-b.changed:
		case <-ctx.Done():
			t.Fatalf("%d of %d log lines %q with %v; the worker logged:\n%s", got, n, msg, attrs, b.String())
		}
	}
}

// pyWorker is a running worker.py.
type pyWorker struct {
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{} // closed when the process has exited and been waited for
	err  error         // cmd.Wait's error, after done
}

func startWorker(t *testing.T, regAddr, busAddr string, extra ...string) *pyWorker {
	t.Helper()
	cmd := exec.Command(python, append([]string{"worker.py",
		"--namespace", namespace, "--component", component, "--endpoint", "generate",
		"--model-name", "test/echo", "--block-size", fmt.Sprint(blockSize), "--context-length", "1024",
		"--registry-addr", regAddr, "--eventbus-addr", busAddr,
		"--lease-ttl", fmt.Sprint(int(leaseTTL / time.Second)), "--drain-timeout", "10", "--token-delay", "0.005", "--load-interval", "0.2"}, extra...)...)
	// The request plane's settings come from the variables the Go side uses.
	cmd.Env = append(os.Environ(), "DYN_REQUEST_PLANE=http", "DYN_HTTP_RPC_HOST=127.0.0.1", "DYN_HTTP_RPC_PORT=0")
	w := &pyWorker{cmd: cmd, logs: newLogBuffer(), done: make(chan struct{})}
	cmd.Stdout = w.logs
	cmd.Stderr = w.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s worker.py: %v", python, err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("worker.py logged:\n%s", w.logs.String())
		}
	})
	return w
}

// stop sends SIGTERM and returns the exit code.
func (w *pyWorker) stop(t *testing.T) int {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	return w.wait(t)
}

func (w *pyWorker) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker.py did not exit; it logged:\n%s", w.logs.String())
	}
	return w.cmd.ProcessState.ExitCode()
}

// subscribeKV subscribes, through the eventbus at addr, to every KV event
// batch of the test's component from the start of the stream.
func subscribeKV(ctx context.Context, t *testing.T, addr string) *eventbusclient.Subscription {
	t.Helper()
	sub, err := eventbustest.Client(t, addr).Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: namespace,
		FilterSubject: wire.KVEventsSubject(namespace, component), DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// watchInstances dials the registry at addr and watches the instances of the
// test's namespace; the caller closes both.
func watchInstances(t *testing.T, addr string) (*registryclient.Client, *registryclient.Watcher[*registryv1.Instance]) {
	t.Helper()
	dc, err := registryclient.Dial([]string{addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dc, registryclient.WatchInstances(dc, &registryv1.InstanceFilter{Namespace: namespace}, registryclient.WatchOptions[*registryv1.Instance]{})
}

// waitInstances waits until the watcher holds n instances.
func waitInstances(ctx context.Context, t *testing.T, w *registryclient.Watcher[*registryv1.Instance], n int, logs *logBuffer) []*registryv1.Instance {
	t.Helper()
	for {
		if items := w.Items(); len(items) == n {
			return items
		}
		select {
		case <-w.Changed():
		case <-ctx.Done():
			t.Fatalf("waiting for %d instances, have %v; the worker logged:\n%s", n, w.Items(), logs.String())
		}
	}
}

// tokens is the generate stream the echo engine must produce: the prompt
// repeated, one token per response, the last with finish and usage.
func tokens(prompt []uint32, n int, finish workerv1.FinishReason) []*workerv1.GenerateResponse {
	var out []*workerv1.GenerateResponse
	for i := range n {
		out = append(out, &workerv1.GenerateResponse{TokenIds: []uint32{prompt[i%len(prompt)]}})
	}
	last := out[n-1]
	last.FinishReason = finish
	last.Usage = &workerv1.Usage{PromptTokens: uint32(len(prompt)), CompletionTokens: uint32(n)}
	return out
}

func seq(from, to uint32) []uint32 {
	var out []uint32
	for t := from; t <= to; t++ {
		out = append(out, t)
	}
	return out
}

func TestPythonWorker(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busClient := eventbustest.Client(t, bus.Addr().String())
	sub, err := busClient.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: namespace,
		FilterSubject: namespace + "." + component + ".kv_cache_update", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	dc, watch := watchInstances(t, reg.Addr)
	defer dc.Close()
	defer watch.Close()

	w := startWorker(t, reg.Addr, bus.Addr().String())
	in := waitInstances(ctx, t, watch, 1, w.logs)[0]
	registered := time.Now()
	if in.Component != component || in.Endpoint != "generate" || !strings.HasPrefix(in.Transport.GetHttp(), "http://127.0.0.1:") ||
		!strings.HasSuffix(in.Transport.GetHttp(), "/v1/rpc") {
		t.Fatalf("registered instance = %v; want %s/generate on http://127.0.0.1:*/v1/rpc", in, component)
	}
	// The model card follows the instance; the worker logs once both are in.
	w.logs.waitFor(ctx, t, "worker registered", map[string]any{"instance": fmt.Sprintf("%x", in.InstanceId)})
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantCard := &registryv1.ModelCard{Namespace: namespace, Component: component, Endpoint: "generate", InstanceId: in.InstanceId,
		ModelName: "test/echo", BlockSize: blockSize, ContextLength: 1024}
	if len(cards.Cards) != 1 {
		t.Fatalf("ListModels = %v; want one card", cards.Cards)
	}
	if diff := cmp.Diff(wantCard, cards.Cards[0], protocmp.Transform()); diff != "" {
		t.Errorf("model card (-want +got):\n%s", diff)
	}

	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: in.Transport.GetHttp()}
	prompt := seq(1, 10) // two full blocks of 4 and a partial one

	t.Run("generate over h2c", func(t *testing.T) {
		got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "r1", TokenIds: prompt, MaxTokens: 5})
		if err != nil {
			t.Fatalf("generate: %v (after %d responses)", err, len(got))
		}
		if diff := cmp.Diff(tokens(prompt, 5, workerv1.FinishReason_FINISH_REASON_LENGTH), got, protocmp.Transform()); diff != "" {
			t.Errorf("responses (-want +got):\n%s", diff)
		}
		// A stop token ends the stream early; the blocks are cached now.
		got, err = workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "r2", TokenIds: prompt, MaxTokens: 50,
			Stop: &workerv1.StopConditions{StopTokenIds: []uint32{3}}})
		want := tokens(prompt, 3, workerv1.FinishReason_FINISH_REASON_STOP)
		want[2].Usage.CachedPromptTokens = 8
		if err != nil {
			t.Fatalf("generate with a stop token: %v", err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("responses with a stop token (-want +got):\n%s", diff)
		}
	})

	t.Run("concurrent calls share one h2c connection", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				p := []uint32{uint32(100 + i), uint32(200 + i), uint32(300 + i)}
				got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: fmt.Sprint("c", i), TokenIds: p, MaxTokens: 20})
				if err == nil {
					if diff := cmp.Diff(tokens(p, 20, workerv1.FinishReason_FINISH_REASON_LENGTH), got, protocmp.Transform()); diff != "" {
						err = fmt.Errorf("call %d (-want +got):\n%s", i, diff)
					}
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("request larger than the flow-control window", func(t *testing.T) {
		// 500k tokens of 5 bytes each (2.5 MB) exceed the 1 MiB windows the
		// worker grants up front, so the upload goes on only as it sends
		// WINDOW_UPDATEs; the prompt is then refused for exceeding the context.
		big := make([]uint32, 500_000)
		for i := range big {
			big[i] = 1 << 28
		}
		got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{TokenIds: big})
		var he *transport.HandlerError
		if !errors.As(err, &he) || he.Code != "invalid_argument" || !strings.Contains(he.Message, "500000 tokens") {
			t.Errorf("generate with a 500k-token prompt = %d responses, %v; want invalid_argument naming 500000 tokens", len(got), err)
		}
	})

	t.Run("KV events", func(t *testing.T) {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := wire.KVEventsMsgID(in.InstanceId, 0, 1); ev.MsgId != want {
			t.Errorf("msg id = %q; want %q", ev.MsgId, want)
		}
		if got, want := ev.Headers[wire.HeaderType], "switchyard.worker.v1.KvEventBatch"; got != want {
			t.Errorf("%s header = %q; want %q", wire.HeaderType, got, want)
		}
		batch, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
		if err != nil {
			t.Fatal(err)
		}
		var blocks []*workerv1.KvBlock
		for _, b := range kvhash.Hashes(prompt, blockSize, nil) {
			blocks = append(blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
		}
		want := &workerv1.KvEventBatch{InstanceId: in.InstanceId, FirstEventId: 1, Events: []*workerv1.KvCacheEvent{
			{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Blocks: blocks}}}}}
		if diff := cmp.Diff(want, batch, protocmp.Transform()); diff != "" {
			t.Errorf("KV event batch (-want +got):\n%s", diff)
		}
		// A prompt that extends a cached prefix reports only its new block,
		// chained to the cached one.
		longer := append(seq(1, 8), 40, 41, 42, 43)
		if _, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "r3", TokenIds: longer, MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		ev, err = sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(ev.Payload, batch); err != nil {
			t.Fatal(err)
		}
		hs := kvhash.Hashes(longer, blockSize, nil)
		want = &workerv1.KvEventBatch{InstanceId: in.InstanceId, FirstEventId: 2, Events: []*workerv1.KvCacheEvent{
			{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{ParentSequenceHash: proto.Uint64(hs[1].Sequence),
				Blocks: []*workerv1.KvBlock{{SequenceHash: hs[2].Sequence, LocalHash: hs[2].Local}}}}}}}
		if diff := cmp.Diff(want, batch, protocmp.Transform()); diff != "" {
			t.Errorf("KV event batch of an extended prefix (-want +got):\n%s", diff)
		}
	})

	t.Run("load metrics", func(t *testing.T) {
		sub, err := busClient.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: namespace,
			FilterSubject: namespace + "." + component + ".load_metrics", AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ev.Headers[wire.HeaderType], "switchyard.worker.v1.LoadMetrics"; got != want {
			t.Errorf("%s header = %q; want %q", wire.HeaderType, got, want)
		}
		m, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
		if err != nil {
			t.Fatal(err)
		}
		if m.InstanceId != in.InstanceId || m.KvBlocksTotal != 8192 || m.KvBlocksUsed != 3 || m.Timestamp == nil {
			t.Errorf("load metrics = %v; want instance %x, 3 of 8192 KV blocks used, a timestamp", m, in.InstanceId)
		}
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

	t.Run("client cancel stops generation over h2c", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "cancel-h2", TokenIds: prompt})
		st, err := client.Call(cctx, addr, "generate", transport.Headers{transport.HeaderRequestID: "cancel-h2"}, payload)
		if err != nil {
			ccancel()
			t.Fatal(err)
		}
		for range 3 {
			if _, err := st.Recv(); err != nil {
				t.Fatalf("Recv: %v", err)
			}
		}
		ccancel()
		st.Close()
		w.logs.waitFor(ctx, t, "generate cancelled", map[string]any{"request_id": "cancel-h2"})
	})

	t.Run("HTTP/1.1", func(t *testing.T) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{TokenIds: prompt, MaxTokens: 2})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, addr.Addr+"/generate", bytes.NewReader(payload))
		req.Header.Set("X-Request-Id", "h1")
		resp, err := hc.Do(req)
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
		var got []*workerv1.GenerateResponse
		for len(body) >= 5 {
			typ, n := body[0], binary.BigEndian.Uint32(body[1:5])
			p := body[5 : 5+n]
			body = body[5+n:]
			if typ == 3 { // end frame
				if n != 0 || len(body) != 0 {
					t.Errorf("end frame of %d bytes followed by %d bytes", n, len(body))
				}
				break
			}
			if typ != 2 {
				t.Fatalf("frame type %d: %q", typ, p)
			}
			r := &workerv1.GenerateResponse{}
			if err := proto.Unmarshal(p, r); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		want := tokens(prompt, 2, workerv1.FinishReason_FINISH_REASON_LENGTH)
		want[1].Usage.CachedPromptTokens = 8
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("responses (-want +got):\n%s", diff)
		}
	})

	t.Run("client disconnect stops generation over HTTP/1.1", func(t *testing.T) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		cctx, ccancel := context.WithCancel(ctx)
		defer ccancel()
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "cancel-h1", TokenIds: prompt})
		req, _ := http.NewRequestWithContext(cctx, http.MethodPost, addr.Addr+"/generate", bytes.NewReader(payload))
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
		ccancel()
		resp.Body.Close()
		w.logs.waitFor(ctx, t, "generate cancelled", map[string]any{"request_id": "cancel-h1"})
	})

	// The lease outlives its TTL only through KeepAlive.
	time.Sleep(time.Until(registered.Add(2 * leaseTTL)))
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
	if err != nil || len(list.Instances) != 1 {
		t.Fatalf("ListInstances two TTLs after registering = %v, %v; want the worker still there", list, err)
	}

	// A request in flight at SIGTERM still runs to its end: the worker
	// deregisters first, then drains.
	inflight := make(chan error, 1)
	payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "drain", TokenIds: prompt, MaxTokens: 100})
	st, err := client.Call(ctx, addr, "generate", nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // it is running
		t.Fatal(err)
	}
	go func() {
		defer st.Close()
		for n := 1; ; n++ {
			_, err := st.Recv()
			switch {
			case errors.Is(err, io.EOF) && n == 100:
				inflight <- nil
				return
			case errors.Is(err, io.EOF):
				inflight <- fmt.Errorf("stream ended after %d responses; want 100", n)
				return
			case err != nil:
				inflight <- fmt.Errorf("after %d responses: %w", n, err)
				return
			}
		}
	}()
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0. It logged:\n%s", code, w.logs.String())
	}
	// It deregistered before exiting, so it is gone now, not a TTL later.
	list, err = dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
	if err != nil || len(list.Instances) != 0 {
		t.Errorf("ListInstances after SIGTERM = %v, %v; want none", list, err)
	}
	cards, err = dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil || len(cards.Cards) != 0 {
		t.Errorf("ListModels after SIGTERM = %v, %v; want none", cards, err)
	}
	waitInstances(ctx, t, watch, 0, w.logs)
	if err := <-inflight; err != nil {
		t.Errorf("request in flight at SIGTERM: %v", err)
	}
}

// TestPythonWorkerRegistersAgainWhenLeaseIsLost revokes the worker's lease
// behind its back: its next keep-alive learns so, and it registers again on
// a new lease (a new instance id) at the same address with the same model
// card, announces a cleared KV cache for the new instance, and keeps serving,
// as pkg/worker does.
func TestPythonWorkerRegistersAgainWhenLeaseIsLost(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	sub := subscribeKV(ctx, t, bus.Addr().String())
	defer sub.Close()
	dc, watch := watchInstances(t, reg.Addr)
	defer dc.Close()
	defer watch.Close()
	w := startWorker(t, reg.Addr, bus.Addr().String())
	first := waitInstances(ctx, t, watch, 1, w.logs)[0]
	w.logs.waitFor(ctx, t, "worker registered", map[string]any{"instance": fmt.Sprintf("%x", first.InstanceId)})
	// Only the worker holds its lease token, so someone else's Deregister
	// is refused; the lease is revoked in etcd itself, as an operator would.
	if _, err := dc.Raw().Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: first.InstanceId}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Deregister of the worker's lease without its token: %v, want PermissionDenied", err)
	}
	etcd.RevokeLease(ctx, first.InstanceId)
	w.logs.waitFor(ctx, t, "lease lost", map[string]any{"lease": fmt.Sprintf("%x", first.InstanceId)})
	w.logs.waitFor(ctx, t, "worker registered again", map[string]any{"previous_instance": fmt.Sprintf("%x", first.InstanceId)})

	// The first KV event of the new instance says its cache is unknown.
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
	if err != nil {
		t.Fatal(err)
	}
	if batch.InstanceId == first.InstanceId || len(batch.Events) != 1 || batch.Events[0].GetCleared() == nil {
		t.Fatalf("first KV event after the lease was lost = %v; want one cleared event of a new instance (was %x)", batch, first.InstanceId)
	}
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
	if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != batch.InstanceId ||
		list.Instances[0].Transport.GetHttp() != first.Transport.GetHttp() {
		t.Fatalf("ListInstances = %v, %v; want instance %x at %s", list, err, batch.InstanceId, first.Transport.GetHttp())
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != batch.InstanceId || cards.Cards[0].ModelName != "test/echo" {
		t.Fatalf("ListModels = %v, %v; want the test/echo card of instance %x", cards, err, batch.InstanceId)
	}
	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: list.Instances[0].Transport.GetHttp()}
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "again", TokenIds: seq(1, 4), MaxTokens: 2}); err != nil || len(got) != 2 {
		t.Fatalf("generate after registering again = %v, %v", got, err)
	}
	select {
	case <-w.done:
		t.Fatalf("worker.py exited after losing its lease: %v", w.err)
	default:
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}

// TestPythonWorkerOutlivesRegistryOutage stops the only registry for longer
// than the lease TTL: the worker keeps serving and keeps trying (it does not
// exit), and once the registry is back and says the lease is gone it
// registers again under a new instance id.
func TestPythonWorkerOutlivesRegistryOutage(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	w := startWorker(t, reg.Addr, bus.Addr().String())
	w.logs.waitFor(ctx, t, "worker registered", nil)
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
	if err != nil || len(list.Instances) != 1 {
		t.Fatalf("ListInstances = %v, %v; want the worker", list, err)
	}
	first := list.Instances[0]
	reg.Stop()
	w.logs.waitFor(ctx, t, "lease deadline passed without reaching the registry; still trying (the lease may outlive the outage)",
		map[string]any{"lease": fmt.Sprintf("%x", first.InstanceId)})
	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: first.Transport.GetHttp()}
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "during", TokenIds: seq(1, 4), MaxTokens: 2}); err != nil || len(got) != 2 {
		t.Fatalf("generate during the outage = %v, %v", got, err)
	}
	// etcd drops the lease about now on its own; revoking it makes that
	// certain instead of racing etcd's expiry.
	etcd.RevokeLease(ctx, first.InstanceId)
	registrytest.StartRegistryAt(t, etcd.Endpoints, reg.Addr)
	w.logs.waitFor(ctx, t, "worker registered again", map[string]any{"previous_instance": fmt.Sprintf("%x", first.InstanceId)})
	list, err = dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
	if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId == first.InstanceId ||
		list.Instances[0].Transport.GetHttp() != first.Transport.GetHttp() {
		t.Fatalf("ListInstances after the outage = %v, %v; want a new instance id at %s", list, err, first.Transport.GetHttp())
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}

// TestPythonUnitTests runs the Python side's own tests (XXH3 block hashes
// against pkg/kvhash's golden values, framing, lease errors, tokenizer names).
func TestPythonUnitTests(t *testing.T) {
	t.Parallel()
	requirePython(t)
	out, err := exec.Command(python, "-m", "unittest", "-v", "test_worker.py").CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
}

// TestPythonWorkerRegistersItsRole: --disaggregation-mode is the role the
// Python worker registers, agg by default.
func TestPythonWorkerRegistersItsRole(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tests := []struct {
		args []string
		want commonv1.Role
	}{
		{nil, commonv1.Role_ROLE_AGG},
		{[]string{"--disaggregation-mode", "decode"}, commonv1.Role_ROLE_DECODE},
	}
	for _, tt := range tests {
		t.Run(tt.want.String(), func(t *testing.T) {
			_, reg := registrytest.Start(t)
			_, bus := eventbustest.Start(t)
			dc, watch := watchInstances(t, reg.Addr)
			defer dc.Close()
			defer watch.Close()
			w := startWorker(t, reg.Addr, bus.Addr().String(), tt.args...)
			in := waitInstances(ctx, t, watch, 1, w.logs)[0]
			if in.Role != tt.want {
				t.Fatalf("registered role %v, want %v", in.Role, tt.want)
			}
			if code := w.stop(t); code != 0 {
				t.Fatalf("worker.py exited with %d", code)
			}
		})
	}
}
