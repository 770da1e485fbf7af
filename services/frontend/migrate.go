package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// errStopped is returned by an emit function to end generation early (a
// stop string matched); the worker's stream is abandoned, which cancels it.
var errStopped = errors.New("frontend: stop string reached")

// job is one generation request, preprocessed.
type job struct {
	id     string
	model  string
	prompt []uint32
	p      genParams
	// generated are the tokens produced so far, over every attempt.
	generated []uint32
	// servedBy, when set, is told each attempt's decision before the
	// attempt runs (to name its workers in the response's headers).
	servedBy func(decision)
	// promptLogprobs, when the request asks for the prompt's log
	// probabilities (p.promptLogprobs), takes them once a worker sent them;
	// gotPromptLogprobs says it did, so that a migrated attempt does not
	// ask again.
	promptLogprobs    func([]*workerv1.TokenLogprob)
	gotPromptLogprobs bool
}

// wantsPromptLogprobs reports whether the next attempt must ask for the
// prompt's log probabilities: the request wants them, no attempt delivered
// them yet, and the prompt has a token after the first.
func (j *job) wantsPromptLogprobs() bool {
	return j.p.promptLogprobs != nil && !j.gotPromptLogprobs && len(j.prompt) > 1
}

// takePromptLogprobs checks the first response of an attempt that asked
// for the prompt's log probabilities: a worker that sent none cannot
// compute them (the client asked for something this worker does not do: a
// 400 naming echo), one that sent a wrong count failed.
func (j *job) takePromptLogprobs(instance uint64, lps []*workerv1.TokenLogprob) error {
	want := len(j.prompt) - 1
	switch {
	case len(lps) == 0:
		return &openai.ParamError{Param: "echo", Code: "unsupported_parameter",
			Message: fmt.Sprintf("echo with logprobs needs the prompt's log probabilities, and worker %x did not return them", instance)}
	case len(lps) != want:
		return fmt.Errorf("%w: instance %x returned %d prompt log probabilities for a prompt of %d tokens (want %d)",
			ErrWorkerFailed, instance, len(lps), len(j.prompt), want)
	}
	j.gotPromptLogprobs = true
	if j.promptLogprobs != nil {
		j.promptLogprobs(lps)
	}
	return nil
}

// outcome is how a generation ended.
type outcome struct {
	finish       workerv1.FinishReason
	completion   uint32
	cachedPrompt uint32
	migrations   int
	// legCached is the prompt tokens the prefill worker of a two-leg
	// attempt had cached; usage counts the larger of it and the decode
	// worker's (what either leg reused).
	legCached uint32
	// instance is the worker of the last attempt, prefill its prefill
	// worker when it ran in two legs (0 otherwise).
	instance, prefill uint64
}

// migratable reports whether a failed attempt may be retried on another
// worker: the worker could not be reached, went away mid-stream, was
// draining, or never answered.
func migratable(err error) bool {
	return errors.Is(err, transport.ErrDisconnected) || errors.Is(err, transport.ErrCannotConnect) ||
		errors.Is(err, transport.ErrDraining) || errors.Is(err, transport.ErrTimeout)
}

// emitFunc takes a batch of generated tokens, their log probabilities when
// asked for, and whether the worker's next response is already queued.
type emitFunc func(ids []uint32, lps []*workerv1.TokenLogprob, more bool) error

