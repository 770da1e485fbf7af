// Package conformance is the suite every Switchyard worker passes, whatever
// its language: the same table of rows (register, duplicate refused,
// keep-alive, model card, KV events the router indexes, generate with
// cancellation, SIGTERM drain), run against a worker process through the
// generated stubs and real services in this process (embedded etcd behind a
// registry, embedded NATS behind an eventbus, a KV router).
//
// A worker takes part by a [Worker]: how to start it with given [Settings].
// Its generate endpoint must answer a GenerateRequest with exactly
// max_tokens responses of one token each, the last with finish reason LENGTH
// and usage, one token every few milliseconds (so a cancellation lands
// mid-stream), and it must publish LoadMetrics with running_requests on
// {namespace}.{component}.load_metrics. The rows check nothing else of what
// it generates. See examples/WORKERS.md for the whole contract.
package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// Settings are what the suite asks of a worker process.
type Settings struct {
	Namespace, Component, Endpoint string
	ModelName                      string
	BlockSize, ContextLength       int
	RegistryAddr, EventbusAddr     string
	LeaseTTL                       time.Duration
	// TokenizerDir holds tokenizer.json(.gz) and tokenizer_config.json, for
	// a worker that uploads its tokenizer.
	TokenizerDir string
	// DrainTimeout bounds the drain at SIGTERM.
	DrainTimeout time.Duration
}

// Worker describes one worker implementation.
type Worker struct {
	// Name labels the rows, such as "node".
	Name string
	// Require skips (or, with CI=true, fails) the test when the worker's
	// toolchain is missing.
	Require func(t testing.TB)
	// Command is the process of one worker with s; the suite sets its
	// output and starts it. Its request plane settings come from the DYN_*
	// variables the suite adds to the environment.
	Command func(t testing.TB, s Settings) *exec.Cmd
	// Plane is the request plane the suite asks for (DYN_REQUEST_PLANE).
	Plane transport.Plane
	// UploadsTokenizer says the worker puts TokenizerDir's files on its
	// model card; the model card row then fetches and checks them.
	UploadsTokenizer bool
	// Unsupported names rows the worker does not implement yet, with why;
	// they are skipped and reported as such.
	Unsupported map[string]string
}

// Rows are the suite's rows, in the order they run.
var Rows = []string{"register", "duplicate refused", "model card", "generate", "KV events indexed by the router",
	"generate with cancellation", "keep-alive", "registers again after losing its lease", "SIGTERM drain"}

// TokenizerDir is the Qwen3 tokenizer of pkg/tokenizer/qwen3, from a test in
// any package of the repository.
func TokenizerDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "pkg", "tokenizer", "qwen3")
		}
	}
	t.Fatal("no go.mod above the working directory")
	return ""
}

