package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// The legs of a disaggregated request, relayed in the engines' own
// protocols over their OpenAI completions endpoint. The adapter's
// --kv-transfer-kind says which:
//
//   - nixl or mooncake: vLLM's kv_transfer_params. The prefill leg is sent
//     with {"do_remote_decode": true} (the other fields null), max_tokens 1
//     and not streamed; the engine answers with the params the decode
//     engine needs (remote_engine_id, remote_block_ids, remote_host,
//     remote_port, ...), which become the handoff's payload as they are,
//     and its one sampled token the handoff's first token. The decode leg
//     is sent, streamed as a whole request, with that object as its
//     kv_transfer_params (do_remote_prefill true): the engine reads the KV
//     and generates the whole output. vLLM frees the prefill's blocks when
//     they are read or after its own timeout; ReleaseKvHandoff cannot free
//     them sooner (released = false).
//   - bootstrap: SGLang's bootstrap. Both engines' requests carry the same
//     bootstrap_host and bootstrap_port (the prefill engine's bootstrap
//     server, --kv-transfer-addr) and bootstrap_room (a random 63-bit
//     number), and must be in flight together: the prefill engine answers
//     only once the decode engine has joined the room and taken the KV. So
//     the prefill leg sends the engine its request and, once it is written,
//     answers with the handoff ({"bootstrap_host", "bootstrap_port",
//     "bootstrap_room"}) without waiting for the engine's answer, which the
//     adapter reads and drops in the background; the decode leg sends the
//     decode engine the same fields. The background request ends with the
//     engine's answer, ReleaseKvHandoff (the prefill leg's request id), or
//     --handoff-timeout.

// vllmPrefillParams are the kv_transfer_params of a prefill leg, as vLLM's
// disaggregated proxy sends them.
var vllmPrefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// errInvalidHandoff marks a handoff payload the adapter cannot relay.
var errInvalidHandoff = worker.ErrInvalidHandoff

// vllmHandoff is what the adapter checks of vLLM's kv_transfer_params.
type vllmHandoff struct {
	DoRemotePrefill *bool           `json:"do_remote_prefill"`
	RemoteEngineID  *string         `json:"remote_engine_id"`
	RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
	RemoteHost      *string         `json:"remote_host"`
	RemotePort      json.RawMessage `json:"remote_port"`
}

// decodeVLLMHandoff checks the payload of a nixl or mooncake handoff: at
// most worker.MaxHandoffPayload bytes of one JSON object with
// do_remote_prefill true, a remote_engine_id, remote_block_ids (an array;
// a list per KV cache group in vLLM's hybrid allocator), a remote_host and a
// remote_port in 1..65535. The object is relayed to the decode engine as
// it is. It fails with worker.ErrInvalidHandoff.
func decodeVLLMHandoff(payload []byte) (json.RawMessage, error) {
	if len(payload) > worker.MaxHandoffPayload {
		return nil, fmt.Errorf("%w: payload of %d bytes, past %d", errInvalidHandoff, len(payload), worker.MaxHandoffPayload)
	}
	var h vllmHandoff
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: kv_transfer_params: %v", errInvalidHandoff, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: kv_transfer_params: data after the object", errInvalidHandoff)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: kv_transfer_params is not a JSON object", errInvalidHandoff)
	}
	switch {
	case h.DoRemotePrefill == nil || !*h.DoRemotePrefill:
		return nil, fmt.Errorf("%w: kv_transfer_params without do_remote_prefill true", errInvalidHandoff)
	case h.RemoteEngineID == nil || *h.RemoteEngineID == "":
		return nil, fmt.Errorf("%w: kv_transfer_params without remote_engine_id", errInvalidHandoff)
	case len(h.RemoteBlockIDs) == 0 || h.RemoteBlockIDs[0] != '[':
		return nil, fmt.Errorf("%w: kv_transfer_params without a remote_block_ids array", errInvalidHandoff)
	case h.RemoteHost == nil || *h.RemoteHost == "":
		return nil, fmt.Errorf("%w: kv_transfer_params without remote_host", errInvalidHandoff)
	}
	if p, err := strconv.ParseUint(string(h.RemotePort), 10, 16); err != nil || p == 0 {
		return nil, fmt.Errorf("%w: remote_port %s is not a port", errInvalidHandoff, h.RemotePort)
	}
	return json.RawMessage(payload), nil
}

// bootstrapHandoff is the payload of a bootstrap handoff: where SGLang's
// decode engine meets the prefill engine's KV.
type bootstrapHandoff struct {
	Host string `json:"bootstrap_host"`
	Port int    `json:"bootstrap_port"`
	Room uint64 `json:"bootstrap_room"`
}

