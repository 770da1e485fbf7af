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
// requests, and takes StepMs (the inter-token latency); nine in ten new
// requests have their first token within TTFTMs.
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
// An engine that decodes (agg and decode pools) runs steps back to back:
// at rate r, a step of T ms decodes one token of each of the r*output*T/1000
// requests decoding (Little's law: each decodes for output steps) and
// computes the r*prompt*T/1000 prompt tokens arriving meanwhile. Those come
// in whole prompts, so only a share f = min(1, r*T/1000) of the steps
// carries any; such a step costs Prefill(p/f), and the mean step
// f*Prefill(p/f) + Decode(u). T, the inter-token latency, is a fixed point
// of that cost; the cost grows with T, so iterating from a bare decode step
// rises to the least fixed point, or past every bound when the engine
// cannot keep up. A new request's first token comes after its own prompt
// at that load (the timing model's TTFT) and its wait behind other
// prompts; TTFTMs is the 90th percentile (ttft90), rho being the share of
// the steps' room for prompt tokens in use.
//
// An engine that only prefills runs a step when a prompt is there: rho is
// then its busy share, r times the prefill time of one prompt.
func (e Engine) steadyState(role Role, rate, prompt, output float64) Load {
	switch role {
	case Prefill:
		output = 0
	case Decode:
		prompt = 0
	}
	m := e.Model
	l := Load{promptTok: prompt, outputTk: output}
	own := func(decoding, usage float64) float64 {
		return m.TTFTMs(0, int(math.Ceil(prompt)), int(math.Ceil(decoding)), usage, 1)
	}
	if output <= 0 {
		if prompt <= 0 {
			l.Feasible = true
			return l
		}
		service := own(0, 0)
		l.PrefillUtilization = rate * service / 1000
		if l.PrefillUtilization >= 1 {
			return l
		}
		l.Feasible = true
		l.StepMs = service
		l.Prefill = rate * prompt * service / 1000
		l.TTFTMs = ttft90(service, l.PrefillUtilization)
		return l
	}
	budget := float64(m.MaxBatchedTokens)
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
		step = m.DecodeMs(u)
		if f := min(rate*t/1000, 1); p > 0 && f > 0 {
			step += f*m.PrefillPerBatch + m.PrefillPerToken*p + m.PrefillQuadratic*p*p/f
		}
		return step, p, n, u
	}
	t, converged := m.DecodeMs(0), rate <= 0
	if rate <= 0 {
		l.StepMs = t
	}
	for i := 0; i < 1000 && !converged; i++ {
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
		l.PrefillUtilization = l.Prefill / (budget - l.Decoding)
		if l.PrefillUtilization >= 1 {
			l.Feasible = false
			return l
		}
		l.TTFTMs = ttft90(own(l.Decoding, l.Usage), l.PrefillUtilization)
	}
	return l
}

// ttft90 is the 90th percentile of the time to first token of requests
// whose own prefill takes own at utilization rho: own plus the wait's
// 90th percentile. The wait of a single server queue has, to a close
// approximation, P(wait > t) = rho*exp(-t/m) with m = own/(1-rho) (the
// exponential tail of M/G/1), so its 90th percentile is m*ln(10*rho) when
// rho > 0.1 and 0 otherwise.
func ttft90(own, rho float64) float64 {
	if rho <= 0.1 {
		return own
	}
	return own + own/(1-rho)*math.Log(10*rho)
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
