package simengine

import (
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// PrefillTime returns how long prefilling tokens new (uncached) prompt tokens
// takes in one batch on an idle engine, up to the request's first token:
// 4.209989e-7*t^2 + 1.518344e-2*t + 16.50142 ms, divided by the speed-up
// ratio; its request's overhead (RequestOverhead) included. It is zero for no tokens and for a speed-up of 0 (no
// delay). The coefficients are Dynamo's mocker fit of vLLM on an H100
// (timingmodel.Default, which the mocker publishes).
func PrefillTime(tokens int, speedup float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	return scale(timingmodel.Default().PrefillMs(float64(tokens)), speedup)
}

// RequestOverhead returns a request's serving overhead, the part of the
// prefill constant paid once per request outside the engine's steps
// (timingmodel.Model.PrefillPerRequest of the default fit), divided by the
// speed-up ratio: it delays the request's first token, and so every token
// after it, and occupies no step. Zero for a speed-up of 0.
func RequestOverhead(speedup float64) time.Duration {
	return scale(timingmodel.Default().PrefillPerRequest, speedup)
}

// PrefillAfter returns how long a step alone takes that prefills tokens
// new prompt tokens following prefix tokens of their sequence already in
// the KV cache (a cached prefix, or the prompt's earlier chunks): the
// step's time, PrefillTime less RequestOverhead, with the quadratic term
// the tokens' attention over the prefix and one another
// (timingmodel.Attention). PrefillAfter(0, t, s) is StepTime(t, false, 0,
// s).
func PrefillAfter(prefix, tokens int, speedup float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	return stepTime(tokens, timingmodel.Attention(prefix, tokens), false, 0, speedup)
}

// DecodeTime returns how long one decode step takes with a fraction usage
// (0..1) of the KV blocks in use: max(1, -25.74*u^2 + 54.01*u + 5.74) ms,
// divided by the speed-up ratio; zero for a speed-up of 0 (no delay).
func DecodeTime(usage, speedup float64) time.Duration {
	return scale(timingmodel.Default().DecodeMs(usage), speedup)
}

// StepTime returns how long a step takes that computes prefill new prompt
// tokens and, when decoding, one token for each decoding request with a
// fraction usage of the KV blocks in use: the default fit's StepMs (a
// decode step plus the prompt tokens' compute beside it, or a prefill step
// alone), divided by the speed-up ratio; zero for a speed-up of 0.
func StepTime(prefill int, decoding bool, usage, speedup float64) time.Duration {
	if prefill <= 0 && !decoding {
		return 0
	}
	return scale(timingmodel.Default().StepMs(float64(max(prefill, 0)), decoding, usage), speedup)
}

// Timing is the model the engine runs by, as published to routers: the
// default fit, faster by the speed-up ratio, with this engine's step
// budget. A speed-up of 0 (no delay) publishes the unscaled model, since
// relative costs are what a router needs.
func (c Config) Timing() timingmodel.Model {
	m := timingmodel.Default()
	if c.NumHostBlocks > 0 {
		// The host tier's load time, which the engine pays (see hostTier).
		m.CPULoadPerToken = timingmodel.DefaultCPULoadMsPerToken
	}
	m.LoraLoadMs = c.LoraLoadMs
	m = m.Scaled(c.SpeedupRatio)
	m.MaxBatchedTokens = c.MaxNumBatchedTokens
	m.MaxRunning = c.MaxNumSeqs
	return m
}

// scale converts milliseconds of simulated compute to a duration at a
// speed-up ratio, rounding to the nanosecond.
func scale(ms, speedup float64) time.Duration {
	if speedup == 0 {
		return 0
	}
	return timingmodel.Duration(ms / speedup)
}

// stepTime is how long a step takes that computes prefill new prompt
// tokens whose chunks put attn in the quadratic term (the sum of
// timingmodel.Attention over them) and, when decoding, one token for each
// decoding request at KV usage usage: the default fit's StepAttentionMs,
// divided by the speed-up ratio; zero for a speed-up of 0.
func stepTime(prefill int, attn float64, decoding bool, usage, speedup float64) time.Duration {
	if prefill <= 0 && !decoding {
		return 0
	}
	return scale(timingmodel.Default().StepAttentionMs(float64(max(prefill, 0)), attn, decoding, usage), speedup)
}