// decodeBootstrapHandoff checks the payload of a bootstrap handoff: at most
// worker.MaxHandoffPayload bytes of a JSON object with a bootstrap_host, a
// bootstrap_port in 1..65535 and a bootstrap_room in 0..2^63-1 (SGLang's
// range). It fails with worker.ErrInvalidHandoff.
func decodeBootstrapHandoff(payload []byte) (bootstrapHandoff, error) {
	var h struct {
		Host *string `json:"bootstrap_host"`
		Port *int    `json:"bootstrap_port"`
		Room *uint64 `json:"bootstrap_room"`
	}
	if len(payload) > worker.MaxHandoffPayload {
		return bootstrapHandoff{}, fmt.Errorf("%w: payload of %d bytes, past %d", errInvalidHandoff, len(payload), worker.MaxHandoffPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&h); err != nil {
		return bootstrapHandoff{}, fmt.Errorf("%w: bootstrap: %v", errInvalidHandoff, err)
	}
	if dec.More() {
		return bootstrapHandoff{}, fmt.Errorf("%w: bootstrap: data after the object", errInvalidHandoff)
	}
	switch {
	case h.Host == nil || *h.Host == "":
		return bootstrapHandoff{}, fmt.Errorf("%w: no bootstrap_host", errInvalidHandoff)
	case h.Port == nil || *h.Port < 1 || *h.Port > 65535:
		return bootstrapHandoff{}, fmt.Errorf("%w: bootstrap_port is not a port", errInvalidHandoff)
	case h.Room == nil || *h.Room > math.MaxInt64:
		return bootstrapHandoff{}, fmt.Errorf("%w: bootstrap_room is not in 0..2^63-1", errInvalidHandoff)
	}
	return bootstrapHandoff{Host: *h.Host, Port: *h.Port, Room: *h.Room}, nil
}

// isVLLMKind says the kind is relayed as vLLM's kv_transfer_params.
func isVLLMKind(k commonv1.KvTransferKind) bool {
	return k == commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL || k == commonv1.KvTransferKind_KV_TRANSFER_KIND_MOONCAKE
}

// completionResponse is the engine's answer to a request not streamed.
type completionResponse struct {
	Choices []struct {
		Text     string   `json:"text"`
		TokenIDs []uint32 `json:"token_ids"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        uint32 `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens uint32 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	Error            *engineError    `json:"error"`
	Object           string          `json:"object"`
	engineError
}

// maxPrefillAnswer bounds the engine's answer to a prefill leg.
const maxPrefillAnswer = 4 << 20

// legs relays the legs of disaggregated requests to the engine.
type legs struct {
	client  *http.Client
	url     string
	kind    commonv1.KvTransferKind // the adapter's; unspecified when aggregated
	addr    string                  // --kv-transfer-addr: SGLang's bootstrap server
	timeout time.Duration           // --handoff-timeout
	self    func() *worker.Worker
	log     *slog.Logger
	// ranks is the engine's data-parallel size: every engine request
	// (whole or a leg) names the router's rank when it is more than one.
	ranks dpRanks

	mu      sync.Mutex
	pending map[string]context.CancelFunc // bootstrap prefill requests in flight, by request id
	closed  bool
	wg      sync.WaitGroup
}

// checkLeg refuses a leg the adapter cannot relay.
func (l *legs) checkLeg(req *workerv1.GenerateRequest) error {
	leg := req.GetLeg()
	if leg == workerv1.DisaggregationLeg_DISAGGREGATION_LEG_UNSPECIFIED {
		if req.Handoff != nil {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "a handoff on a whole request"}
		}
		return nil
	}
	if !isVLLMKind(l.kind) && l.kind != commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP {
		return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "this adapter serves whole requests only: start it with --disaggregation-mode prefill or decode and --kv-transfer-kind nixl, mooncake or bootstrap to relay the legs of disaggregated requests"}
	}
	switch leg {
	case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL:
		if req.Handoff != nil {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "a handoff on a prefill leg"}
		}
	case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE:
		if k := req.GetHandoff().GetKind(); k != l.kind {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("%v: a %q handoff, this adapter's engine speaks %q", worker.ErrInvalidHandoff,
				wire.TransferKindName(k), wire.TransferKindName(l.kind))}
		}
	default:
		return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("unknown disaggregation leg %d", leg)}
	}
	return nil
}

