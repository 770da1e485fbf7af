package mocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/simengine/realtime"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// The mock KV transfer. A prefill leg (GenerateRequest.leg PREFILL) is
// computed as a whole request's prefill and answered with one response: no
// tokens, the prompt's usage, finish STOP, and a handoff whose payload is a
// MockKvHandoff naming this worker's WorkerService, the request id the
// blocks are held under and how many. The blocks stay held (in use, never
// evicted) until the decode worker pulls them (PullKvHandoff), the request
// releases them (ReleaseKvHandoff), the leg is cancelled before its answer
// is out, or --handoff-timeout passes. A decode leg waits in its engine's
// queue like any request; once admitted (blocks allocated for the arrived
// KV, no running slot taken) it pulls them from the address in the
// payload, waits for the blocks its engine lacked to "arrive" over the link
// (--kv-transfer-gbps), stores them in its cache (stored KV events) and,
// once a running slot is free, generates from the handoff's first token, as
// a whole request whose prompt is cached but for its last block.

// DefaultKVBytesPerToken is the default --kv-bytes-per-token: the KV of one
// token of Qwen/Qwen3-0.6B (the mocker's default model and tokenizer) in
// bf16: K and V x 28 layers x 8 KV heads x 128 dimensions x 2 bytes.
const DefaultKVBytesPerToken = 2 * 28 * 8 * 128 * 2

// DefaultKVTransferGbps is the default --kv-transfer-gbps: a 100 Gb/s
// RDMA link between the prefill and the decode worker.
const DefaultKVTransferGbps = 100

// handoffs serves PullKvHandoff and ReleaseKvHandoff from the runner.
type handoffs struct {
	r *realtime.Runner
}

// PullKvHandoff frees the held blocks as the decode worker takes them.
func (h handoffs) PullKvHandoff(_ context.Context, req *workerv1.PullKvHandoffRequest) (*workerv1.PullKvHandoffResponse, error) {
	n, ok := h.r.Take(req.GetHandoffId())
	if !ok {
		return nil, apierr.New(codes.NotFound, apierr.ReasonKVHandoffNotFound,
			fmt.Sprintf("no KV held for handoff %q: never held, already pulled, released or past its hold", req.GetHandoffId()), nil)
	}
	return &workerv1.PullKvHandoffResponse{Blocks: uint32(n)}, nil
}

// ReleaseKvHandoff frees the held blocks without their being taken.
func (h handoffs) ReleaseKvHandoff(_ context.Context, req *workerv1.ReleaseKvHandoffRequest) (*workerv1.ReleaseKvHandoffResponse, error) {
	_, ok := h.r.Release(req.GetHandoffId())
	return &workerv1.ReleaseKvHandoffResponse{Released: ok}, nil
}

// puller takes handoffs from prefill workers' WorkerServices, keeping one
// connection per address for the mocker's life.
type puller struct {
	opts    grpcclient.Options
	timeout time.Duration

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newPuller(opts grpcclient.Options, timeout time.Duration) *puller {
	return &puller{opts: opts, timeout: timeout, conns: map[string]*grpc.ClientConn{}}
}

func (p *puller) client(addr string) (workerv1.WorkerServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("the mocker is stopping")
	}
	if cc, ok := p.conns[addr]; ok {
		return workerv1.NewWorkerServiceClient(cc), nil
	}
	cc, c, err := worker.DialAPI(addr, p.opts)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = cc
	return c, nil
}

// pull takes a handoff's blocks within the pull timeout. Its errors are
// handler errors with code worker.CodeKVHandoffFailed.
func (p *puller) pull(ctx context.Context, m *workerv1.MockKvHandoff, decodeInstance uint64) (int, error) {
	c, err := p.client(m.GetAddress())
	if err != nil {
		return 0, &transport.HandlerError{Code: worker.CodeKVHandoffFailed, Message: fmt.Sprintf("KV handoff %q: dial %s: %v", m.GetHandoffId(), m.GetAddress(), err)}
	}
	pctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := c.PullKvHandoff(pctx, &workerv1.PullKvHandoffRequest{HandoffId: m.GetHandoffId(), DecodeInstanceId: decodeInstance})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err() // the caller went away: no worker fault
		}
		msg := fmt.Sprintf("KV handoff %q: pull from the prefill worker %s: %v", m.GetHandoffId(), m.GetAddress(), status.Convert(err).Message())
		if status.Code(err) == codes.DeadlineExceeded {
			msg = fmt.Sprintf("KV handoff %q: the prefill worker %s did not answer within %v", m.GetHandoffId(), m.GetAddress(), p.timeout)
		}
		return 0, &transport.HandlerError{Code: worker.CodeKVHandoffFailed, Message: msg}
	}
	return int(resp.GetBlocks()), nil
}

func (p *puller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, cc := range p.conns {
		_ = cc.Close()
		delete(p.conns, addr)
	}
}

// transferTime is how long n blocks take to arrive over the link: n x the
// block's bytes x 8 / (gbps x 10^9) seconds, divided by the speed-up (0: no
// delay), as every simulated duration.
func (c Config) transferTime(blocks int) time.Duration {
	if blocks <= 0 || c.Engine.SpeedupRatio == 0 || c.KVTransferGbps <= 0 {
		return 0
	}
	bits := float64(blocks) * float64(c.Engine.BlockSize) * float64(c.KVBytesPerToken) * 8
	return time.Duration(bits / (c.KVTransferGbps * 1e9) / c.Engine.SpeedupRatio * float64(time.Second))
}