// generate runs j on workers, calling emit with each batch of new token ids,
// until the generation finishes, emit returns errStopped, or ctx ends. When
// a worker fails in a way migratable reports, the request moves to another
// worker (the failed ones excluded) with the prompt plus the tokens already
// produced, up to --migration-limit times; the caller sees one stream.
func (s *Service) generate(ctx context.Context, j *job, emit emitFunc) (outcome, error) {
	var out outcome
	var exclude []uint64
	// pair counts the failed legs of two-leg attempts (disagg.go), which
	// are routed again without the part that failed rather than migrated.
	var pair pairFailures
	for attempt := 0; ; attempt++ {
		// The first attempt sends the prompt as it is (nothing modifies
		// it); a migrated one the prompt plus what was generated.
		tokens := j.prompt
		if len(j.generated) > 0 {
			tokens = append(append(make([]uint32, 0, len(j.prompt)+len(j.generated)), j.prompt...), j.generated...)
		}
		id := j.id
		if attempt > 0 {
			id = fmt.Sprintf("%s-m%d", j.id, attempt)
		}
		rctx, span := startSpan(ctx, "frontend.route", attribute.Int("switchyard.attempt", attempt))
		d, err := s.routeKnown(rctx, id, j, tokens, s.fence.exclude(pair.exclude(s, exclude)))
		if err == nil && span.IsRecording() {
			span.SetAttributes(attribute.String("switchyard.instance_id", strconv.FormatUint(d.instanceID, 16)))
		}
		endSpan(span, err)
		if err != nil {
			// Every worker left is fenced or failed this request (and the
			// failed worker's model card may already be gone with it).
			if (attempt > 0 && errors.Is(err, ErrUnknownModel)) || (errors.Is(err, ErrNoInstance) && (attempt > 0 || s.fence.any())) {
				return out, fmt.Errorf("%w: no reachable worker for model %s", ErrNoInstance, j.model)
			}
			return out, err
		}
		s.metrics.routed(d.instanceID)
		out.instance, out.prefill = d.instanceID, 0
		if d.prefill != nil {
			out.prefill = d.prefill.instanceID
		}
		if j.servedBy != nil {
			j.servedBy(d)
		}
		fin, err := s.routedAttempt(ctx, attempt, id, d, j, tokens, &out, emit)
		if err == nil {
			s.fence.alive(d.instanceID)
			out.finish = fin
			return out, nil
		}
		if ctx.Err() != nil {
			return out, err
		}
		var le *legError
		if errors.As(err, &le) {
			if err := pair.failed(s, j, le); err != nil {
				return out, err
			}
			continue
		}
		if unreachable(err) {
			wait := s.fence.fail(d.instanceID)
			s.metrics.fenced.Inc()
			s.log.Warn("worker unreachable; fenced out of routing", "instance", fmt.Sprintf("%x", d.instanceID), "retry_in", wait.String(), "err", err.Error())
		}
		if !migratable(err) {
			return out, err
		}
		if out.migrations >= s.cfg.MigrationLimit {
			return out, fmt.Errorf("%w: instance %x: %v (migration limit %d reached)", ErrWorkerFailed, d.instanceID, err, s.cfg.MigrationLimit)
		}
		s.log.Warn("worker failed mid-request; migrating", "request_id", j.id, "instance", fmt.Sprintf("%x", d.instanceID),
			"generated", out.completion, "attempt", attempt+1, "err", err.Error())
		s.metrics.migrations.WithLabelValues(j.model).Inc()
		out.migrations++
		exclude = append(exclude, d.instanceID)
	}
}

// refused turns a worker's refusal of what the request asks (a handler
// error invalid_argument or unimplemented, such as a response format it
// cannot honour) into the client's 400 with the worker's reason; other
// errors are returned as they are.
func refused(err error) error {
	var he *transport.HandlerError
	if errors.As(err, &he) && (he.Code == transport.CodeInvalidArgument || he.Code == transport.CodeUnimplemented) {
		return fmt.Errorf("%w: the worker refused the request: %s", ErrInvalidRequest, he.Message)
	}
	return err
}

// routedAttempt runs one attempt on the worker d names, counted in this
// frontend's load while it runs. Whatever ends it (an error, a panic, the
// client gone) the load is given back and the router told the request is
// over: a request left counted would weigh on every later decision.
func (s *Service) routedAttempt(ctx context.Context, attempt int, id string, d decision, j *job, tokens []uint32, out *outcome,
	emit emitFunc) (fin workerv1.FinishReason, err error) {
	s.load.add(d.instanceID, 1)
	defer func() {
		s.load.add(d.instanceID, -1)
		s.routing.free(d, id)
	}()
	gctx, span := startSpan(ctx, "frontend.generate", attribute.Int("switchyard.attempt", attempt), attribute.String("switchyard.request_id", id))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.instance_id", strconv.FormatUint(d.instanceID, 16)))
	}
	defer func() { endSpan(span, err) }()
	s.testPoint(pointRouted)
	out.legCached = 0
	if d.prefill != nil {
		return s.pairAttempt(gctx, id, d, j, tokens, out, emit)
	}
	return s.attempt(gctx, id, d, j, tokens, out, emit, workerv1.DisaggregationLeg_DISAGGREGATION_LEG_UNSPECIFIED, nil)
}

// generateRequest is the worker request of one attempt on tokens (the
// prompt plus what earlier attempts generated), for the leg named (unset:
// the whole request) with the prefill leg's handoff on a decode leg.
func (s *Service) generateRequest(id string, j *job, tokens []uint32, out *outcome, leg workerv1.DisaggregationLeg,
	h *workerv1.KvHandoff) *workerv1.GenerateRequest {
	var done uint32
	if out != nil {
		done = out.completion
	}
	req := &workerv1.GenerateRequest{RequestId: id, TokenIds: tokens, Sampling: j.p.sampling, Model: j.model,
		Stop: &workerv1.StopConditions{StopTokenIds: j.p.stopTokenIDs, IgnoreEos: j.p.ignoreEOS}, Logprobs: j.p.logprobs,
		GuidedDecoding: j.p.guided, Leg: leg, Handoff: h, CacheSalt: j.p.cacheSalt, LoraName: j.p.lora}
	if j.wantsPromptLogprobs() {
		req.PromptLogprobs = j.p.promptLogprobs
	}
	if j.p.maxTokens > 0 {
		req.MaxTokens = j.p.maxTokens - done
	}
	if j.p.minTokens > done {
		req.Stop.MinTokens = j.p.minTokens - done
	}
	return req
}

