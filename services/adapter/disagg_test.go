package adapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/adapter"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// The fake engines below follow what the engines' own disaggregated
// proxies and connectors do, as read in their sources:
//
//   - vLLM (github.com/vllm-project/vllm, commit 030ea52):
//     tests/v1/kv_connector/nixl_integration/toy_proxy_server.py sends the
//     prefill request with kv_transfer_params {"do_remote_decode": true,
//     "do_remote_prefill": false, the remote_* fields null}, "stream" false,
//     "max_tokens" 1 and without min_tokens, the same X-Request-Id on both
//     legs, and the decode request (streamed) with the kv_transfer_params
//     of the prefill's answer as they are;
//     vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py
//     (NixlConnectorScheduler.request_finished) answers a prefill that
//     stopped at its length with do_remote_prefill true, do_remote_decode
//     false, remote_block_ids, remote_engine_id, remote_request_id,
//     remote_host, remote_port and tp_size; the completions answer carries
//     them as a top-level "kv_transfer_params" (CompletionResponse).
//   - SGLang (github.com/sgl-project/sglang, commit 001c2ae):
//     python/sglang/srt/disaggregation/mini_lb.py adds the same
//     bootstrap_host (the prefill server's host), bootstrap_port (its
//     bootstrap port) and bootstrap_room (random in 0..2^63-1) to one
//     request and posts it to the prefill and the decode server at once
//     (asyncio.gather): the prefill server answers only after the decode
//     server has joined the room and taken the KV, so the two must be in
//     flight together; the prefill's answer is dropped.

// fabric is what links the fake engines: vLLM's prefill blocks waiting to
// be read (by engine and request id), SGLang's bootstrap rooms.
type fabric struct {
	mu    sync.Mutex
	vllm  map[string]vllmHeld
	rooms map[uint64]*room
	// seen records each engine request's JSON body, by engine name.
	seen map[string][]map[string]any
}

type vllmHeld struct {
	prompt []uint32
	blocks []int
}

// room is a bootstrap room: the prefill side's prompt, closed taken once
// the decode side took the KV; answered once the prefill engine answered.
type room struct {
	prompt   []uint32
	taken    chan struct{}
	answered bool
}

func newFabric() *fabric {
	return &fabric{vllm: map[string]vllmHeld{}, rooms: map[uint64]*room{}, seen: map[string][]map[string]any{}}
}

// fakeEngine is one engine of a disaggregated pair.
type fakeEngine struct {
	name      string
	protocol  string // vllm or sglang
	prefill   bool
	bootstrap string // SGLang's bootstrap server, host:port (prefill side)
	f         *fabric
	// noParams makes a vLLM prefill engine answer without
	// kv_transfer_params (started without a KV connector).
	noParams  bool
	cancelled chan string
	http      *httptest.Server
}

func startFake(t *testing.T, f *fabric, name, protocol string, prefill bool) *fakeEngine {
	t.Helper()
	e := &fakeEngine{name: name, protocol: protocol, prefill: prefill, f: f, bootstrap: "127.0.0.1:8998", cancelled: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", e.completions)
	e.http = httptest.NewServer(mux)
	t.Cleanup(e.http.Close)
	return e
}

// token is the fake model's output at position i of a prompt: the same
// on every engine, as a greedy model's.
func token(prompt []uint32, i int) uint32 {
	var s uint32
	for _, t := range prompt {
		s = s*31 + t
	}
	return 2000 + (s+uint32(i)*7919)%5000
}

type fakeRequest struct {
	Prompt           []uint32        `json:"prompt"`
	MaxTokens        int             `json:"max_tokens"`
	Stream           bool            `json:"stream"`
	MinTokens        *int            `json:"min_tokens"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	BootstrapHost    *string         `json:"bootstrap_host"`
	BootstrapPort    *int            `json:"bootstrap_port"`
	BootstrapRoom    *uint64         `json:"bootstrap_room"`
}

func (e *fakeEngine) fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"object":"error","message":%q,"type":"BadRequestError","code":%d}`, msg, status)
}