// Run runs every row against one process of w, and logs which rows passed.
func Run(t *testing.T, w Worker) {
	if w.Require != nil {
		w.Require(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busClient := eventbustest.Client(t, bus.Addr().String())
	router, _ := routertest.Start(t, ctx, routertest.Config(reg.Addr, bus.Addr().String()))
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()

	// The worker reaches the registry through a proxy, which can hold its
	// registration on a new lease (see the row "registers again after
	// losing its lease").
	var holdRegister atomic.Pointer[heldCall]
	proxy := StartGRPCProxy(t, reg.Addr, ProxyHooks{Request: func(method string, msg []byte) {
		if h := holdRegister.Load(); h != nil && method == registryv1.RegistryService_Register_FullMethodName {
			h.hold(msg)
		}
	}})
	s := Settings{Namespace: "conf", Component: "backend", Endpoint: "generate", ModelName: "conformance/" + w.Name,
		BlockSize: 4, ContextLength: 4096, RegistryAddr: proxy, EventbusAddr: bus.Addr().String(),
		LeaseTTL: 2 * time.Second, TokenizerDir: TokenizerDir(t), DrainTimeout: 20 * time.Second}
	kv, err := busClient.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: s.Namespace,
		FilterSubject: wire.KVEventsSubject(s.Namespace, s.Component), DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	watch := registryclient.WatchInstances(dc, &registryv1.InstanceFilter{Namespace: s.Namespace}, registryclient.WatchOptions[*registryv1.Instance]{})
	defer watch.Close()
	load, err := busClient.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: s.Namespace,
		FilterSubject: s.Namespace + "." + s.Component + ".load_metrics", AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer load.Close()

	cmd := w.Command(t, s)
	cmd.Env = append(cmd.Env, "DYN_REQUEST_PLANE="+string(w.Plane), "DYN_TCP_RPC_HOST=127.0.0.1", "DYN_TCP_RPC_PORT=0",
		"DYN_HTTP_RPC_HOST=127.0.0.1", "DYN_HTTP_RPC_PORT=0")
	p := StartProcess(t, cmd)

	tc := transport.DefaultConfig()
	tc.Plane = w.Plane
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	results := map[string]bool{}
	var in *registryv1.Instance
	var addr transport.Address
	var registered time.Time
	row := func(name string, f func(t *testing.T)) {
		results[name] = t.Run(name, func(t *testing.T) {
			if in == nil && name != "register" {
				t.Skip("the worker did not register")
			}
			if why, ok := w.Unsupported[name]; ok {
				t.Skip("unsupported: " + why)
			}
			f(t)
		})
	}
	defer func() {
		var lines []string
		for _, r := range Rows {
			mark := "FAIL"
			if why, ok := w.Unsupported[r]; ok {
				mark = "unsupported (" + why + ")"
			} else if ok, ran := results[r]; ran && ok {
				mark = "pass"
			} else if !ran {
				mark = "not run"
			}
			lines = append(lines, fmt.Sprintf("  %-40s %s", r, mark))
		}
		t.Logf("conformance of the %s worker:\n%s", w.Name, strings.Join(lines, "\n"))
	}()

	row("register", func(t *testing.T) {
		got := WaitInstances(ctx, t, watch, 1, p.Logs)[0]
		registered = time.Now()
		if got.Component != s.Component || got.Endpoint != s.Endpoint || got.InstanceId == 0 {
			t.Fatalf("registered instance = %v; want %s/%s/%s", got, s.Namespace, s.Component, s.Endpoint)
		}
		a, ok := addressOf(got.Transport)
		if !ok {
			t.Fatalf("instance transport %v names no address", got.Transport)
		}
		if a.Kind != w.Plane {
			t.Fatalf("instance serves %s; the suite asked for %s", a.Kind, w.Plane)
		}
		in, addr = got, a
		// The model card goes in after the instance; wait for it.
		for {
			cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: s.Namespace}})
			if err == nil && len(cards.Cards) > 0 {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no model card: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	})

	row("duplicate refused", func(t *testing.T) {
		// Only the worker holds its lease's token: someone else registering
		// on its lease, or ending it, is PermissionDenied, and the worker's
		// record stays as it was. (A duplicate on the worker's own lease is
		// AlreadyExists; the registry's tests cover it.)
		dup := proto.Clone(in).(*registryv1.Instance)
		dup.Metadata = map[string]string{"overwritten": "yes"}
		_, err := dc.Raw().Register(ctx, &registryv1.RegisterRequest{Instance: dup, LeaseId: in.InstanceId})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Register on the worker's lease without its token = %v; want PermissionDenied", err)
		}
		if _, err := dc.Raw().Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: in.InstanceId}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Deregister of the worker's lease without its token = %v; want PermissionDenied", err)
		}
		list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: s.Namespace}})
		if err != nil || len(list.Instances) != 1 || list.Instances[0].Metadata["overwritten"] != "" {
			t.Fatalf("instances after the stranger's calls = %v, %v; want the worker's own, unchanged", list, err)
		}
	})

	row("model card", func(t *testing.T) {
		cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: s.Namespace}})
		if err != nil || len(cards.Cards) != 1 {
			t.Fatalf("ListModels = %v, %v; want one card", cards, err)
		}
		c := cards.Cards[0]
		if c.ModelName != s.ModelName || c.BlockSize != uint32(s.BlockSize) || c.ContextLength != uint32(s.ContextLength) ||
			c.InstanceId != in.InstanceId || c.Component != s.Component || c.Endpoint != s.Endpoint {
			t.Errorf("model card = %v; want %s, block size %d, context %d, instance %x", c, s.ModelName, s.BlockSize, s.ContextLength, in.InstanceId)
		}
		if !w.UploadsTokenizer {
			if len(c.Tokenizer) != 0 {
				t.Errorf("model card lists tokenizer files %v, but the worker is said not to upload any", c.Tokenizer)
			}
			return
		}
		checkTokenizer(ctx, t, busClient, s.TokenizerDir, c.Tokenizer)
	})

	prompt := make([]uint32, 3*s.BlockSize+1) // three full blocks and a partial one
	for i := range prompt {
		prompt[i] = uint32(1000 + i*7)
	}

	row("generate", func(t *testing.T) {
		got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "conf-1", TokenIds: prompt, MaxTokens: 5})
		if err != nil {
			t.Fatalf("generate: %v (after %d responses)", err, len(got))
		}
		if len(got) != 5 {
			t.Fatalf("generate of 5 tokens gave %d responses", len(got))
		}
		for i, r := range got {
			if len(r.TokenIds) != 1 {
				t.Errorf("response %d has %d tokens; want 1", i, len(r.TokenIds))
			}
		}
		last := got[4]
		if last.FinishReason != workerv1.FinishReason_FINISH_REASON_LENGTH || last.Usage.GetPromptTokens() != uint32(len(prompt)) ||
			last.Usage.GetCompletionTokens() != 5 {
			t.Errorf("last response = %v; want finish LENGTH and usage of %d prompt and 5 completion tokens", last, len(prompt))
		}
	})

	row("KV events indexed by the router", func(t *testing.T) {
		// The generate above cached the prompt's full blocks; the worker's
		// events must carry the hashes the router computes from the same
		// tokens, so the router sees the whole prefix cached on it.
		want := uint32(len(kvhash.Hashes(prompt, s.BlockSize, nil)))
		target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: s.ModelName}}
		var last *routerv1.QueryOverlapsResponse
		for {
			resp, err := router.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: prompt})
			if err == nil {
				last = resp
				for _, c := range resp.Candidates {
					if c.InstanceId == in.InstanceId && c.OverlapBlocks == want {
						return
					}
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the router never saw %d blocks cached on %x: last answer %v, %v", want, in.InstanceId, last, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	})

	row("generate with cancellation", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		defer ccancel()
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "conf-cancel", TokenIds: prompt, MaxTokens: 3000})
		st, err := client.Call(cctx, addr, s.Endpoint, transport.Headers{transport.HeaderRequestID: "conf-cancel"}, payload)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := st.Recv(); err != nil {
				t.Fatalf("Recv: %v", err)
			}
		}
		// The request runs now; the worker must say so in its load, then
		// stop generating once the caller goes away, which its load shows.
		waitLoad(ctx, t, load, in.InstanceId, time.Time{}, func(m *workerv1.LoadMetrics) bool { return m.RunningRequests >= 1 })
		ccancel()
		st.Close()
		cancelled := time.Now()
		waitLoad(ctx, t, load, in.InstanceId, cancelled, func(m *workerv1.LoadMetrics) bool { return m.RunningRequests == 0 })
	})

	row("keep-alive", func(t *testing.T) {
		// The lease outlives two TTLs only through KeepAlive.
		time.Sleep(time.Until(registered.Add(2*s.LeaseTTL + s.LeaseTTL/2)))
		list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: s.Namespace}})
		if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != in.InstanceId {
			t.Fatalf("instances 2.5 TTLs after registering = %v, %v; want the worker's %x", list, err, in.InstanceId)
		}
	})

	row("registers again after losing its lease", func(t *testing.T) {
		// The lease is revoked behind the worker's back, as an etcd that
		// expired it would: the worker must register again under a new
		// lease (a new instance id, the same address and model) and keep
		// serving, not exit.
		//
		// Its registration on the new lease is held at the proxy. A request
		// meanwhile (the worker serves throughout) must not publish KV
		// events under the new instance id: a router that gets an event of
		// an instance its registry does not list asks the registry, and
		// when the registry says no it drops that instance's events for
		// good, taking it for a departed worker's.
		held := &heldCall{lease: make(chan uint64, 1), release: make(chan struct{})}
		holdRegister.Store(held)
		unhold := func() {
			holdRegister.Store(nil)
			held.free()
		}
		defer unhold()
		etcd.RevokeLease(ctx, in.InstanceId)
		var pending uint64
		select {
		case pending = <-held.lease:
		case <-p.Done():
			t.Fatalf("the worker exited after losing its lease; it logged:\n%s", p.Logs.String())
		case <-ctx.Done():
			t.Fatalf("the worker did not register again; it logged:\n%s", p.Logs.String())
		}
		meanwhile := make([]uint32, 2*s.BlockSize) // two full blocks no request stored before
		for i := range meanwhile {
			meanwhile[i] = uint32(50000 + i*3)
		}
		if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "conf-meanwhile", TokenIds: meanwhile, MaxTokens: 1}); err != nil || len(got) != 1 {
			t.Fatalf("generate while the worker registers again = %d responses, %v; want 1", len(got), err)
		}
		first := kvhash.Hashes(meanwhile, s.BlockSize, nil)[0].Sequence
		for stored := false; !stored; {
			b := nextKV(ctx, t, kv)
			if b.InstanceId == pending {
				t.Fatalf("KV batch %v of instance %x before its registration answered", b, pending)
			}
			for _, ev := range b.Events {
				if bl := ev.GetStored().GetBlocks(); len(bl) > 0 && bl[0].SequenceHash == first {
					stored = true
				}
			}
		}
		unhold()
		var next *registryv1.Instance
		for next == nil {
			for _, it := range watch.Items() {
				if it.InstanceId != in.InstanceId {
					next = it
				}
			}
			if next != nil {
				break
			}
			select {
			case <-watch.Changed():
			case <-p.Done():
				t.Fatalf("the worker exited after losing its lease; it logged:\n%s", p.Logs.String())
			case <-ctx.Done():
				t.Fatalf("no new registration; the worker logged:\n%s", p.Logs.String())
			}
		}
		if a, _ := addressOf(next.Transport); a != addr {
			t.Errorf("new instance serves %v; want the same %v", a, addr)
		}
		for {
			cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: s.Namespace}})
			if err == nil && len(cards.Cards) == 1 && cards.Cards[0].InstanceId == next.InstanceId && cards.Cards[0].ModelName == s.ModelName {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("model cards = %v, %v; want one of %s on the new instance %x", cards, err, s.ModelName, next.InstanceId)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "conf-again", TokenIds: prompt, MaxTokens: 2}); err != nil || len(got) != 2 {
			t.Fatalf("generate after registering again = %d responses, %v; want 2", len(got), err)
		}
		// The new instance's first KV event says that routers know nothing
		// of its cache.
		for {
			b := nextKV(ctx, t, kv)
			if b.InstanceId != next.InstanceId {
				continue
			}
			if len(b.Events) == 0 || b.Events[0].GetCleared() == nil {
				t.Errorf("first KV batch of the new instance %x = %v; want it to start with a cleared event", next.InstanceId, b)
			}
			break
		}
		in = next
	})

	row("SIGTERM drain", func(t *testing.T) {
		// A request in flight at SIGTERM runs to its end; the instance is
		// deregistered at once, not a TTL later; the exit code is 0.
		const n = 60
		payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "conf-drain", TokenIds: prompt, MaxTokens: n})
		st, err := client.Call(ctx, addr, s.Endpoint, nil, payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		inflight := make(chan error, 1)
		go func() {
			defer st.Close()
			for got := 1; ; got++ {
				_, err := st.Recv()
				switch {
				case errors.Is(err, io.EOF) && got == n:
					inflight <- nil
					return
				case errors.Is(err, io.EOF):
					inflight <- fmt.Errorf("stream ended after %d responses; want %d", got, n)
					return
				case err != nil:
					inflight <- fmt.Errorf("after %d responses: %w", got, err)
					return
				}
			}
		}()
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// Deregistration comes before the drain: the watch sees the
		// instance go while the request still runs.
		for len(watch.Items()) != 0 {
			select {
			case <-watch.Changed():
			case <-ctx.Done():
				// Ask the worker where it is stuck: SIGQUIT makes a Go
				// process print every goroutine's stack, and a worker may
				// dump its threads' on it too (the Python example does).
				_ = p.Cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-p.Done():
				case <-time.After(5 * time.Second):
				}
				t.Fatalf("still registered after SIGTERM (%v); sent SIGQUIT for a stack dump; the worker logged:\n%s", watch.Items(), p.Logs.String())
			}
		}
		if code := p.Wait(t); code != 0 {
			t.Errorf("exit code %d after SIGTERM; want 0", code)
		}
		if err := <-inflight; err != nil {
			t.Errorf("request in flight at SIGTERM: %v", err)
		}
		cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: s.Namespace}})
		if err != nil || len(cards.Cards) != 0 {
			t.Errorf("ListModels after SIGTERM = %v, %v; want none", cards, err)
		}
	})
}

