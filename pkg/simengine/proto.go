package simengine

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// RequestFromProto converts a worker protocol request. A max_tokens of 0
// (up to the context length) becomes defaultMaxTokens. Fields a simulated
// engine has no use for (sampling except its seed, stop strings, ignore_eos:
// the mocker has no end-of-sequence token) are ignored. The returned request
// shares the proto's token slice. It fails with ErrInvalidRequest for a
// request Add would reject as such.
func RequestFromProto(req *workerv1.GenerateRequest, defaultMaxTokens int) (Request, error) {
	r := Request{
		ID:        req.GetRequestId(),
		Prompt:    req.GetTokenIds(),
		MaxTokens: int(req.GetMaxTokens()),
		Seed:      req.GetSampling().GetSeed(),
		Salt:      req.GetCacheSalt(),
		LoRA:      req.GetLoraName(),
	}
	if r.MaxTokens == 0 {
		r.MaxTokens = defaultMaxTokens
	}
	if stop := req.GetStop(); stop != nil {
		r.StopTokenIDs = stop.GetStopTokenIds()
		r.MinTokens = int(stop.GetMinTokens())
	}
	switch {
	case r.ID == "":
		return Request{}, fmt.Errorf("%w: empty request id", ErrInvalidRequest)
	case len(r.Prompt) == 0:
		return Request{}, fmt.Errorf("%w: request %q has no token ids", ErrInvalidRequest, r.ID)
	case r.MaxTokens <= 0:
		return Request{}, fmt.Errorf("%w: request %q has max tokens %d", ErrInvalidRequest, r.ID, r.MaxTokens)
	case len(r.Salt) > MaxSaltLen:
		return Request{}, fmt.Errorf("%w: request %q has a cache salt of %d bytes, more than %d", ErrInvalidRequest, r.ID, len(r.Salt), MaxSaltLen)
	case len(r.LoRA) > MaxLoRALen:
		return Request{}, fmt.Errorf("%w: request %q has a LoRA adapter name of %d bytes, more than %d", ErrInvalidRequest, r.ID, len(r.LoRA), MaxLoRALen)
	}
	return r, nil
}

// Proto returns the output as one message of a generate response stream.
func (o Output) Proto() *workerv1.GenerateResponse {
	return &workerv1.GenerateResponse{
		TokenIds:     o.Tokens,
		FinishReason: o.Finish.Proto(),
		Usage: &workerv1.Usage{
			PromptTokens:       uint32(o.Usage.PromptTokens),
			CompletionTokens:   uint32(o.Usage.CompletionTokens),
			CachedPromptTokens: uint32(o.Usage.CachedPromptTokens),
		},
	}
}

// Proto returns the worker protocol's finish reason.
func (r FinishReason) Proto() workerv1.FinishReason {
	switch r {
	case FinishLength:
		return workerv1.FinishReason_FINISH_REASON_LENGTH
	case FinishStop, FinishHeld:
		// A prefill leg ends with STOP (its handoff carries the rest).
		return workerv1.FinishReason_FINISH_REASON_STOP
	case FinishCancelled:
		return workerv1.FinishReason_FINISH_REASON_CANCELLED
	default:
		return workerv1.FinishReason_FINISH_REASON_UNSPECIFIED
	}
}

// Proto returns the metrics as the worker protocol's load report of the
// given worker instance and data-parallel rank, taken at the given time (the
// caller's clock, real or simulated), with the engine's timing model.
func (m Metrics) Proto(instanceID uint64, dpRank uint32, at time.Time, timing timingmodel.Model) *workerv1.LoadMetrics {
	reqs := make([]*workerv1.RequestLoad, len(m.Requests))
	for i, r := range m.Requests {
		reqs[i] = &workerv1.RequestLoad{RequestId: r.ID, PrefillTokens: uint32(r.PrefillTokens), DecodeBlocks: uint32(r.DecodeBlocks)}
	}
	return &workerv1.LoadMetrics{
		TimingModel:         timing.Proto(),
		Requests:            reqs,
		InstanceId:          instanceID,
		DpRank:              dpRank,
		ActiveDecodeBlocks:  uint64(m.ActiveDecodeBlocks),
		ActivePrefillTokens: uint64(m.ActivePrefillTokens),
		KvBlocksUsed:        uint64(m.KVBlocksUsed),
		KvBlocksTotal:       uint64(m.KVBlocksTotal),
		WaitingRequests:     uint32(m.Waiting),
		RunningRequests:     uint32(m.Running),
		Timestamp:           timestamppb.New(at),
		LoraAdapters:        m.LoRAs,
		RequestsTotal:       m.RequestsTotal,
		OutputTokensTotal:   m.OutputTokensTotal,
	}
}