// legs serves the two legs of a disaggregated request.
type legs struct {
	cfg    Config
	r      *realtime.Runner
	self   func() *worker.Worker // nil until registered
	puller *puller
}

// prefillResponse is a prefill leg's one answer: its handoff, the prompt's
// usage, finish STOP, no tokens.
func (l *legs) prefillResponse(id string, out simengine.Output, w *worker.Worker) (*workerv1.GenerateResponse, error) {
	bs := l.cfg.Engine.BlockSize
	payload, err := proto.Marshal(&workerv1.MockKvHandoff{HandoffId: id, Address: w.APIAddr(),
		Blocks: uint32((out.Usage.PromptTokens + bs - 1) / bs)})
	if err != nil {
		return nil, err
	}
	h := &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: payload,
		PrefillInstanceId: w.InstanceID(), HoldMs: uint32(l.cfg.HandoffTimeout.Milliseconds())}
	if len(out.Tokens) == 1 {
		first := out.Tokens[0]
		h.FirstTokenId = &first
	}
	return &workerv1.GenerateResponse{FinishReason: workerv1.FinishReason_FINISH_REASON_STOP, Handoff: h,
		Usage: &workerv1.Usage{PromptTokens: uint32(out.Usage.PromptTokens), CachedPromptTokens: uint32(out.Usage.CachedPromptTokens)}}, nil
}

// prepare readies an engine request for its leg: a prefill leg holds its
// blocks; a decode leg starts from the relayed first token, with its KV to
// pull once its engine admits it (the handoff returned, for takeKV).
// Errors are handler errors.
func (l *legs) prepare(req *workerv1.GenerateRequest, er *simengine.Request) (*workerv1.MockKvHandoff, error) {
	switch req.GetLeg() {
	case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_UNSPECIFIED:
		return nil, nil
	case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL:
		if l.self() == nil {
			// The handoff names the registered WorkerService.
			return nil, &transport.HandlerError{Code: transport.CodeDraining, Message: "a prefill leg before the worker is registered"}
		}
		er.Hold = true
		return nil, nil
	case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE:
		m, err := worker.DecodeMockHandoff(req.GetHandoff())
		if err != nil {
			return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
		}
		bs := l.cfg.Engine.BlockSize
		if promptBlocks := (len(er.Prompt) + bs - 1) / bs; int(m.GetBlocks()) > promptBlocks {
			return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("%v: %d blocks for a prompt of %d tokens (%d blocks)",
				worker.ErrInvalidHandoff, m.GetBlocks(), len(er.Prompt), promptBlocks)}
		}
		er.Arrived, er.AwaitPull = true, true
		if f := req.GetHandoff().FirstTokenId; f != nil {
			first := *f
			er.FirstToken = &first
		}
		return m, nil
	}
	return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("unknown disaggregation leg %d", req.GetLeg())}
}

// takeKV runs a decode leg's pull once its engine has admitted it (blocks
// allocated for the arrived KV, as vLLM's decode worker reads the remote KV
// once its scheduler has allocated the blocks): it takes the handoff from
// the prefill worker, waits for the blocks this engine did not cache to
// arrive over the link, and lets the engine run the leg. A stream that
// ended first (the engine stopping) returns nil: its last output is still
// to be read. Errors are handler errors or ctx's; the caller cancels the
// engine's request on one.
func (l *legs) takeKV(ctx context.Context, r *realtime.Runner, stream *realtime.Stream, id string, m *workerv1.MockKvHandoff) error {
	arrived, err := stream.Pull(ctx)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	var self uint64
	if w := l.self(); w != nil {
		self = w.InstanceID()
	}
	if _, err := l.puller.pull(ctx, m, self); err != nil {
		return err
	}
	if d := l.cfg.transferTime(arrived); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := r.EndPull(id); err != nil && !errors.Is(err, simengine.ErrUnknownRequest) {
		return err
	}
	return nil // ended meanwhile (the engine stopping): its stream says so
}

// handoffCollector exports the held handoffs and how past ones ended.
type handoffCollector struct {
	r                     *realtime.Runner
	heldBlocks, held, end *prometheus.Desc
}

func newHandoffCollector(r *realtime.Runner) *handoffCollector {
	return &handoffCollector{r: r,
		heldBlocks: prometheus.NewDesc("switchyard_mocker_kv_handoff_held_blocks",
			"KV blocks prefill legs hold for their decode legs (freed when pulled, released, cancelled or past --handoff-timeout); 0 when no handoff waits.", nil, nil),
		held: prometheus.NewDesc("switchyard_mocker_kv_handoffs_held", "Handoffs whose KV blocks are held now.", nil, nil),
		end: prometheus.NewDesc("switchyard_mocker_kv_handoffs_ended_total",
			"Handoffs whose held KV blocks were freed, by how: pulled by the decode leg, released, cancelled (the prefill leg's answer undelivered) or timed_out.", []string{"end"}, nil),
	}
}

func (c *handoffCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.heldBlocks
	ch <- c.held
	ch <- c.end
}

func (c *handoffCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.HandoffStats()
	ch <- prometheus.MustNewConstMetric(c.heldBlocks, prometheus.GaugeValue, float64(st.HeldBlocks))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.Held))
	for end, n := range st.Ended {
		ch <- prometheus.MustNewConstMetric(c.end, prometheus.CounterValue, float64(n), realtime.HandoffEnd(end).String())
	}
}