// attempt runs one worker call on tokens (the prompt plus what earlier
// attempts generated): the whole request, or the decode leg of a pair
// with its handoff h. It appends every generated token to j.generated and
// counts it in out.
func (s *Service) attempt(ctx context.Context, id string, d decision, j *job, tokens []uint32, out *outcome,
	emit emitFunc, leg workerv1.DisaggregationLeg, h *workerv1.KvHandoff) (workerv1.FinishReason, error) {
	req := s.generateRequest(id, j, tokens, out, leg, h)
	req.DpRank = d.dpRank // the rank of the worker the router chose
	payload, err := proto.Marshal(req)
	if err != nil {
		return 0, err
	}
	askedPrompt := req.PromptLogprobs != nil
	stream, err := s.client.Call(ctx, d.addr, d.endpoint, transport.Headers{transport.HeaderRequestID: id}, payload)
	if err != nil {
		return 0, refused(err)
	}
	defer stream.Close()
	first := true
	finish := workerv1.FinishReason_FINISH_REASON_UNSPECIFIED
	var resp genResponse
	for {
		b, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if finish == workerv1.FinishReason_FINISH_REASON_UNSPECIFIED {
				finish = workerv1.FinishReason_FINISH_REASON_STOP
			}
			return finish, nil
		}
		if err != nil {
			return 0, refused(err)
		}
		if err := resp.decode(b); err != nil {
			return 0, fmt.Errorf("%w: undecodable response from instance %x: %v", ErrWorkerFailed, d.instanceID, err)
		}
		if resp.finish == workerv1.FinishReason_FINISH_REASON_ERROR {
			return 0, fmt.Errorf("%w: instance %x: %s", ErrWorkerFailed, d.instanceID, resp.errMsg)
		}
		if askedPrompt {
			askedPrompt = false
			if err := j.takePromptLogprobs(d.instanceID, resp.promptLogprobs); err != nil {
				return 0, err
			}
		}
		if resp.hasUsage && out.migrations == 0 {
			out.cachedPrompt = max(resp.cached, out.legCached)
		}
		if len(resp.tokenIDs) > 0 {
			if first {
				first = false
				// The admission queue first: the router's word that the
				// prefill freed room then finds it counted.
				firstTokenOf(ctx)
				if !d.prefillReported {
					s.routing.prefillDone(d, id)
				}
			}
			out.completion += uint32(len(resp.tokenIDs))
			if j.generated == nil && j.p.maxTokens > 0 {
				// Sized once for the whole generation (bounded: max_tokens
				// may be far more than a stream produces).
				j.generated = make([]uint32, 0, min(j.p.maxTokens, 1024))
			}
			j.generated = append(j.generated, resp.tokenIDs...)
			// more: the next response is already here, so the client's
			// write can wait for it (one write per batch, not per token).
			// The ids are valid until the next decode: emit keeps none.
			pending, _ := stream.(transport.Pending)
			if err := emit(resp.tokenIDs, resp.logprobs, pending != nil && pending.Pending()); err != nil {
				if errors.Is(err, errStopped) {
					return workerv1.FinishReason_FINISH_REASON_STOP, nil
				}
				return 0, err
			}
		}
		if resp.finish != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED {
			finish = resp.finish
		}
	}
}

// routerCatchUp bounds how long a request waits for the router to learn a
// model the frontend's catalog already has (routeKnown).
const routerCatchUp = 5 * time.Second

// routeKnown routes one attempt of j. The frontend's catalog and the router
// service each watch the registry's model cards, and right after a worker
// registers the router's watch may not have delivered its card yet: the
// router then answers "unknown model" for a model the frontend lists in
// /v1/models and has just tokenized for. Rather than a 404 the request waits
// for the router to catch up, routing again with a growing pause (20 ms to
// 200 ms) while the catalog still has the card, for at most routerCatchUp;
// past that the router's answer stands. A request for a LoRA adapter is not
// retried: the router knowing the base model but not the adapter is an
// answer, not a lag.
func (s *Service) routeKnown(ctx context.Context, id string, j *job, tokens []uint32, exclude []uint64) (decision, error) {
	keys := routeKeys{session: j.p.session, salt: j.p.cacheSalt, lora: j.p.lora}
	d, err := s.routing.route(ctx, id, j.model, tokens, exclude, keys)
	deadline := time.Now().Add(routerCatchUp)
	for pause := 20 * time.Millisecond; errors.Is(err, ErrUnknownModel) && keys.lora == "" && s.catalog.card(j.model) != nil; pause = min(2*pause, 200*time.Millisecond) {
		if time.Now().Add(pause).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return decision{}, ctx.Err()
		case <-time.After(pause):
		}
		d, err = s.routing.route(ctx, id, j.model, tokens, exclude, keys)
	}
	return d, err
}
