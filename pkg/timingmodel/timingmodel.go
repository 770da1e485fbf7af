// Package timingmodel is how long an inference engine takes to compute a
// step, as workers publish it (worker.v1.TimingModel) and the router uses
// it to predict a request's time to first token on each worker. The mocker
// simulates with the same model it publishes.
//
// An engine step computes up to MaxBatchedTokens tokens: prompt chunks of
// requests in prefill plus one token per decoding request. A step of t new
// prompt tokens and no decoding request costs Prefill(t); one with decoding
// requests costs Decode(u), u being the fraction of KV blocks in use, plus
// what its prompt tokens add to it, Prefill(t) less the per-step constant
// PrefillPerBatch (StepMs).
//
// Prefill(t) is a prompt's time to first token on an idle engine, as the
// fits measure it, and part of its constant, PrefillPerRequest, is the
// request's serving overhead rather than step time: it is paid once per
// request, delays that request's first token and occupies no step. A step
// of prompt tokens alone costs Prefill(t) less PrefillPerRequest
// (StepConstant); STEPS.md says where the two parts come from.
//
// Why the constant is paid once: a step is one forward pass, and a pass
// reads the model's weights once whatever tokens it carries. The two fits
// each include a pass's fixed cost (Decode's base is mostly that read; a
// prefill's constant is that and the request's own overhead, measured as
// its time to first token on an idle engine), and a step that carries both
// a prompt chunk and the decoding requests' tokens does not pay it twice.
// That is how chunked prefill runs in vLLM and Sarathi-Serve: prompt chunks
// are batched with the memory-bound decode tokens to use the compute the
// decode step leaves idle, and a prompt chunk in the batch lengthens the
// step by its tokens' compute, which every decoding request's next token
// then waits for. It matters most for small chunks: a decode worker
// computing the last token of a prompt whose KV arrived from a prefill
// worker (vLLM's disaggregated decode recomputes only that) adds a few
// tokens' compute to its step, not a whole prefill's constant.
//
// The quadratic term is attention, and attention is per sequence: a chunk
// of n prompt tokens after a tokens of its own sequence costs
// PrefillQuadratic x ((a+n)^2 - a^2) (Attention), which is the fit's t^2
// for one uncached prompt in one step. An engine charges each step that
// way (StepAttentionMs): a long prompt's later chunks, and a prompt after
// a long cached prefix, cost more than their tokens alone; prompts
// batched together less than their sum squared. The router's predictions
// (Steps) price a prefill the same way: a Span carries the attention of
// its prompts, each over its own context, and since a prompt's chunks
// telescope ((a+n)^2 - a^2 summed over them is (a+N)^2 - a^2 whatever the
// chunks) the attention does not depend on how the steps split the
// prompts; the steps' count only sets how many per-step constants and
// decode steps the prefill pays.
package timingmodel

