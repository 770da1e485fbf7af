package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// Disaggregated requests. When the router's decision carries a prefill
// target (RouteResponse.prefill), one attempt of a request runs in two
// legs: the prefill leg (GenerateRequest.leg PREFILL) on the prefill
// worker, which computes the prompt, holds its KV and answers with a
// handoff; then the decode leg (leg DECODE, the handoff relayed as it
// came) on the decode worker, which takes the KV and streams the whole
// output. The client sees one response. The router is told the prefill is
// complete when the handoff arrives (MarkPrefillComplete: it ends the
// prefill leg's record and the decode leg's queued prefill) and the Free at
// the end of the attempt ends both.
//
// Failures never reach the client as long as a worker can serve:
//   - the prefill leg fails (its worker unreachable, gone mid-leg,
//     refusing, answering an error, or silent past --handoff-deadline): the
//     request is routed again without that prefill worker, so that another
//     one or a local prefill on a decode worker serves it; after
//     maxPrefillFailures failed prefill legs every prefill worker is left
//     out and the prefill is local;
//   - the decode leg refuses the handoff (kv_handoff_failed, an invalid
//     handoff) or gives no token within --handoff-deadline: the request is
//     routed again with every prefill worker left out (a local prefill), the
//     silent decode worker left out too;
//   - the decode worker goes away: migration, as for any request.
//
// Whenever a leg ends without the decode worker having taken the KV (the
// client left, a failure), the prefill worker is asked to free it
// (ReleaseKvHandoff, in the background, bounded by releaseTimeout); a
// worker that cannot be reached frees it itself at its --handoff-timeout.

// maxPrefillFailures is how many failed prefill legs one request may have
// before its prefill is made local.
const maxPrefillFailures = 2

// maxPairFailures bounds the pair failures (prefill legs and refused
// handoffs) of one request: past it the request fails.
const maxPairFailures = 4

// releaseTimeout bounds one ReleaseKvHandoff call.
const releaseTimeout = 2 * time.Second

// maxWorkerConns bounds the WorkerService connections kept for releases;
// past it they are closed and dialled again as needed.
const maxWorkerConns = 256

// Headers naming who served a response.
const (
	// HeaderWorker is the decode (or aggregated) worker instance of the
	// response, in the registry's hex form, "/rank" appended for a
	// data-parallel rank other than 0 (see workerName).
	HeaderWorker = "X-Switchyard-Worker"
	// HeaderPrefillWorker is the prefill worker instance, set only when
	// the prompt was computed on one.
	HeaderPrefillWorker = "X-Switchyard-Prefill-Worker"
)

// Reasons of switchyard_frontend_disagg_fallbacks_total.
const (
	fallbackPrefillFailed  = "prefill_failed"
	fallbackPrefillTimeout = "prefill_timeout"
	fallbackHandoffRefused = "handoff_refused"
	fallbackHandoffTimeout = "handoff_timeout"
)

// The points of a two-leg attempt where testPoint calls the hook.
const (
	pointPrefill     = "prefill"      // the prefill leg is sent
	pointHandoff     = "handoff"      // its handoff arrived, before the decode leg is sent
	pointDecodeToken = "decode_token" // the decode leg's first tokens arrived, before they are taken
)

// testLeg calls the tests' hooks at a point of a two-leg attempt; ctx is
// the leg's (the decode leg's ends at the handoff deadline).
func (s *Service) testLeg(ctx context.Context, point string, prefill uint64) {
	s.testPoint(point)
	if s.legHook != nil {
		s.legHook(ctx, point, requestIDOf(ctx), prefill)
	}
}

// prefillTarget is where the prefill leg of a decision goes.
type prefillTarget struct {
	instanceID uint64
	dpRank     uint32
	addr       transport.Address
	endpoint   string
}

// legError is a pair's failure that another route can recover from: the
// prefill leg failed, or the decode worker refused the handoff or never
// started; nothing was generated.
type legError struct {
	// prefill: the prefill leg failed; otherwise the decode leg.
	prefill  bool
	instance uint64
	reason   string
	err      error
}

func (e *legError) Error() string {
	leg := "decode"
	if e.prefill {
		leg = "prefill"
	}
	return fmt.Sprintf("%s leg on instance %x: %s: %v", leg, e.instance, e.reason, e.err)
}

func (e *legError) Unwrap() error { return e.err }

// errLegDeadline ends a leg that passed --handoff-deadline.
var errLegDeadline = errors.New("the --handoff-deadline passed")