// heldCall holds a registration at the proxy: the first call with it
// reports the lease id it registers on and waits for free.
type heldCall struct {
	lease   chan uint64
	release chan struct{}
	once    sync.Once
}

func (h *heldCall) hold(msg []byte) {
	req := &registryv1.RegisterRequest{}
	if proto.Unmarshal(msg, req) != nil {
		return
	}
	select {
	case h.lease <- req.LeaseId:
	default:
	}
	<-h.release
}

func (h *heldCall) free() { h.once.Do(func() { close(h.release) }) }

// nextKV is the next KV event batch of the subscription.
func nextKV(ctx context.Context, t *testing.T, sub *eventbusclient.Subscription) *workerv1.KvEventBatch {
	t.Helper()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("waiting for KV events: %v", err)
	}
	b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
	if err != nil {
		t.Fatalf("KV event batch: %v", err)
	}
	return b
}

// addressOf is the request plane address of a registered transport (its
// first, for a worker that serves several planes).
func addressOf(tr *commonv1.Transport) (transport.Address, bool) {
	addrs := transport.AddressesOf(tr)
	if len(addrs) == 0 {
		return transport.Address{}, false
	}
	return addrs[0], true
}

// checkTokenizer fetches every tokenizer artifact of a card from the object
// store and compares it with the file the worker was given.
func checkTokenizer(ctx context.Context, t *testing.T, bus *eventbusclient.Client, dir string, arts []*registryv1.TokenizerArtifact) {
	t.Helper()
	var names []string
	for _, a := range arts {
		names = append(names, a.Name)
		want, err := os.ReadFile(filepath.Join(dir, a.Name))
		if err != nil {
			t.Errorf("artifact %s: %v", a.Name, err)
			continue
		}
		sum := sha256.Sum256(want)
		bucket, name, _ := strings.Cut(a.ObjectKey, "/")
		var got bytes.Buffer
		info, err := bus.GetObject(ctx, bucket, name, &got)
		if err != nil {
			t.Errorf("GetObject %s: %v", a.ObjectKey, err)
			continue
		}
		if !bytes.Equal(got.Bytes(), want) || a.Sha256 != hex.EncodeToString(sum[:]) || a.Size != int64(len(want)) || info.Sha256 != a.Sha256 {
			t.Errorf("artifact %v: the object store holds %d bytes (sha256 %s); the file has %d bytes, sha256 %x", a, got.Len(), info.Sha256, len(want), sum)
		}
	}
	sort.Strings(names)
	if len(names) != 2 || !strings.HasPrefix(names[0], "tokenizer.json") || names[1] != "tokenizer_config.json" {
		t.Errorf("tokenizer artifacts %v; want tokenizer.json(.gz) and tokenizer_config.json", names)
	}
}