import (
	"math"
	"time"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// Model holds the coefficients, in milliseconds.
type Model struct {
	// Prefill(t) = PrefillQuadratic*t^2 + PrefillPerToken*t + PrefillPerBatch
	// for one uncached prompt of t tokens (see Attention for the
	// quadratic term of chunks with a context).
	PrefillQuadratic, PrefillPerToken, PrefillPerBatch float64
	// PrefillPerRequest is the part of PrefillPerBatch a request pays
	// once, outside the engine's steps (its serving overhead: see the
	// package doc); the rest is the constant of each step of prompt
	// tokens alone (StepConstant). 0: every such step pays all of it.
	PrefillPerRequest float64
	// Decode(u) = max(DecodeMin, DecodeQuadratic*u^2 + DecodeLinear*u + DecodeBase).
	DecodeQuadratic, DecodeLinear, DecodeBase, DecodeMin float64
	// MaxBatchedTokens is the most tokens one step computes.
	MaxBatchedTokens int
	// MaxRunning is the most requests the engine runs at once (vLLM's
	// max_num_seqs); 0 when unknown. No prediction of one request uses
	// it; a planner sizing a pool does.
	MaxRunning int
	// CPULoadPerToken and DiskLoadPerToken are the time to bring one
	// token's KV back to the GPU from host memory and from disk: what a
	// prefix hit on a lower cache tier costs instead of its recomputation.
	// Zero is DefaultCPULoadMsPerToken, DefaultDiskLoadMsPerToken (see
	// LoadMsPerToken).
	CPULoadPerToken, DiskLoadPerToken float64
	// LoraLoadMs is the time to load a LoRA adapter into a free slot
	// before a request with it can start.
	LoraLoadMs float64
}

// The default load times per token of the lower cache tiers, for a worker
// that publishes none. Both assume the KV of a Llama-3-8B-class model in
// bf16: 32 layers, 8 KV heads of 128, keys and values, 128 KiB per token.
//
//   - Host memory: 0.005 ms per token is 26 GB/s, half of what PCIe Gen5
//     x16 moves host to device in practice (~50 GB/s of its 64) and all of
//     Gen4 x16's (~25 GB/s): offloading connectors copy blocks of 16 tokens
//     per layer, smaller copies than a bandwidth test's, so the lower end.
//     The default model prefills about 66 tokens per ms (PrefillPerToken
//     0.0152 ms), so a host hit loads about 3x faster than it recomputes.
//   - Disk: 0.025 ms per token is 5.2 GB/s, one NVMe Gen4 drive's reads
//     (~7 GB/s sequential, less for block-sized reads), then PCIe. That is
//     slower than recomputing on the default model; a disk tier pays on
//     larger models (more compute per token of KV), whose workers publish
//     their own rates.
//
// Both scale with the model's KV bytes per token over the link's
// bandwidth: a worker serving a model with 4x the KV per token, or behind
// a link at half the speed, publishes its own.
const (
	DefaultCPULoadMsPerToken  = 0.005
	DefaultDiskLoadMsPerToken = 0.025
)

// LoadMsPerToken is the time to bring one token's KV back to the GPU from
// host memory (disk false) or disk (true), the default when unset.
func (m *Model) LoadMsPerToken(disk bool) float64 {
	if disk {
		if m.DiskLoadPerToken > 0 {
			return m.DiskLoadPerToken
		}
		return DefaultDiskLoadMsPerToken
	}
	if m.CPULoadPerToken > 0 {
		return m.CPULoadPerToken
	}
	return DefaultCPULoadMsPerToken
}

// DefaultLoraLoadMs is the adapter load time a router assumes of a worker
// that publishes none, and the mocker's and the replay's default: a rank-64
// adapter on every linear layer of a Llama-3-8B-class model (the model of
// the tiers' defaults above), read from disk and copied into a GPU slot.
//
//   - Size: each of the 32 layers has rank x (in + out) parameters per
//     adapted projection: q and o 4096+4096, k and v 4096+1024, gate and
//     up 4096+14336, down 14336+4096, so 64 x 81,920 per layer; in bf16
//     that is 64 x 81,920 x 32 x 2 B = 335.5 MB (a rank-16 adapter of the
//     attention projections alone is 20x smaller).
//   - Read: vLLM keeps --max-cpu-loras adapters in host memory, by
//     default as many as GPU slots (--max-loras), so a fleet with more
//     adapters than slots reads most loads from disk: 64.5 ms at the disk
//     tier's 5.2 GB/s.
//   - Copy: into the slot at the host tier's 26 GB/s, 12.9 ms.
//
// That is 77.4 ms, and vLLM loads an adapter inside the step that first
// needs it (the whole batch waits). It leaves out the engine's own set-up
// per adapted module; a worker that measures its loads publishes them.
const DefaultLoraLoadMs = loraBytes/diskBytesPerMs + loraBytes/hostBytesPerMs

// loraBytes is DefaultLoraLoadMs' adapter size; diskBytesPerMs and
// hostBytesPerMs are the disk and host tiers' bandwidths above (5.2 and
// 26 GB/s) in bytes per millisecond.
const (
	loraBytes      = 64 * 81920 * 32 * 2
	diskBytesPerMs = 5.2e6
	hostBytesPerMs = 26e6
)

// Default is Dynamo's mocker fit of vLLM on an H100, with vLLM's default
// 8192 tokens per step: what a router assumes of a worker that publishes
// no model, and what the engine adapter publishes unless told otherwise.
// Of its prefill constant, all but the decode fit's base (a forward
// pass's fixed cost) is the request's serving overhead, paid once
// (PrefillPerRequest; STEPS.md derives it).
func Default() Model {
	return Model{
		PrefillQuadratic: 4.209989e-7, PrefillPerToken: 1.518344e-2, PrefillPerBatch: 16.50142, PrefillPerRequest: 16.50142 - 5.74,
		DecodeQuadratic: -25.74, DecodeLinear: 54.01, DecodeBase: 5.74, DecodeMin: 1,
		MaxBatchedTokens: 8192, LoraLoadMs: DefaultLoraLoadMs,
	}
}

// PrefillMs is Prefill(t), in ms: one uncached prompt of t new tokens
// computed in one step on an idle engine, its request's overhead
// (PrefillPerRequest) included: its time to first token there.
func (m Model) PrefillMs(t float64) float64 {
	return prefillMs(m.PrefillQuadratic, m.PrefillPerToken, m.PrefillPerBatch, t)
}

// prefillMs is PrefillMs of the coefficients: Steps computes with the
// same expression, so its predictions are the model's to the bit.
func prefillMs(quadratic, perToken, perBatch, t float64) float64 {
	if t <= 0 {
		return 0
	}
	return quadratic*t*t + perToken*t + perBatch
}

// StepConstant is the per-step constant of a step of prompt tokens
// alone: PrefillPerBatch less what each request pays outside the steps
// (PrefillPerRequest), never below 0.
func (m Model) StepConstant() float64 {
	return max(m.PrefillPerBatch-m.PrefillPerRequest, 0)
}

// PiggybackMs is the time t new prompt tokens add to a step that also
// computes decoding requests' tokens, in ms: Prefill(t) without the
// per-step constant, which the decode step pays (see the package doc).
func (m Model) PiggybackMs(t float64) float64 {
	return prefillMs(m.PrefillQuadratic, m.PrefillPerToken, 0, t)
}

// StepMs is the time of a step that computes t new prompt tokens and, when
// decoding, one token for each of its decoding requests at KV usage u, in
// ms: PiggybackMs(t) plus StepConstant alone, Decode(u) plus PiggybackMs(t)
// with decoding requests, 0 for a step with nothing to compute.
func (m Model) StepMs(t float64, decoding bool, u float64) float64 {
	if !decoding {
		if t <= 0 {
			return 0
		}
		return m.PiggybackMs(t) + m.StepConstant()
	}
	return m.DecodeMs(u) + m.PiggybackMs(t)
}

// Attention is what a prompt chunk of n tokens, computed after the first
// a tokens of the same sequence (its cached prefix and earlier chunks),
// puts in the quadratic term: (a+n)^2 - a^2. The term is attention: each
// new token attends to every token before it in its own sequence, so a
// chunk's cost grows with the context it follows, and prompts sharing a
// step do not attend to one another. One uncached prompt computed in one
// step puts t^2 there, the fit's own case (a prompt's prefill on an idle
// engine); a prompt in chunks puts the same total, whatever the chunks.
func Attention(a, n int) float64 {
	x, y := float64(max(a, 0)), float64(max(n, 0))
	return y * (2*x + y)
}

// StepAttentionMs is StepMs of a step whose t new prompt tokens put attn
// in the quadratic term (the sum of Attention over the step's chunks) in
// place of t^2: how an engine's step costs when it batches prompts of
// their own contexts. With one chunk of an uncached prompt, attn = t^2
// and it is StepMs.
func (m Model) StepAttentionMs(t, attn float64, decoding bool, u float64) float64 {
	if t <= 0 {
		if decoding {
			return m.DecodeMs(u)
		}
		return 0
	}
	ms := m.PrefillQuadratic*attn + m.PrefillPerToken*t
	if decoding {
		return m.DecodeMs(u) + ms
	}
	return ms + m.StepConstant()
}

// DecodeMs is the decode time of a step at KV usage u (clamped to 0..1),
// in ms.
func (m Model) DecodeMs(u float64) float64 {
	u = min(max(u, 0), 1)
	return max(m.DecodeMin, m.DecodeQuadratic*u*u+m.DecodeLinear*u+m.DecodeBase)
}

// Scaled divides every time by speedup (an engine running speedup times
// faster); a speedup of 0 or less leaves the model as it is.
func (m Model) Scaled(speedup float64) Model {
	if !(speedup > 0) || speedup == 1 {
		return m
	}
	for _, f := range []*float64{&m.PrefillQuadratic, &m.PrefillPerToken, &m.PrefillPerBatch, &m.PrefillPerRequest,
		&m.DecodeQuadratic, &m.DecodeLinear, &m.DecodeBase, &m.DecodeMin, &m.CPULoadPerToken, &m.DiskLoadPerToken, &m.LoraLoadMs} {
		*f /= speedup
	}
	return m
}

// Duration converts milliseconds to a duration, rounding to the nanosecond.
func Duration(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

// Valid says whether the model can predict: finite coefficients, a
// positive step budget, and times that are positive for work.
func (m Model) Valid() bool {
	// Unrolled, without a slice: the router asks this per worker and
	// decision.
	if !finite(m.PrefillQuadratic) || !finite(m.PrefillPerToken) || !finite(m.PrefillPerBatch) || !finite(m.PrefillPerRequest) ||
		!finite(m.DecodeQuadratic) || !finite(m.DecodeLinear) || !finite(m.DecodeBase) || !finite(m.DecodeMin) ||
		!finite(m.LoraLoadMs) {
		return false
	}
	if !finite(m.CPULoadPerToken) || !finite(m.DiskLoadPerToken) || m.CPULoadPerToken < 0 || m.DiskLoadPerToken < 0 {
		return false
	}
	return m.MaxBatchedTokens > 0 && m.LoraLoadMs >= 0 && m.PrefillQuadratic >= 0 && m.PrefillPerToken >= 0 && m.PrefillPerBatch >= 0 &&
		m.PrefillPerRequest >= 0 && m.PrefillPerRequest <= m.PrefillPerBatch && m.PiggybackMs(1)+m.StepConstant() > 0 && m.DecodeMin >= 0
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Same says whether m and o are the same model to the bit (== takes -0
// for 0, and NaN for unequal to itself).
func (m *Model) Same(o *Model) bool {
	// One branch: callers compare models that are nearly always the same.
	return math.Float64bits(m.PrefillQuadratic)^math.Float64bits(o.PrefillQuadratic)|
		math.Float64bits(m.PrefillPerToken)^math.Float64bits(o.PrefillPerToken)|
		math.Float64bits(m.PrefillPerBatch)^math.Float64bits(o.PrefillPerBatch)|
		math.Float64bits(m.PrefillPerRequest)^math.Float64bits(o.PrefillPerRequest)|
		math.Float64bits(m.DecodeQuadratic)^math.Float64bits(o.DecodeQuadratic)|
		math.Float64bits(m.DecodeLinear)^math.Float64bits(o.DecodeLinear)|
		math.Float64bits(m.DecodeBase)^math.Float64bits(o.DecodeBase)|
		math.Float64bits(m.DecodeMin)^math.Float64bits(o.DecodeMin)|
		math.Float64bits(m.CPULoadPerToken)^math.Float64bits(o.CPULoadPerToken)|
		math.Float64bits(m.DiskLoadPerToken)^math.Float64bits(o.DiskLoadPerToken)|
		math.Float64bits(m.LoraLoadMs)^math.Float64bits(o.LoraLoadMs)|
		uint64(m.MaxBatchedTokens^o.MaxBatchedTokens)|uint64(m.MaxRunning^o.MaxRunning) == 0
}

// Proto returns the model as published.
func (m Model) Proto() *workerv1.TimingModel {
	return &workerv1.TimingModel{
		PrefillMsQuadratic: m.PrefillQuadratic, PrefillMsPerToken: m.PrefillPerToken, PrefillMsPerBatch: m.PrefillPerBatch,
		PrefillMsPerRequest: m.PrefillPerRequest,
		DecodeMsQuadratic:   m.DecodeQuadratic, DecodeMsLinear: m.DecodeLinear, DecodeMsBase: m.DecodeBase, DecodeMsMin: m.DecodeMin,
		MaxBatchedTokens:   uint32(min(m.MaxBatchedTokens, math.MaxUint32)),
		MaxNumSeqs:         uint32(min(max(m.MaxRunning, 0), math.MaxUint32)),
		CpuLoadMsPerToken:  m.CPULoadPerToken,
		DiskLoadMsPerToken: m.DiskLoadPerToken,
		LoraLoadMs:         m.LoraLoadMs,
	}
}

// FromProto reads a published model; an unset or invalid one (say, all
// zeros, from an engine simulated without delays) is Default, so that a
// router always has something to predict with.
func FromProto(p *workerv1.TimingModel) Model {
	if p == nil {
		return Default()
	}
	m := Model{
		PrefillQuadratic: p.GetPrefillMsQuadratic(), PrefillPerToken: p.GetPrefillMsPerToken(), PrefillPerBatch: p.GetPrefillMsPerBatch(),
		PrefillPerRequest: p.GetPrefillMsPerRequest(),
		DecodeQuadratic:   p.GetDecodeMsQuadratic(), DecodeLinear: p.GetDecodeMsLinear(), DecodeBase: p.GetDecodeMsBase(), DecodeMin: p.GetDecodeMsMin(),
		MaxBatchedTokens: int(p.GetMaxBatchedTokens()), MaxRunning: int(p.GetMaxNumSeqs()),
		CPULoadPerToken: p.GetCpuLoadMsPerToken(), DiskLoadPerToken: p.GetDiskLoadMsPerToken(),
		LoraLoadMs: p.GetLoraLoadMs(),
	}
	if m.LoraLoadMs == 0 {
		// Unset: a worker that says nothing of adapters.
		m.LoraLoadMs = DefaultLoraLoadMs
	}
	if !m.Valid() {
		return Default()
	}
	return m
}

// TTFTMs predicts, in ms, the time to first token of a request whose
// uncached prompt is newTokens, on an engine that has queuedTokens prompt
// tokens to prefill before it and decoding requests decoding at KV usage
// usage. The engine computes queued and new tokens in steps of its budget
// less one token per decoding request; every step costs its per-step
// constant and its tokens' linear time, and, while requests decode, a
// decode step, the prefill then without its per-step constant (StepMs).
// The attention is that of two uncached prompts, the queued tokens and
// the request's (see SpanPair); a caller that knows the queue's prompts
// and the request's cached prefix sets a Span's Attn itself. weight
// multiplies the prefill part (1: the model as published). It is the
// engine's time, what the request's prefill and the queue ahead of it
// occupy the engine for: the request's own PrefillPerRequest, the same on
// every engine and occupying none, is not in it. FirstTokenMs is the time
// to first token its client sees.
func (m Model) TTFTMs(queuedTokens, newTokens, decoding int, usage, weight float64) float64 {
	s := m.Steps(decoding, usage)
	return s.TTFTMs(queuedTokens, newTokens, weight)
}

// FirstTokenMs predicts, in ms, the time to first token its client sees
// of a request of newTokens uncached prompt tokens (at least one) on an
// engine as TTFTMs describes it: the engine's time, TTFTMs at weight 1,
// then the request's own overhead, PrefillPerRequest. Latency objectives
// are stated and measured that way (a fit of Prefill(t) is one, and
// FirstTokenMs(0, t, 0, 0) is PrefillMs(t) for a prompt within a step),
// so a prediction compared with one is this, not TTFTMs.
func (m Model) FirstTokenMs(queuedTokens, newTokens, decoding int, usage float64) float64 {
	s := m.Steps(decoding, usage)
	return s.TTFTMs(queuedTokens, max(newTokens, 1), 1) + s.RequestMs()
}

// EngineOnly is m as an engine publishes it whose requests pay nothing
// outside its steps: the per-step constant stays StepConstant, and
// PrefillPerRequest is 0 (PrefillPerBatch the step constant alone). An
// engine simulated behind a real frontend, request plane and tokenizer
// publishes it: those are its requests' overhead, measured where they
// run, and a model that also charged the fit's would count them twice.
func (m Model) EngineOnly() Model {
	m.PrefillPerBatch = m.StepConstant()
	m.PrefillPerRequest = 0
	return m
}

// TTFTPairMs is TTFTMs of newTokens and TTFTMs of none (the time of what
// is queued ahead), computed together: they share the steps' costs, and
// the router predicts both for every worker at every decision.
func (m *Model) TTFTPairMs(queuedTokens, newTokens, decoding int, usage, weight float64) (ttft, ahead float64) {
	s := m.Steps(decoding, usage)
	return s.TTFTPairMs(queuedTokens, newTokens, weight)
}

// Steps are an engine's step costs at a load: what every prediction at
// that load computes first. A router predicts for each worker at every
// decision, and a worker's load (its decoding requests, its KV usage) and
// model change far less often than that, so it keeps them: a prediction
// from Steps is TTFTMs's, to the bit. The zero value predicts nothing;
// make one with Model.Steps.
type Steps struct {
	// The model's prefill coefficients, so that Steps predicts alone;
	// perBatch is the per-step constant (StepConstant), 0 while requests
	// decode (their decode steps pay it); perRequest is what a request
	// pays once outside the steps (PrefillPerRequest).
	quadratic, perToken, perBatch, perRequest float64
	// chunk is the prompt tokens a step computes beside its decoding
	// requests; decodeMs the decode step each step adds while requests
	// decode.
	chunk    int
	decodeMs float64
	decoding bool
}

// Steps returns m's step costs with decoding requests decoding at KV
// usage usage.
func (m *Model) Steps(decoding int, usage float64) Steps {
	s := Steps{quadratic: m.PrefillQuadratic, perToken: m.PrefillPerToken, perBatch: m.StepConstant(),
		perRequest: m.PrefillPerRequest, chunk: max(m.MaxBatchedTokens-decoding, 1), decoding: decoding > 0}
	if s.decoding {
		// Every step decodes too: its decode step pays the constant.
		s.perBatch = 0
		s.decodeMs = m.DecodeMs(usage)
	}
	return s
}

// RequestMs is what a request pays once outside the engine's steps, in
// ms (the model's PrefillPerRequest): a prediction of the first token its
// client sees is the engine's time to it plus this (Model.FirstTokenMs).
func (s *Steps) RequestMs() float64 { return s.perRequest }

// TTFTMs is Model.TTFTMs at these steps' load.
func (s *Steps) TTFTMs(queuedTokens, newTokens int, weight float64) float64 {
	all, _ := s.SpanPair(queuedTokens, newTokens)
	return s.cost(all, weight)
}

// TTFTPairMs is Model.TTFTPairMs at these steps' load.
func (s *Steps) TTFTPairMs(queuedTokens, newTokens int, weight float64) (ttft, ahead float64) {
	all, queued := s.SpanPair(queuedTokens, newTokens)
	return s.cost(all, weight), s.cost(queued, weight)
}

// Span is a prefill of Tokens prompt tokens as an engine computes it: Full
// whole chunks (steps) before the last, which is whole or smaller, and the
// attention its prompts put in the quadratic term, Attn: the sum over its
// prompts of Attention(a, n), n being a prompt's tokens in the span and a
// those of its sequence before them (its cached prefix, its chunks
// computed already). A span of no tokens (Tokens <= 0) takes no time.
// PrefillMs and DecodeMs are the two parts of its time, which TTFTMs adds.
type Span struct {
	Tokens, Full int
	Attn         float64
}

// Span is the prefill of x prompt tokens of one uncached prompt (Attn
// x^2); a caller that knows the span's prompts sets Attn.
func (s *Steps) Span(x int) Span {
	if x <= 0 {
		return Span{Tokens: x}
	}
	xf := float64(x)
	var full int // steps of a whole chunk before the last
	if n, c := uint64(x-1), uint64(s.chunk); n <= math.MaxUint32 && c <= math.MaxUint32 {
		// The same quotient (x > 0, chunk > 0) in 32 bits, in a
		// fraction of the time: a 64-bit division takes up to 100
		// cycles, and a router predicts twice per worker and decision.
		full = int(uint32(n) / uint32(c))
	} else {
		full = (x - 1) / s.chunk
	}
	return Span{Tokens: x, Full: full, Attn: xf * xf}
}

// SpanPair is the prefill up to a request's first token and that of what
// is queued ahead of it, computed together: the steps of Span(queuedTokens
// +newTokens) and Span(queuedTokens), with the attention of two uncached
// prompts, the queued tokens (queuedTokens^2) and the request's
// (newTokens^2 more). A caller that knows better sets the spans' Attn.
func (s *Steps) SpanPair(queuedTokens, newTokens int) (all, queued Span) {
	q, x := queuedTokens, queuedTokens+newTokens
	if q <= 0 || newTokens < 0 || s.chunk <= 0 || uint64(x-1) > math.MaxUint32 || uint64(s.chunk) > math.MaxUint32 {
		all, queued = s.Span(x), s.Span(q)
		all.Attn = queued.Attn + float64(max(newTokens, 0))*float64(max(newTokens, 0))
		if x <= 0 {
			all.Attn = 0
		}
		return all, queued
	}
	// One division for both, mostly: x-1 is q-1 plus newTokens, so its
	// whole chunks are q-1's and those that q-1's remainder and
	// newTokens fill together (none while they stay under a chunk).
	fullQ := int(uint32(q-1) / uint32(s.chunk))
	fullX := fullQ
	if q-1-fullQ*s.chunk+newTokens >= s.chunk {
		fullX = int(uint32(x-1) / uint32(s.chunk))
	}
	qf, nf := float64(q), float64(newTokens)
	return Span{Tokens: x, Full: fullX, Attn: qf*qf + nf*nf}, Span{Tokens: q, Full: fullQ, Attn: qf * qf}
}

// PrefillMs is the prefill time of sp's steps, times weight; 0 for a span
// of no tokens: its attention (the quadratic coefficient times Attn), its
// tokens' linear time and one per-step constant per step (none while
// requests decode: their decode steps pay it).
func (s *Steps) PrefillMs(sp Span, weight float64) float64 {
	if sp.Tokens <= 0 {
		return 0
	}
	prefill := s.quadratic*sp.Attn + s.perToken*float64(sp.Tokens) + s.perBatch*float64(sp.Full+1)
	return weight * prefill
}

// DecodeMs is the time the decode steps of the decoding requests add to
// sp's steps, one per step, and whether there is any: none when nothing
// decodes or sp has no tokens (a caller adds nothing then, not a zero).
func (s *Steps) DecodeMs(sp Span) (float64, bool) {
	if !s.decoding || sp.Tokens <= 0 {
		return 0, false
	}
	return float64(sp.Full+1) * s.decodeMs, true
}

// cost is the time to first token at the end of sp: its weighted prefill,
// then its decode steps.
func (s *Steps) cost(sp Span, weight float64) float64 {
	cost := s.PrefillMs(sp, weight)
	if d, ok := s.DecodeMs(sp); ok {
		cost += d
	}
	return cost
}