func (e *fakeEngine) completions(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var raw map[string]any
	var req fakeRequest
	if json.Unmarshal(body, &raw) != nil || json.Unmarshal(body, &req) != nil || len(req.Prompt) == 0 {
		e.fail(w, http.StatusBadRequest, "bad request")
		return
	}
	e.f.mu.Lock()
	e.f.seen[e.name] = append(e.f.seen[e.name], raw)
	e.f.mu.Unlock()
	id := r.Header.Get("X-Request-Id")
	switch {
	case e.protocol == "vllm" && len(req.KVTransferParams) > 0:
		var p map[string]any
		_ = json.Unmarshal(req.KVTransferParams, &p)
		if p["do_remote_decode"] == true {
			e.vllmPrefill(w, req, id)
			return
		}
		if p["do_remote_prefill"] == true {
			if err := e.vllmRead(p, req.Prompt); err != nil {
				e.fail(w, http.StatusInternalServerError, err.Error())
				return
			}
		}
	case e.protocol == "sglang" && req.BootstrapRoom != nil:
		if req.BootstrapHost == nil || req.BootstrapPort == nil || fmt.Sprintf("%s:%d", *req.BootstrapHost, *req.BootstrapPort) != e.bootstrap {
			e.fail(w, http.StatusBadRequest, "bootstrap host and port are not the prefill server's")
			return
		}
		if e.prefill {
			e.sglangPrefill(w, r, req)
			return
		}
		if err := e.sglangJoin(r.Context(), req); err != nil {
			e.fail(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	e.stream(w, req)
}

// vllmPrefill computes the prompt, holds its blocks for the decode engine
// and answers with one token and the kv_transfer_params.
func (e *fakeEngine) vllmPrefill(w http.ResponseWriter, req fakeRequest, id string) {
	if !e.prefill || req.Stream || req.MaxTokens != 1 || req.MinTokens != nil {
		e.fail(w, http.StatusBadRequest, "a prefill request is sent to a prefill engine, not streamed, with max_tokens 1 and no min_tokens")
		return
	}
	blocks := make([]int, (len(req.Prompt)+15)/16)
	for i := range blocks {
		blocks[i] = 100 + i
	}
	e.f.mu.Lock()
	e.f.vllm[e.name+"/"+id] = vllmHeld{prompt: req.Prompt, blocks: blocks}
	e.f.mu.Unlock()
	answer := map[string]any{
		"id": "cmpl-" + id, "object": "text_completion", "model": modelName,
		"choices": []map[string]any{{"index": 0, "text": "x", "token_ids": []uint32{token(req.Prompt, 0)}, "finish_reason": "length"}},
		"usage":   map[string]any{"prompt_tokens": len(req.Prompt), "completion_tokens": 1, "prompt_tokens_details": map[string]any{"cached_tokens": 16}},
	}
	if !e.noParams {
		answer["kv_transfer_params"] = map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": blocks,
			"remote_engine_id": e.name, "remote_request_id": id, "remote_host": "10.0.0.7", "remote_port": 5600, "tp_size": 1}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// vllmRead reads the blocks a decode request's kv_transfer_params name.
func (e *fakeEngine) vllmRead(p map[string]any, prompt []uint32) error {
	key := fmt.Sprint(p["remote_engine_id"], "/", p["remote_request_id"])
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	h, ok := e.f.vllm[key]
	if !ok {
		return fmt.Errorf("no KV held for %s", key)
	}
	delete(e.f.vllm, key)
	ids, _ := p["remote_block_ids"].([]any)
	if !slices.Equal(h.prompt, prompt) || len(ids) != len(h.blocks) || p["remote_host"] != "10.0.0.7" || p["remote_port"] != float64(5600) {
		return fmt.Errorf("kv_transfer_params %v do not name the prefill's blocks", p)
	}
	return nil
}

// sglangPrefill opens the room, waits for the decode server to take the
// KV, then answers.
func (e *fakeEngine) sglangPrefill(w http.ResponseWriter, r *http.Request, req fakeRequest) {
	rm := &room{prompt: req.Prompt, taken: make(chan struct{})}
	e.f.mu.Lock()
	e.f.rooms[*req.BootstrapRoom] = rm
	e.f.mu.Unlock()
	select {
	case <-rm.taken:
	case <-r.Context().Done():
		e.cancelled <- r.Header.Get("X-Request-Id")
		return
	case <-time.After(20 * time.Second):
		e.fail(w, http.StatusInternalServerError, "the decode server never joined the bootstrap room")
		return
	}
	e.f.mu.Lock()
	rm.answered = true
	e.f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"index": 0, "text": "x", "finish_reason": "length"}},
		"usage": map[string]any{"prompt_tokens": len(req.Prompt), "completion_tokens": 1}})
}