// disagg holds what the two legs need beyond a request: connections to
// workers' WorkerService (for ReleaseKvHandoff), the releases in flight,
// and the metrics.
type disagg struct {
	opts grpcclient.Options

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
	wg     sync.WaitGroup

	pairs     prometheus.Counter
	fallbacks *prometheus.CounterVec
	releases  *prometheus.CounterVec
}

func newDisagg(opts grpcclient.Options, reg prometheus.Registerer) *disagg {
	d := &disagg{opts: opts, conns: map[string]*grpc.ClientConn{},
		pairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_frontend_disagg_requests_total",
			Help: "Attempts run in two legs: a prefill leg on a prefill worker, then a decode leg with its KV handoff."}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_frontend_disagg_fallbacks_total",
			Help: "Pairs whose leg failed and whose request was routed again without the failed part: prefill_failed, prefill_timeout (no handoff within --handoff-deadline), handoff_refused (the decode worker could not take the KV), handoff_timeout (no token from the decode worker within --handoff-deadline)."},
			[]string{"reason"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_frontend_kv_handoff_releases_total",
			Help: "ReleaseKvHandoff calls for handoffs the decode leg did not take, by result: released (the worker held it), not_held, failed (the worker could not be reached; it frees the KV at its --handoff-timeout)."},
			[]string{"result"}),
	}
	reg.MustRegister(d.pairs, d.fallbacks, d.releases)
	return d
}

// close waits for the releases in flight and closes the connections.
func (d *disagg) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for addr, cc := range d.conns {
		_ = cc.Close()
		delete(d.conns, addr)
	}
}

// client is a WorkerService client of addr.
func (d *disagg) client(addr string) (workerv1.WorkerServiceClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cc, ok := d.conns[addr]; ok {
		return workerv1.NewWorkerServiceClient(cc), nil
	}
	if len(d.conns) >= maxWorkerConns {
		for a, cc := range d.conns {
			_ = cc.Close()
			delete(d.conns, a)
		}
	}
	cc, c, err := worker.DialAPI(addr, d.opts)
	if err != nil {
		return nil, err
	}
	d.conns[addr] = cc
	return c, nil
}

// workerAPI is the WorkerService address instance registered, "" if the
// registry no longer lists it.
func (s *Service) workerAPI(instance uint64) string {
	for _, in := range s.instances.Items() {
		if in.GetInstanceId() == instance {
			if a := in.GetMetadata()[wire.MetadataWorkerAPI]; a != "" {
				return a
			}
		}
	}
	return ""
}

// prefillWorkers are the live prefill instances, to leave them all out of
// a route (a local prefill).
func (s *Service) prefillWorkers() []uint64 {
	var out []uint64
	for _, in := range s.instances.Items() {
		if in.GetRole() == commonv1.Role_ROLE_PREFILL {
			out = append(out, in.GetInstanceId())
		}
	}
	return out
}

// release asks the prefill worker to free the KV it holds for a handoff
// the decode leg did not take, in the background. The handoff id is the
// mock payload's when the handoff is one, otherwise the prefill leg's
// request id (under which the mocker and the adapter hold it).
func (s *Service) release(instance uint64, legID string, h *workerv1.KvHandoff) {
	id := legID
	if h != nil && h.GetKind() == commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK {
		if m, err := worker.DecodeMockHandoff(h); err == nil {
			id = m.GetHandoffId()
		}
	}
	d := s.disagg
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		addr := s.workerAPI(instance)
		if addr == "" {
			// Gone from the registry: a worker that stopped holds nothing.
			d.releases.WithLabelValues("failed").Inc()
			return
		}
		c, err := d.client(addr)
		if err != nil {
			d.releases.WithLabelValues("failed").Inc()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		resp, err := c.ReleaseKvHandoff(ctx, &workerv1.ReleaseKvHandoffRequest{HandoffId: id})
		switch {
		case err != nil:
			d.releases.WithLabelValues("failed").Inc()
			s.log.Warn("KV handoff release failed; the prefill worker frees it at its --handoff-timeout", "instance", fmt.Sprintf("%x", instance),
				"handoff_id", id, "err", err.Error())
		case resp.GetReleased():
			d.releases.WithLabelValues("released").Inc()
		default:
			d.releases.WithLabelValues("not_held").Inc()
		}
	}()
}