// waitLoad waits for a LoadMetrics of instance, stamped after since, that ok accepts.
func waitLoad(ctx context.Context, t *testing.T, sub *eventbusclient.Subscription, instance uint64, since time.Time, ok func(*workerv1.LoadMetrics) bool) {
	t.Helper()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for load metrics: %v", err)
		}
		m := &workerv1.LoadMetrics{}
		if err := proto.Unmarshal(ev.Payload, m); err != nil {
			t.Fatalf("load metrics: %v", err)
		}
		if m.InstanceId == instance && m.Timestamp.AsTime().After(since) && ok(m) {
			return
		}
	}
}

// WaitInstances waits until the watcher holds n instances.
func WaitInstances(ctx context.Context, t testing.TB, w *registryclient.Watcher[*registryv1.Instance], n int, logs *LogBuffer) []*registryv1.Instance {
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

// LogBuffer collects a worker's output (JSON lines) and lets a test wait
// for a line.
type LogBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

// NewLogBuffer returns an empty buffer.
func NewLogBuffer() *LogBuffer { return &LogBuffer{changed: make(chan struct{}, 1)} }

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the JSON lines whose msg is msg and whose attributes
// include attrs.
func (b *LogBuffer) Lines(msg string, attrs map[string]any) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != msg {
			continue
		}
		match := true
		for k, v := range attrs {
			if line[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, line)
		}
	}
	return out
}