// sglangJoin waits for the prefill's room and takes its KV.
func (e *fakeEngine) sglangJoin(ctx context.Context, req fakeRequest) error {
	deadline := time.After(20 * time.Second)
	for {
		e.f.mu.Lock()
		rm, ok := e.f.rooms[*req.BootstrapRoom]
		if ok {
			delete(e.f.rooms, *req.BootstrapRoom)
		}
		e.f.mu.Unlock()
		if ok {
			if !slices.Equal(rm.prompt, req.Prompt) {
				return errors.New("the room holds another prompt")
			}
			close(rm.taken)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return errors.New("no prefill server opened the bootstrap room")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stream generates the whole answer, streamed.
func (e *fakeEngine) stream(w http.ResponseWriter, req fakeRequest) {
	if !req.Stream {
		e.fail(w, http.StatusBadRequest, "the test streams whole and decode requests")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range req.MaxTokens {
		c := map[string]any{"index": 0, "text": "t", "token_ids": []uint32{token(req.Prompt, i)}, "finish_reason": nil}
		if i == req.MaxTokens-1 {
			c["finish_reason"] = "length"
		}
		b, _ := json.Marshal(chunk{Choices: []map[string]any{c}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// runLegAdapter runs an adapter in front of a fake engine, without KV
// events or load, and waits for its registration.
func runLegAdapter(t *testing.T, engineURL string, files []string, regAddr, busAddr, comp string, extra ...string) *worker.Worker {
	t.Helper()
	var cfg adapter.Config
	fs := flag.NewFlagSet("adapter", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--engine-url", engineURL + "/v1", "--kv-events-endpoint", "", "--engine-metrics-url", "off", "--model-name", modelName,
		"--block-size", "16", "--tokenizer-dir", filepath.Dir(files[0]), "--registry-addr", regAddr, "--eventbus-addr", busAddr,
		"--drain-timeout", "5s", "--component", comp}, extra...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan *worker.Worker, 1), make(chan error, 1)
	go func() {
		done <- adapter.Run(ctx, cfg, slog.New(slog.DiscardHandler), func(w *worker.Worker) { ready <- w })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adapter: %v", err)
		}
	})
	select {
	case w := <-ready:
		return w
	case err := <-done:
		done <- err
		t.Fatalf("adapter stopped: %v", err)
		return nil
	}
}

// legStack is a registry, an eventbus and the tokenizer files.
type legStack struct {
	reg, bus string
	files    []string
	client   transport.Client
}

func newLegStack(t *testing.T) legStack {
	t.Helper()
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	files, err := qwen3.WriteTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return legStack{reg: reg.Addr, bus: bus.Addr().String(), files: files, client: c}
}

// TestAdapterRelaysTheLegs: a prefill leg then a decode leg through two
// adapters in front of a fake prefill and a fake decode engine, in vLLM's
// protocol (nixl and mooncake) and SGLang's (bootstrap), generate what the
// whole request generates; the engines got what their own proxies send.
func TestAdapterRelaysTheLegs(t *testing.T) {
	s := newLegStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tests := []struct {
		kind, protocol string
		prefillFlags   []string
	}{
		{"nixl", "vllm", nil},
		{"mooncake", "vllm", nil},
		{"bootstrap", "sglang", []string{"--kv-transfer-addr", "127.0.0.1:8998"}},
	}
	for i, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			f := newFabric()
			pe := startFake(t, f, "prefill-engine", tt.protocol, true)
			de := startFake(t, f, "decode-engine", tt.protocol, false)
			pw := runLegAdapter(t, pe.http.URL, s.files, s.reg, s.bus, fmt.Sprint("p", i),
				append([]string{"--disaggregation-mode", "prefill", "--kv-transfer-kind", tt.kind}, tt.prefillFlags...)...)
			dw := runLegAdapter(t, de.http.URL, s.files, s.reg, s.bus, fmt.Sprint("d", i), "--disaggregation-mode", "decode", "--kv-transfer-kind", tt.kind)
			for j, n := range []int{1, 9} {
				req := &workerv1.GenerateRequest{RequestId: fmt.Sprint(tt.kind, "-", j), TokenIds: seqTokens(500+uint32(j), 40), MaxTokens: uint32(n),
					Stop: &workerv1.StopConditions{MinTokens: 1}}
				// A decode worker serves whole requests too.
				whole, err := workertest.Generate(ctx, s.client, workertest.TCP(dw.Instance()), req)
				if err != nil {
					t.Fatal(err)
				}
				want, wantFin := workertest.Output(whole)

				pre := proto.Clone(req).(*workerv1.GenerateRequest)
				pre.Leg = workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL
				rs, err := workertest.Generate(ctx, s.client, workertest.TCP(pw.Instance()), pre)
				if err != nil {
					t.Fatalf("prefill leg: %v", err)
				}
				if len(rs) != 1 || rs[0].Handoff == nil || len(rs[0].TokenIds) != 0 || rs[0].FinishReason != workerv1.FinishReason_FINISH_REASON_STOP ||
					rs[0].Usage.GetPromptTokens() != 40 {
					t.Fatalf("prefill leg answered %v", rs)
				}
				h := rs[0].Handoff
				kind, _ := wire.ParseTransferKind(tt.kind)
				if h.Kind != kind || h.PrefillInstanceId != pw.InstanceID() {
					t.Fatalf("handoff %v, want kind %s from %x", h, tt.kind, pw.InstanceID())
				}
				var payload map[string]any
				if err := json.Unmarshal(h.Payload, &payload); err != nil {
					t.Fatalf("payload %q: %v", h.Payload, err)
				}
				if tt.protocol == "vllm" {
					if h.FirstTokenId == nil || *h.FirstTokenId != want[0] || payload["remote_engine_id"] != "prefill-engine" || payload["do_remote_prefill"] != true {
						t.Fatalf("vLLM handoff %v payload %v: want the engine's params and first token %d", h, payload, want[0])
					}
				} else if h.FirstTokenId != nil || payload["bootstrap_host"] != "127.0.0.1" || payload["bootstrap_port"] != float64(8998) ||
					h.HoldMs != 30000 {
					t.Fatalf("bootstrap handoff %v payload %v", h, payload)
				}

				dec := proto.Clone(req).(*workerv1.GenerateRequest)
				dec.Leg, dec.Handoff = workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE, h
				rs, err = workertest.Generate(ctx, s.client, workertest.TCP(dw.Instance()), dec)
				if err != nil {
					t.Fatalf("decode leg: %v", err)
				}
				got, fin := workertest.Output(rs)
				if !slices.Equal(got, want) || fin != wantFin {
					t.Fatalf("legs generated %v (%v), the whole request %v (%v)", got, fin, want, wantFin)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			pre, dec := f.seen["prefill-engine"], f.seen["decode-engine"]
			if len(pre) != 2 || len(dec) != 4 {
				t.Fatalf("engine requests: %d prefill, %d decode; want 2 and 4", len(pre), len(dec))
			}
			for j := range 2 {
				p, d := pre[j], dec[2*j+1]
				if tt.protocol == "vllm" {
					if p["stream"] != false || p["max_tokens"] != float64(1) || p["min_tokens"] != nil ||
						!bytes.Contains(mustJSON(p["kv_transfer_params"]), []byte(`"do_remote_decode":true`)) {
						t.Errorf("prefill request %v is not vLLM's proxy's", p)
					}
					if params, _ := d["kv_transfer_params"].(map[string]any); params["remote_request_id"] != fmt.Sprint(tt.kind, "-", j) {
						t.Errorf("decode request %v does not carry the prefill's kv_transfer_params", d)
					}
					continue
				}
				for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"} {
					if p[k] == nil || fmt.Sprint(p[k]) != fmt.Sprint(d[k]) {
						t.Errorf("%s: prefill %v, decode %v; want the same", k, p[k], d[k])
					}
				}
			}
		})
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func seqTokens(from uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

// TestAdapterLegFaults: what cannot be relayed is a clear error, and a
// bootstrap prefill's engine request never outlives its handoff: released,
// timed out, or its leg cancelled.
func TestAdapterLegFaults(t *testing.T) {
	s := newLegStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := newFabric()
	vp := startFake(t, f, "vllm-prefill", "vllm", true)
	vp.noParams = true
	sp := startFake(t, f, "sglang-prefill", "sglang", true)
	agg := runLegAdapter(t, vp.http.URL, s.files, s.reg, s.bus, "agg")
	vpw := runLegAdapter(t, vp.http.URL, s.files, s.reg, s.bus, "vp", "--disaggregation-mode", "prefill", "--kv-transfer-kind", "nixl")
	vdw := runLegAdapter(t, vp.http.URL, s.files, s.reg, s.bus, "vd", "--disaggregation-mode", "decode", "--kv-transfer-kind", "nixl")
	spw := runLegAdapter(t, sp.http.URL, s.files, s.reg, s.bus, "sp", "--disaggregation-mode", "prefill", "--kv-transfer-kind", "bootstrap",
		"--kv-transfer-addr", "127.0.0.1:8998", "--handoff-timeout", "1h")
	spwShort := runLegAdapter(t, sp.http.URL, s.files, s.reg, s.bus, "sp-short", "--disaggregation-mode", "prefill", "--kv-transfer-kind", "bootstrap",
		"--kv-transfer-addr", "127.0.0.1:8998", "--handoff-timeout", "300ms")

	leg := func(id string, l workerv1.DisaggregationLeg, h *workerv1.KvHandoff) *workerv1.GenerateRequest {
		return &workerv1.GenerateRequest{RequestId: id, TokenIds: seqTokens(1, 20), MaxTokens: 4, Leg: l, Handoff: h}
	}
	nixl := func(payload string) *workerv1.KvHandoff {
		return &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL, Payload: []byte(payload)}
	}
	errs := []struct {
		name string
		w    *worker.Worker
		req  *workerv1.GenerateRequest
		code string
	}{
		{"an aggregated adapter refuses a leg", agg, leg("a", workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL, nil), "invalid_argument"},
		{"a handoff on a whole request", vdw, leg("b", workerv1.DisaggregationLeg_DISAGGREGATION_LEG_UNSPECIFIED, nixl(`{}`)), "invalid_argument"},
		{"a handoff of another kind", vdw, leg("c", workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE,
			&workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP, Payload: []byte(`{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":1}`)}), "invalid_argument"},
		{"params that are not JSON", vdw, leg("d", workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE, nixl(`{"do_remote_prefill":`)), "invalid_argument"},
		{"params without their blocks", vdw, leg("e", workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE,
			nixl(`{"do_remote_prefill":true,"remote_engine_id":"x","remote_host":"h","remote_port":1}`)), "invalid_argument"},
		{"a prefill engine without a KV connector", vpw, leg("f", workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL, nil), "engine_error"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := workertest.Generate(ctx, s.client, workertest.TCP(tt.w.Instance()), tt.req)
			var he *transport.HandlerError
			if !errors.As(err, &he) || he.Code != tt.code {
				t.Fatalf("%v (%v); want handler error %s", err, rs, tt.code)
			}
			if strings.TrimSpace(he.Message) == "" {
				t.Fatal("no message")
			}
		})
	}

	// A bootstrap prefill leg answers before its engine does; the engine
	// request then ends by its release, or by --handoff-timeout.
	frees := []struct {
		name string
		w    *worker.Worker
		free func(t *testing.T, id string)
	}{
		{"release", spw, func(t *testing.T, id string) {
			cc, api, err := worker.DialAPI(spw.APIAddr(), grpcclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			for _, want := range []bool{true, false} {
				r, err := api.ReleaseKvHandoff(ctx, &workerv1.ReleaseKvHandoffRequest{HandoffId: id})
				if err != nil || r.Released != want {
					t.Fatalf("ReleaseKvHandoff = %v, %v; want released %v", r, err, want)
				}
			}
		}},
		{"timeout", spwShort, func(*testing.T, string) {}},
	}
	for _, tt := range frees {
		t.Run(tt.name, func(t *testing.T) {
			id := "room-" + tt.name
			rs, err := workertest.Generate(ctx, s.client, workertest.TCP(tt.w.Instance()), leg(id, workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL, nil))
			if err != nil || len(rs) != 1 || rs[0].Handoff == nil {
				t.Fatalf("bootstrap prefill leg: %v, %v", rs, err)
			}
			tt.free(t, id)
			select {
			case got := <-sp.cancelled:
				if got != id {
					t.Fatalf("the engine saw %q cancelled, want %q", got, id)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the engine request outlived its handoff")
			}
		})
	}
	// The handoffs of the engines' transfers are not pulled from the adapter.
	cc, api, err := worker.DialAPI(vpw.APIAddr(), grpcclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := api.PullKvHandoff(ctx, &workerv1.PullKvHandoffRequest{HandoffId: "x"}); err == nil {
		t.Fatal("PullKvHandoff on an adapter succeeded")
	}
}