// decodeRequest sets a decode leg's transfer fields from its handoff.
func (l *legs) decodeRequest(req *workerv1.GenerateRequest, cr *completionRequest) error {
	payload := req.GetHandoff().GetPayload()
	if isVLLMKind(l.kind) {
		p, err := decodeVLLMHandoff(payload)
		if err != nil {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
		}
		cr.KVTransferParams = p
		return nil
	}
	h, err := decodeBootstrapHandoff(payload)
	if err != nil {
		return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
	}
	cr.BootstrapHost, cr.BootstrapPort, cr.BootstrapRoom = h.Host, h.Port, &h.Room
	return nil
}

// prefill serves a prefill leg: cr is the request as a whole request would
// send it.
func (l *legs) prefill(ctx context.Context, req *workerv1.GenerateRequest, cr completionRequest, send func(*workerv1.GenerateResponse) error) error {
	w := l.self()
	if w == nil {
		return &transport.HandlerError{Code: transport.CodeDraining, Message: "a prefill leg before the worker is registered"}
	}
	if isVLLMKind(l.kind) {
		return l.prefillVLLM(ctx, req, cr, w, send)
	}
	return l.prefillBootstrap(ctx, req, cr, w, send)
}

// post is the engine request of req's leg, with cr as its body.
func (l *legs) post(ctx context.Context, req *workerv1.GenerateRequest, cr completionRequest) (*http.Request, error) {
	body, err := json.Marshal(cr)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if req.RequestId != "" {
		hreq.Header.Set("X-Request-Id", req.RequestId)
	}
	l.ranks.set(hreq, req.DpRank)
	return hreq, nil
}

// prefillVLLM sends the prefill leg with do_remote_decode, max_tokens 1 and
// not streamed, and answers with the engine's kv_transfer_params.
func (l *legs) prefillVLLM(ctx context.Context, req *workerv1.GenerateRequest, cr completionRequest, w *worker.Worker, send func(*workerv1.GenerateResponse) error) error {
	cr.Stream, cr.StreamOptions, cr.MaxTokens = false, nil, 1
	// min_tokens does not apply to a one-token prefill (vLLM's proxy drops
	// it there and keeps it for the decode leg).
	cr.MinTokens = 0
	cr.KVTransferParams = vllmPrefillParams
	hreq, err := l.post(ctx, req, cr)
	if err != nil {
		return err
	}
	resp, err := l.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("engine: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer+1))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("engine: prefill answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusBadRequest {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("engine: %s", bytes.TrimSpace(body[:min(len(body), 4096)]))}
		}
		return fmt.Errorf("engine: %s: %s", resp.Status, bytes.TrimSpace(body[:min(len(body), 4096)]))
	}
	if len(body) > maxPrefillAnswer {
		return fmt.Errorf("engine: prefill answer past %d bytes", maxPrefillAnswer)
	}
	var cresp completionResponse
	if err := json.Unmarshal(body, &cresp); err != nil {
		return fmt.Errorf("engine: prefill answer: %w", err)
	}
	if cresp.Error != nil {
		return cresp.Error.err()
	}
	if cresp.Object == "error" {
		return cresp.engineError.err()
	}
	params := bytes.TrimSpace(cresp.KVTransferParams)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return &transport.HandlerError{Code: transport.CodeEngineError, Message: "engine: the prefill answer has no kv_transfer_params: is the engine started with a KV connector (--kv-transfer-config)?"}
	}
	if _, err := decodeVLLMHandoff(params); err != nil {
		return &transport.HandlerError{Code: transport.CodeEngineError, Message: "engine: the prefill answer's " + err.Error()}
	}
	h := &workerv1.KvHandoff{Kind: l.kind, Payload: params, PrefillInstanceId: w.InstanceID()}
	u := &workerv1.Usage{PromptTokens: uint32(len(req.TokenIds))}
	if c := cresp.Usage; c != nil {
		u.PromptTokens = c.PromptTokens
		if d := c.PromptTokensDetails; d != nil {
			u.CachedPromptTokens = d.CachedTokens
		}
	}
	if len(cresp.Choices) > 0 && len(cresp.Choices[0].TokenIDs) > 0 {
		first := cresp.Choices[0].TokenIDs[0]
		h.FirstTokenId = &first
	}
	return send(&workerv1.GenerateResponse{FinishReason: workerv1.FinishReason_FINISH_REASON_STOP, Usage: u, Handoff: h})
}

