// Package timingmodel is how long an inference engine takes to compute a
// step, as workers publish it (worker.v1.TimingModel) and the router uses
// it to predict a request's time to first token on each worker. The mocker
// simulates with the same model it publishes.
//
// An engine step computes up to MaxBatchedTokens tokens: prompt chunks of
// requests in prefill plus one token per decoding request. It costs
// Prefill(t) for its t new prompt tokens, plus Decode(u) when it has
// decoding requests, u being the fraction of KV blocks in use.
package timingmodel

import (
	"math"
	"time"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// Model holds the coefficients, in milliseconds.
type Model struct {
	// Prefill(t) = PrefillQuadratic*t^2 + PrefillPerToken*t + PrefillPerBatch.
	PrefillQuadratic, PrefillPerToken, PrefillPerBatch float64
	// Decode(u) = max(DecodeMin, DecodeQuadratic*u^2 + DecodeLinear*u + DecodeBase).
	DecodeQuadratic, DecodeLinear, DecodeBase, DecodeMin float64
	// MaxBatchedTokens is the most tokens one step computes.
	MaxBatchedTokens int
}

// Default is Dynamo's mocker fit of vLLM on an H100, with vLLM's default
// 8192 tokens per step: what a router assumes of a worker that publishes
// no model, and what the engine adapter publishes unless told otherwise.
func Default() Model {
	return Model{
		PrefillQuadratic: 4.209989e-7, PrefillPerToken: 1.518344e-2, PrefillPerBatch: 16.50142,
		DecodeQuadratic: -25.74, DecodeLinear: 54.01, DecodeBase: 5.74, DecodeMin: 1,
		MaxBatchedTokens: 8192,
	}
}

// PrefillMs is the prefill time of a step with t new prompt tokens, in ms.
func (m Model) PrefillMs(t float64) float64 {
	if t <= 0 {
		return 0
	}
	return m.PrefillQuadratic*t*t + m.PrefillPerToken*t + m.PrefillPerBatch
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
	for _, f := range []*float64{&m.PrefillQuadratic, &m.PrefillPerToken, &m.PrefillPerBatch,
		&m.DecodeQuadratic, &m.DecodeLinear, &m.DecodeBase, &m.DecodeMin} {
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
	if !finite(m.PrefillQuadratic) || !finite(m.PrefillPerToken) || !finite(m.PrefillPerBatch) ||
		!finite(m.DecodeQuadratic) || !finite(m.DecodeLinear) || !finite(m.DecodeBase) || !finite(m.DecodeMin) {
		return false
	}
	return m.MaxBatchedTokens > 0 && m.PrefillQuadratic >= 0 && m.PrefillPerToken >= 0 && m.PrefillPerBatch >= 0 &&
		m.PrefillMs(1) > 0 && m.DecodeMin >= 0
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Proto returns the model as published.
func (m Model) Proto() *workerv1.TimingModel {
	return &workerv1.TimingModel{
		PrefillMsQuadratic: m.PrefillQuadratic, PrefillMsPerToken: m.PrefillPerToken, PrefillMsPerBatch: m.PrefillPerBatch,
		DecodeMsQuadratic: m.DecodeQuadratic, DecodeMsLinear: m.DecodeLinear, DecodeMsBase: m.DecodeBase, DecodeMsMin: m.DecodeMin,
		MaxBatchedTokens: uint32(min(m.MaxBatchedTokens, math.MaxUint32)),
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
		DecodeQuadratic: p.GetDecodeMsQuadratic(), DecodeLinear: p.GetDecodeMsLinear(), DecodeBase: p.GetDecodeMsBase(), DecodeMin: p.GetDecodeMsMin(),
		MaxBatchedTokens: int(p.GetMaxBatchedTokens()),
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
// less one token per decoding request; every step costs its prefill, and,
// while requests decode, a decode step. weight multiplies the prefill part
// (1: the model as published).
func (m Model) TTFTMs(queuedTokens, newTokens, decoding int, usage, weight float64) float64 {
	chunk := max(m.MaxBatchedTokens-decoding, 1)
	decodeMs := 0.0
	if decoding > 0 {
		decodeMs = m.DecodeMs(usage)
	}
	return m.ttft(queuedTokens+newTokens, chunk, m.PrefillMs(float64(chunk)), decodeMs, decoding > 0, weight)
}

// TTFTPairMs is TTFTMs of newTokens and TTFTMs of none (the time of what
// is queued ahead), computed together: they share the steps' costs, and
// the router predicts both for every worker at every decision.
func (m *Model) TTFTPairMs(queuedTokens, newTokens, decoding int, usage, weight float64) (ttft, ahead float64) {
	chunk := max(m.MaxBatchedTokens-decoding, 1)
	fullMs := m.PrefillMs(float64(chunk))
	decodeMs := 0.0
	if decoding > 0 {
		decodeMs = m.DecodeMs(usage)
	}
	return m.ttft(queuedTokens+newTokens, chunk, fullMs, decodeMs, decoding > 0, weight),
		m.ttft(queuedTokens, chunk, fullMs, decodeMs, decoding > 0, weight)
}

// ttft is TTFTMs of x prompt tokens in steps of chunk tokens, a full one's
// prefill taking fullMs, each step adding decodeMs when decoding.
func (m *Model) ttft(x, chunk int, fullMs, decodeMs float64, decoding bool, weight float64) float64 {
	if x <= 0 {
		return 0
	}
	full := (x - 1) / chunk // steps of a whole chunk before the last
	last := x - full*chunk
	prefill := float64(full)*fullMs + m.PrefillMs(float64(last))
	cost := weight * prefill
	if decoding {
		cost += float64(full+1) * decodeMs
	}
	return cost
}