// pairAttempt runs one attempt as a prefill leg on d.prefill and a decode
// leg on d's worker. A failure that another route can recover from is a
// *legError; the client's leaving is ctx's error.
func (s *Service) pairAttempt(ctx context.Context, id string, d decision, j *job, tokens []uint32, out *outcome,
	emit emitFunc) (workerv1.FinishReason, error) {
	s.disagg.pairs.Inc()
	h, cached, err := s.prefillLeg(ctx, id, d, j, tokens)
	if err != nil {
		return 0, err
	}
	// The handoff is here: the prefill leg is over for the router (its
	// record ends; the decode leg's prefill is the last block).
	s.routing.prefillDone(d, id)
	d.prefillReported = true
	s.testLeg(ctx, pointHandoff, d.prefill.instanceID)
	if out.migrations == 0 {
		out.legCached = cached
	}
	// The decode leg must give its first token within the deadline: it
	// has the KV to take and one block to compute. Past it the leg is
	// cancelled and the request routed again. The first token and the
	// deadline race; whichever claims the leg first wins: a token taken
	// is the client's (the leg is no longer cancelled for being late),
	// a leg found late sends its tokens nowhere.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var leg atomic.Int32 // decodeWaiting, then decodeStarted or decodeLate
	timer := time.AfterFunc(s.cfg.HandoffDeadline, func() {
		if leg.CompareAndSwap(decodeWaiting, decodeLate) {
			cancel()
		}
	})
	defer timer.Stop()
	decodeEmit := func(ids []uint32, lps []*workerv1.TokenLogprob, more bool) error {
		if leg.Load() == decodeWaiting {
			s.testLeg(dctx, pointDecodeToken, d.prefill.instanceID)
			if !leg.CompareAndSwap(decodeWaiting, decodeStarted) {
				return errLegDeadline
			}
		}
		return emit(ids, lps, more)
	}
	// What the attempt counts before it emits: a late leg's first tokens
	// are taken back, since no client saw them.
	done, generated := out.completion, len(j.generated)
	fin, err := s.attempt(dctx, id, d, j, tokens, out, decodeEmit, workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE, h)
	if err == nil {
		return fin, nil
	}
	started := leg.Load() == decodeStarted
	if !started {
		// The decode worker produced no token the client saw: it may not
		// have taken the KV, which the prefill worker then still holds.
		s.release(d.prefill.instanceID, id, h)
	}
	if ctx.Err() != nil || started {
		return 0, err
	}
	if leg.Load() == decodeLate {
		out.completion, j.generated = done, j.generated[:generated]
		return 0, &legError{instance: d.instanceID, reason: fallbackHandoffTimeout, err: fmt.Errorf("no token from the decode leg: %w (%s)", errLegDeadline, s.cfg.HandoffDeadline)}
	}
	if handoffRefused(err) {
		return 0, &legError{instance: d.instanceID, reason: fallbackHandoffRefused, err: err}
	}
	return 0, err
}

// The states of a decode leg against its handoff deadline.
const (
	decodeWaiting int32 = iota // no token yet, the deadline not passed
	decodeStarted              // its first token was taken
	decodeLate                 // the deadline passed first: the leg is cancelled
)

// handoffRefused reports whether the decode worker refused a decode leg
// before generating: it could not take the KV (kv_handoff_failed), or it
// refused the request (an invalid handoff, a kind it does not speak; a
// whole request may still be served there).
func handoffRefused(err error) bool {
	var he *transport.HandlerError
	if !errors.As(err, &he) {
		return false
	}
	return he.Code == worker.CodeKVHandoffFailed || he.Code == transport.CodeInvalidArgument || he.Code == transport.CodeUnimplemented
}

// prefillLeg sends the prefill leg of tokens to d.prefill and returns its
// handoff and the prompt tokens the prefill worker had cached. Every
// failure but the client's leaving is a *legError.
func (s *Service) prefillLeg(ctx context.Context, id string, d decision, j *job, tokens []uint32) (_ *workerv1.KvHandoff, cached uint32, err error) {
	p := d.prefill
	s.load.add(p.instanceID, 1)
	defer s.load.add(p.instanceID, -1)
	s.metrics.routed(p.instanceID)
	pctx, span := startSpan(ctx, "frontend.prefill", attribute.String("switchyard.request_id", id))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.prefill_instance_id", strconv.FormatUint(p.instanceID, 16)))
	}
	defer func() { endSpan(span, err) }()
	pctx, cancel := context.WithTimeoutCause(pctx, s.cfg.HandoffDeadline, errLegDeadline)
	defer cancel()
	h, cached, err := s.callPrefill(pctx, id, p, j, tokens)
	if err == nil {
		return h, cached, nil
	}
	// The leg ended without a handoff delivered: the worker frees the KV
	// of a cancelled leg itself, but one whose answer was already out
	// holds it; the release covers both.
	s.release(p.instanceID, id, h)
	if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	reason := fallbackPrefillFailed
	if errors.Is(context.Cause(pctx), errLegDeadline) {
		reason, err = fallbackPrefillTimeout, fmt.Errorf("no handoff from the prefill leg: %w (%s)", errLegDeadline, s.cfg.HandoffDeadline)
	}
	return nil, 0, &legError{prefill: true, instance: p.instanceID, reason: reason, err: err}
}

