package core

import (
	"math"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// Role is the part of a request a pool serves.
type Role string

// The roles of pools: agg serves whole requests, prefill their prompts
// only, decode their outputs only (its KV comes from a prefill worker).
const (
	Agg     Role = "agg"
	Prefill Role = "prefill"
	Decode  Role = "decode"
)

// Engine is what the planner knows of one worker's engine: its published
// timing model and, when known, its KV cache (KVBlocks blocks of
// BlockSize tokens; 0 when unknown, and then the decode step is taken at
// an empty cache's cost).
type Engine struct {
	Model     timingmodel.Model
	KVBlocks  int
	BlockSize int
}

// Load is an engine's steady state at a request rate: every step
// computes Prefill new prompt tokens and one token for each of Decoding
// requests, and takes StepMs; a new request's first token comes TTFTMs
// after it arrives.
type Load struct {
	StepMs, TTFTMs      float64
	Prefill, Decoding   float64
	Usage               float64 // KV blocks in use, 0..1
	PrefillUtilization  float64 // Prefill over the step's room for prompt tokens
	Feasible            bool    // the engine keeps up at all
	promptTok, outputTk float64
}

// steadyState is the engine's load at rate requests per second of
// prompt prompt tokens and output output tokens each, in a role.
//
// At rate r, a step of T ms computes r*prompt*T/1000 prompt tokens (the
// prompts arriving meanwhile) and one token of each of the r*output*T/1000
// requests decoding (Little's law: each decodes for output steps). T is
// then the model's cost of such a step, a fixed point found by iterating
// from an empty step: the cost grows with T, so the iteration rises to the
// least fixed point, or past any bound when the engine cannot keep up.
// The first token comes after the request's own prompt is computed at
// that load, inflated by 1/(1-rho) for the wait behind other prompts,
// rho being the share of the step's room for prompt tokens in use (the
// M/M/1 wait, a queue of prompts served in chunks).
func (e Engine) steadyState(role Role, rate, prompt, output float64) Load {
	switch role {
	case Prefill:
		output = 0
	case Decode:
		prompt = 0
	}
	l := Load{promptTok: prompt, outputTk: output}
	budget := float64(e.Model.MaxBatchedTokens)
	blocksPerRequest := 0.0
	if e.KVBlocks > 0 && e.BlockSize > 0 {
		// A decoding request holds its prompt and on average half its
		// output.
		blocksPerRequest = math.Ceil((prompt+output/2)/float64(e.BlockSize)) / float64(e.KVBlocks)
	}
	cost := func(t float64) (step, p, n, u float64) {
		p = rate * prompt * t / 1000
		n = rate * output * t / 1000
		u = min(n*blocksPerRequest, 1)
		// Every step carries prompt tokens and decoding requests while
		// they arrive, however few: the step's fixed costs count from
		// the first (and the iteration starts from them, not from 0).
		m := e.Model
		if rate*prompt > 0 {
			step += m.PrefillQuadratic*p*p + m.PrefillPerToken*p + m.PrefillPerBatch
		}
		if rate*output > 0 {
			step += m.DecodeMs(u)
		}
		return step, p, n, u
	}
	t, converged := 0.0, rate <= 0
	for i := 0; i < 500 && !converged; i++ {
		next, p, n, u := cost(t)
		if p+n > budget || n*blocksPerRequest > 1 || next > 1e7 {
			return l
		}
		l.StepMs, l.Prefill, l.Decoding, l.Usage = next, p, n, u
		converged = math.Abs(next-t) <= 1e-9*next
		t = next
	}
	if !converged {
		return l // still rising: at the edge of what the engine keeps up with
	}
	l.Feasible = true
	if prompt > 0 {
		room := budget - l.Decoding
		l.PrefillUtilization = l.Prefill / room
		if l.PrefillUtilization >= 1 {
			l.Feasible = false
			return l
		}
		own := e.Model.TTFTMs(0, int(math.Ceil(prompt)), int(math.Ceil(l.Decoding)), l.Usage, 1)
		l.TTFTMs = own / (1 - l.PrefillUtilization)
	}
	return l
}

// meets says whether l holds the objectives that apply to the role:
// TTFT for pools that prefill, the step time (the inter-token latency)
// for pools that decode.
func (l Load) meets(role Role, o Objectives) bool {
	if !l.Feasible {
		return false
	}
	if role != Decode && l.promptTok > 0 && l.TTFTMs > o.TTFTMs {
		return false
	}
	if role != Prefill && l.outputTk > 0 && l.StepMs > o.ITLMs {
		return false
	}
	return true
}

// Capacity is the most requests per second one engine sustains in role,
// for requests of prompt and output tokens, while holding the objectives.
// It is 0 when not even one request alone holds them (a prompt whose own
// prefill takes longer than the TTFT objective); then bound is the most
// the engine sustains at all, which a planner falls back to, else bound
// equals the capacity. Bisection over the rate: the load's latencies rise
// with it.
func (e Engine) Capacity(role Role, prompt, output float64, o Objectives) (capacity, bound float64) {
	if !e.Model.Valid() || (prompt <= 0 && output <= 0) {
		return 0, 0
	}
	search := func(ok func(float64) bool) float64 {
		lo, hi := 0.0, 1e-3
		for range 80 {
			if !ok(hi) {
				break
			}
			lo, hi = hi, hi*2
		}
		if ok(hi) {
			return hi
		}
		for range 60 {
			mid := (lo + hi) / 2
			if ok(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		return lo
	}
	bound = search(func(r float64) bool { return e.steadyState(role, r, prompt, output).Feasible })
	capacity = search(func(r float64) bool { return e.steadyState(role, r, prompt, output).meets(role, o) })
	if capacity == 0 {
		return 0, bound
	}
	return capacity, capacity
}

// Now is what an engine predicts for a new request of prompt tokens in
// its present state: queued prompt tokens still to prefill and running
// requests decoding at KV usage usage. TTFT is the timing model's, as the
// router predicts it; ITL is the step time it runs at, a prompt chunk and
// a decode step.
func (e Engine) Now(role Role, queued, running int, usage, prompt float64) (ttftMs, itlMs float64) {
	m := e.Model
	if role == Decode {
		prompt = 0
	}
	ttftMs = m.TTFTMs(queued, int(math.Ceil(prompt)), running, usage, 1)
	if running > 0 && role != Prefill {
		itlMs = m.DecodeMs(usage)
		if queued > 0 {
			itlMs += m.PrefillMs(float64(min(queued, max(m.MaxBatchedTokens-running, 1))))
		}
	}
	return ttftMs, itlMs
}