// WaitFor waits for a log line whose msg is msg and whose attributes
// include attrs, and returns it.
func (b *LogBuffer) WaitFor(ctx context.Context, t testing.TB, msg string, attrs map[string]any) map[string]any {
	t.Helper()
	for {
		if lines := b.Lines(msg, attrs); len(lines) > 0 {
			return lines[0]
		}
		select {
		case <-b.changed:
		case <-ctx.Done():
			t.Fatalf("no log line %q with %v; the worker logged:\n%s", msg, attrs, b.String())
		}
	}
}

// Process is a running worker process.
type Process struct {
	Cmd  *exec.Cmd
	Logs *LogBuffer
	done chan struct{} // closed once the process has exited and been waited for
}

// StartProcess starts cmd with its output into Logs; t's cleanup kills it if
// it still runs and prints its logs if t failed.
func StartProcess(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, Logs: NewLogBuffer(), done: make(chan struct{})}
	cmd.Stdout = p.Logs
	cmd.Stderr = p.Logs
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	} else {
		cmd.Env = append(os.Environ(), cmd.Env...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s logged:\n%s", filepath.Base(cmd.Path), p.Logs.String())
		}
	})
	return p
}

// Wait waits for the process to exit and returns its exit code.
func (p *Process) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not exit; it logged:\n%s", p.Logs.String())
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// RunFirstStart starts a process of w before its registry: the registry's
// address is held by a listener that accepts and drops every connection
// (etcd and the eventbus are up). The worker must keep trying, not exit:
// once it has connected twice (a retry), the registry starts on that address
// and the worker must register, with its model card, and serve generate;
// SIGTERM then ends it with exit code 0. Workers started by a supervisor
// before the control plane (a pod whose registry is still being scheduled)
// depend on this.
func RunFirstStart(t *testing.T, w Worker) {
	if w.Require != nil {
		w.Require(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := registrytest.StartEtcd(t)
	_, bus := eventbustest.Start(t)
	// The registry's address is held for the test (testport.Shareable), so
	// that no other process takes it between this counting listener's close
	// and the registry's start.
	regAddr := testport.Shareable(t)
	l, err := net.Listen("tcp", regAddr)
	if err != nil {
		t.Fatal(err)
	}
	dials := make(chan struct{}, 1024)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case dials <- struct{}{}:
			default:
			}
		}
	}()
	s := Settings{Namespace: "conf", Component: "backend", Endpoint: "generate", ModelName: "conformance/" + w.Name,
		BlockSize: 4, ContextLength: 4096, RegistryAddr: regAddr, EventbusAddr: bus.Addr().String(),
		LeaseTTL: 2 * time.Second, TokenizerDir: TokenizerDir(t), DrainTimeout: 20 * time.Second}
	cmd := w.Command(t, s)
	cmd.Env = append(cmd.Env, "DYN_REQUEST_PLANE="+string(w.Plane), "DYN_TCP_RPC_HOST=127.0.0.1", "DYN_TCP_RPC_PORT=0",
		"DYN_HTTP_RPC_HOST=127.0.0.1", "DYN_HTTP_RPC_PORT=0")
	p := StartProcess(t, cmd)
	for range 2 {
		select {
		case <-dials:
		case <-p.Done():
			l.Close()
			t.Fatalf("the worker exited while its registry was not up; it logged:\n%s", p.Logs.String())
		case <-ctx.Done():
			l.Close()
			t.Fatalf("the worker did not try its registry twice; it logged:\n%s", p.Logs.String())
		}
	}
	l.Close()
	<-accepted
	reg := registrytest.StartRegistryAt(t, etcd.Endpoints, regAddr)
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	watch := registryclient.WatchInstances(dc, &registryv1.InstanceFilter{Namespace: s.Namespace}, registryclient.WatchOptions[*registryv1.Instance]{})
	defer watch.Close()
	in := WaitInstances(ctx, t, watch, 1, p.Logs)[0]
	addr, ok := addressOf(in.Transport)
	if !ok || in.InstanceId == 0 {
		t.Fatalf("registered instance %v names no address or id", in)
	}
	for {
		cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: s.Namespace}})
		if err == nil && len(cards.Cards) == 1 && cards.Cards[0].InstanceId == in.InstanceId && cards.Cards[0].ModelName == s.ModelName {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("model cards = %v, %v; want one of %s on instance %x", cards, err, s.ModelName, in.InstanceId)
		case <-time.After(20 * time.Millisecond):
		}
	}
	tc := transport.DefaultConfig()
	tc.Plane = w.Plane
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "conf-first", TokenIds: []uint32{1, 2, 3, 4, 5}, MaxTokens: 2}); err != nil || len(got) != 2 {
		t.Fatalf("generate after a late registry = %d responses, %v; want 2", len(got), err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM; want 0", code)
	}
}