// callPrefill sends the prefill leg and reads its one answer.
func (s *Service) callPrefill(ctx context.Context, id string, p *prefillTarget, j *job, tokens []uint32) (*workerv1.KvHandoff, uint32, error) {
	req := s.generateRequest(id, j, tokens, nil, workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL, nil)
	req.DpRank = p.dpRank
	payload, err := proto.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	stream, err := s.client.Call(ctx, p.addr, p.endpoint, transport.Headers{transport.HeaderRequestID: id}, payload)
	if err != nil {
		return nil, 0, err
	}
	defer stream.Close()
	s.testLeg(ctx, pointPrefill, p.instanceID)
	var h *workerv1.KvHandoff
	var cached uint32
	for {
		b, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if h == nil {
				return nil, 0, fmt.Errorf("%w: instance %x ended the prefill leg without a KV handoff", ErrWorkerFailed, p.instanceID)
			}
			return h, cached, nil
		}
		if err != nil {
			return h, 0, err
		}
		var m workerv1.GenerateResponse
		if err := proto.Unmarshal(b, &m); err != nil {
			return h, 0, fmt.Errorf("%w: undecodable prefill answer from instance %x: %v", ErrWorkerFailed, p.instanceID, err)
		}
		if m.GetFinishReason() == workerv1.FinishReason_FINISH_REASON_ERROR {
			return h, 0, fmt.Errorf("%w: instance %x: %s", ErrWorkerFailed, p.instanceID, m.GetErrorMessage())
		}
		if u := m.GetUsage(); u != nil {
			cached = u.GetCachedPromptTokens()
		}
		if m.GetHandoff() != nil {
			h = m.GetHandoff()
			if n := len(h.GetPayload()); n > worker.MaxHandoffPayload {
				return h, 0, fmt.Errorf("%w: instance %x: a KV handoff of %d bytes, past %d", ErrWorkerFailed, p.instanceID, n, worker.MaxHandoffPayload)
			}
		}
	}
}

// setServedBy names the workers of an attempt in the response's headers
// (h is the choice's own header map, written out with its first write).
func setServedBy(h http.Header, d decision) {
	h.Set(HeaderWorker, workerName(d.instanceID, d.dpRank))
	if d.prefill != nil {
		h.Set(HeaderPrefillWorker, strconv.FormatUint(d.prefill.instanceID, 16))
	} else {
		h.Del(HeaderPrefillWorker)
	}
}

// pairFailures are the failed legs of one request's two-leg attempts and
// what the next routes leave out because of them.
type pairFailures struct {
	n, prefill int
	// local: every prefill worker is left out (the prefill is local).
	local bool
	// left are the workers whose leg failed.
	left []uint64
}

// exclude is the route's exclusion list: the migrated-from workers plus
// what the failed legs leave out.
func (p *pairFailures) exclude(s *Service, exclude []uint64) []uint64 {
	if p.n == 0 {
		return exclude
	}
	out := append(append([]uint64(nil), exclude...), p.left...)
	if p.local {
		out = append(out, s.prefillWorkers()...)
	}
	return out
}

// failed notes a failed leg; past maxPairFailures it is the request's
// error.
func (p *pairFailures) failed(s *Service, j *job, le *legError) error {
	p.n++
	s.disagg.fallbacks.WithLabelValues(le.reason).Inc()
	if p.n > maxPairFailures {
		return fmt.Errorf("%w: %v (%d failed legs)", ErrWorkerFailed, le, p.n)
	}
	if le.prefill {
		p.prefill++
		p.left = append(p.left, le.instance)
		if p.prefill >= maxPrefillFailures {
			p.local = true
		}
		if unreachable(le.err) {
			wait := s.fence.fail(le.instance)
			s.metrics.fenced.Inc()
			s.log.Warn("prefill worker unreachable; fenced out of routing", "instance", fmt.Sprintf("%x", le.instance), "retry_in", wait.String())
		}
	} else {
		p.local = true
		if le.reason == fallbackHandoffTimeout {
			p.left = append(p.left, le.instance)
		}
	}
	s.log.Warn("a leg of a disaggregated request failed; routing it again", "request_id", j.id, "reason", le.reason, "local_prefill", p.local,
		"err", le.Error())
	return nil
}