// prefillBootstrap sends the prefill engine the request with a new room and
// answers with the handoff once the request is written, the engine's
// answer read and dropped in the background.
func (l *legs) prefillBootstrap(ctx context.Context, req *workerv1.GenerateRequest, cr completionRequest, w *worker.Worker, send func(*workerv1.GenerateResponse) error) error {
	host, portText, err := net.SplitHostPort(l.addr)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil {
		return fmt.Errorf("--kv-transfer-addr %q is not host:port", l.addr)
	}
	room := rand.Uint64() >> 1 // SGLang's rooms are 0..2^63-1
	cr.Stream, cr.StreamOptions = false, nil
	cr.BootstrapHost, cr.BootstrapPort, cr.BootstrapRoom = host, port, &room

	bctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cancel()
		return &transport.HandlerError{Code: transport.CodeDraining, Message: "the adapter is stopping"}
	}
	if _, dup := l.pending[req.RequestId]; dup || req.RequestId == "" {
		l.mu.Unlock()
		cancel()
		return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("a prefill leg needs a request id not in flight (%q)", req.RequestId)}
	}
	l.pending[req.RequestId] = cancel
	l.wg.Add(1)
	l.mu.Unlock()

	written := make(chan error, 1)
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		select {
		case written <- i.Err:
		default:
		}
	}}
	hreq, err := l.post(httptrace.WithClientTrace(bctx, trace), req, cr)
	if err != nil {
		l.end(req.RequestId)
		l.wg.Done()
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer l.wg.Done()
		defer l.end(req.RequestId)
		done <- l.drainPrefill(hreq, req.RequestId, room)
	}()
	// Answer once the engine has the request (it answers only after the
	// decode engine took the KV), or fail if it never got it.
	select {
	case err := <-written:
		if err != nil {
			return fmt.Errorf("engine: send the prefill leg: %w", err)
		}
	case err := <-done:
		if err != nil {
			return fmt.Errorf("engine: prefill leg: %w", err)
		}
		// Answered already (the decode engine was quicker than this
		// leg's answer): the handoff stands.
	case <-ctx.Done():
		l.release(req.RequestId)
		return ctx.Err()
	}
	payload, err := json.Marshal(bootstrapHandoff{Host: host, Port: port, Room: room})
	if err != nil {
		l.release(req.RequestId)
		return err
	}
	h := &workerv1.KvHandoff{Kind: l.kind, Payload: payload, PrefillInstanceId: w.InstanceID(), HoldMs: uint32(l.timeout.Milliseconds())}
	if err := send(&workerv1.GenerateResponse{FinishReason: workerv1.FinishReason_FINISH_REASON_STOP, Handoff: h,
		Usage: &workerv1.Usage{PromptTokens: uint32(len(req.TokenIds))}}); err != nil {
		// The leg's answer never got out: nobody will come for the KV.
		l.release(req.RequestId)
		return err
	}
	return nil
}

// drainPrefill reads a bootstrap prefill request's answer to its end.
func (l *legs) drainPrefill(hreq *http.Request, id string, room uint64) error {
	resp, err := l.client.Do(hreq)
	if err != nil {
		if hreq.Context().Err() == nil {
			l.log.Warn("bootstrap prefill request failed", "request_id", id, "bootstrap_room", room, "err", err.Error())
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer))
	if resp.StatusCode != http.StatusOK {
		l.log.Warn("bootstrap prefill request refused by the engine", "request_id", id, "bootstrap_room", room, "status", resp.Status)
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body[:min(len(body), 4096)]))
	}
	return err
}

// end forgets a bootstrap prefill request that ended.
func (l *legs) end(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cancel, ok := l.pending[id]; ok {
		cancel()
		delete(l.pending, id)
	}
}

// release cancels a bootstrap prefill request still in flight.
func (l *legs) release(id string) bool {
	l.mu.Lock()
	cancel, ok := l.pending[id]
	delete(l.pending, id)
	l.mu.Unlock()
	if ok {
		cancel()
	}
	return ok
}

// close cancels every bootstrap prefill request and waits for them.
func (l *legs) close() {
	l.mu.Lock()
	l.closed = true
	for id, cancel := range l.pending {
		cancel()
		delete(l.pending, id)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// PullKvHandoff: the engines move their KV themselves.
func (l *legs) PullKvHandoff(context.Context, *workerv1.PullKvHandoffRequest) (*workerv1.PullKvHandoffResponse, error) {
	return nil, status.Error(codes.Unimplemented, "the engine moves its KV itself (nixl, mooncake, bootstrap): there is nothing to pull from the adapter")
}

// ReleaseKvHandoff cancels a bootstrap prefill request still in flight
// (handoff_id: the prefill leg's request id); vLLM's engines free a
// handoff's blocks themselves.
func (l *legs) ReleaseKvHandoff(_ context.Context, req *workerv1.ReleaseKvHandoffRequest) (*workerv1.ReleaseKvHandoffResponse, error) {
	return &workerv1.ReleaseKvHandoffResponse{Released: l.release(req.GetHandoffId())}, nil
}
