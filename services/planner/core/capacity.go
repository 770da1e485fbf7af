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
	// Footprint is the KV blocks a running request holds on average, a
	// block that several running requests share (a common prefix: a
	// system prompt, the earlier turns of a conversation) counted once:
	// what the workers' load reports show, their blocks in use over their
	// running requests. 0 when unknown: a request then holds its whole
	// prompt and, on average, half its output, nothing shared.
	Footprint float64
}

// Load is an engine's steady state at a request rate: every step
// computes Prefill new prompt tokens and one token for each of Decoding
// requests, and takes StepMs on average (the mean inter-token latency);
// nine in ten new requests have their first token within TTFTMs, as their
// clients see it (the engine's time and each request's own overhead
// outside the steps, timingmodel.Model.FirstTokenMs), and a mean
// inter-token latency within ITLMs.
type Load struct {
	StepMs, TTFTMs, ITLMs float64
	Prefill, Decoding     float64
	Usage                 float64 // KV blocks in use, 0..1
	PrefillUtilization    float64 // Prefill over the step's room for prompt tokens
	Feasible              bool    // the engine keeps up at all
	// Full is the share of arrivals that find the engine holding as many
	// requests as its KV cache or its model's MaxRunning allows (they
	// wait for one to end, or push one out).
	Full                          float64
	promptTok, cachedTk, outputTk float64
	// blocksPerRequest is the share of the KV cache a decoding request
	// holds (0 when the cache is unknown).
	blocksPerRequest float64
}

// SteadyState is the engine's load at rate requests per second of
// prompt prompt tokens and output output tokens each, cached of the
// prompt tokens served from the prefix cache, in a role, with the step
// costs of the timing model (timingmodel.Model.StepMs) that the router
// predicts with and the simulated engine runs by.
//
// An engine computes a prompt's uncached part only, n = prompt - cached
// tokens, each attending over the cached prefix too: its attention is
// timingmodel.Attention(cached, n) = n*(2*cached + n), prompt^2 when
// nothing is cached (see computed). "A prompt" below is that part; the
// KV cache holds the whole prompt, less what it shares with the other
// running requests when the engine's Footprint says.
//
// An engine that decodes (agg and decode pools) runs steps back to back:
// at rate r, a step of T ms decodes one token of each of the n =
// r*output*T/1000 requests decoding (Little's law: each decodes for output
// steps) and computes the r*prompt*T/1000 prompt tokens arriving
// meanwhile. Those come in whole prompts, x = r*T/1000 of them a step on
// average, so only a share f = min(1, x) of the steps carries any; such a
// step costs StepAttentionMs(p/f) beside the decoding requests (one
// forward pass: the decode step's fixed cost and the prompt tokens'
// compute), the others StepMs(0). Attention is per sequence: a prompt
// attends over its own tokens only, and its chunks' attention adds up to
// prompt^2 however the steps split it (timingmodel.Attention), so the
// steps carry x*prompt^2 of attention on average, not the square of their
// summed prompt tokens. A decoding
// request sees itself and n others on average (arrivals are Poisson), so
// the KV usage of its steps is that of n+1 requests. T, the inter-token
// latency, is a fixed point of the mean step; the cost grows with T, so
// iterating from a bare decode step rises to the least fixed point, or
// past every bound when the engine cannot keep up. TTFTMs is the 90th
// percentile of the time to first token (ttftQuantile), and Full the share
// of arrivals that find the engine holding all the requests it can.
//
// An engine that only prefills runs a step when a prompt is there: it is
// then a single server busy r times the prefill time of one prompt
// (ttft90).
func (e Engine) SteadyState(role Role, rate, prompt, cached, output float64) Load {
	return e.steady(role, rate, prompt, cached, output, true)
}

// steady is SteadyState, its TTFT of agg engines left out unless ttft
// is set: the capacity's search computes it only for loads that hold the
// other objectives, since it costs more than the rest.
func (e Engine) steady(role Role, rate, prompt, cached, output float64, ttft bool) Load {
	switch role {
	case Prefill:
		output = 0
	case Decode:
		prompt, cached = 0, 0
	}
	m := e.Model
	np, c, k := computed(prompt, cached)
	l := Load{promptTok: prompt, cachedTk: c, outputTk: output}
	own := func(decoding, usage float64) float64 {
		return e.ownMs(prompt, c, int(math.Ceil(decoding)), usage)
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
		l.Prefill = rate * np * service / 1000
		// The queue is of the engine's time; the request's own overhead
		// occupies no step and comes after it.
		l.TTFTMs = ttft90(service, l.PrefillUtilization) + m.PrefillPerRequest
		return l
	}
	budget := float64(m.MaxBatchedTokens)
	blocksPerRequest := 0.0
	if e.KVBlocks > 0 && e.BlockSize > 0 {
		// A decoding request holds its prompt, cached part too, and on
		// average half its output; the blocks it shares with other
		// running requests count once, as the fleet's Footprint shows.
		blocksPerRequest = e.blocksHeld(prompt, output) / float64(e.KVBlocks)
	}
	l.blocksPerRequest = blocksPerRequest
	cost := func(t float64) (step, p, n, u float64) {
		p = rate * np * t / 1000
		n = rate * output * t / 1000
		u = min(n*blocksPerRequest, 1)
		// The steps a decoding request sees: it and the others, which
		// number n on average whatever it is doing (Poisson arrivals).
		seen := min((n+1)*blocksPerRequest, 1)
		step = m.StepMs(0, true, seen)
		if x := rate * t / 1000; p > 0 && x > 0 {
			f := min(x, 1)
			step = f*m.StepAttentionMs(p/f, x*np*k/f, true, seen) + (1-f)*step
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
	l.ITLMs = itlQuantile(objectiveQuantile, m, l, rate, output, blocksPerRequest)
	// The engine is a queue with as many servers as requests it holds at
	// once, each request holding one while it decodes: an arrival waits
	// for one with Erlang's C probability, at the offered load of the
	// decoding requests.
	most := math.Inf(1)
	if e.KVBlocks > 0 && e.BlockSize > 0 {
		// A request's blocks at its end: the engine admits requests while
		// their prompts fit and pushes one out when the others' outputs
		// need the room, so the cache holds this many without that.
		most = math.Floor(float64(e.KVBlocks) / e.blocksAtEnd(prompt, output))
	}
	if m.MaxRunning > 0 {
		most = min(most, float64(m.MaxRunning))
	}
	if !math.IsInf(most, 1) {
		l.Full = erlangC(int(most), l.Decoding)
	}
	if prompt > 0 {
		l.PrefillUtilization = l.Prefill / (budget - l.Decoding)
		if l.PrefillUtilization >= 1 {
			l.Feasible = false
			return l
		}
		if ttft {
			l.TTFTMs = e.ttftQuantile(objectiveQuantile, rate, prompt, output, l)
		}
	}
	return l
}

// blocksHeld is the KV blocks a request of prompt and output tokens holds
// on average while it runs: the engine's Footprint when known, else its
// whole prompt and half its output.
func (e Engine) blocksHeld(prompt, output float64) float64 {
	if e.Footprint > 0 {
		return e.Footprint
	}
	return math.Ceil((prompt + output/2) / float64(e.BlockSize))
}

// blocksAtEnd is what it holds at its end: half its output more than on
// average.
func (e Engine) blocksAtEnd(prompt, output float64) float64 {
	if e.Footprint > 0 {
		return e.Footprint + output/2/float64(e.BlockSize)
	}
	return math.Ceil((prompt + output) / float64(e.BlockSize))
}

// ttftQuantile is the q-quantile of the time to first token of requests
// of prompt and output tokens arriving at rate per second (Poisson) on an
// engine that decodes at l (an agg engine's steady state, its step StepMs
// on average).
//
// A request that finds the engine idle (no request in it: probability
// exp(-L), L the requests in the engine by Little's law, each there for
// its first token and output steps) gets its first token after its own
// prefill. Otherwise the engine is in a step, which the request waits out
// (the engine does not add a request to a step it has begun), and its
// prompt goes in the next step, with the prompts of the requests that
// arrived during that wait: a first token at R + own + what those K
// prompts add to the step, own being the timing model's TTFT of the
// prompt at l's decoding requests and KV usage (the router's prediction
// for a worker with nothing queued, its cached prefix not computed). The
// step in progress carries j prompts (Poisson, the f = rate*StepMs
// arrivals of a step) and lasts S_j beside the decoding requests (their
// tokens and each prompt's attention over its own sequence:
// StepAttentionMs of j*n tokens and j*n*(2*cached+n), n a prompt's
// uncached tokens), and each of the K prompts adds its n tokens and
// attention (PiggybackMs of an uncached prompt when nothing is cached) to the
// request's own step, for the same reason; the request finds
// it with probability proportional to P(j)*S_j (a longer step is found
// more often) and R is uniform over it; K is Poisson with mean rate*R.
// The client sees each first token the request's own overhead
// (PrefillPerRequest) after the engine computes it. The quantile is found
// by bisection over the time, the wait R integrated by the midpoint rule.
func (e Engine) ttftQuantile(q, rate, prompt, output float64, l Load) float64 {
	exceeds, lo, hi := e.ttftTail(rate, prompt, output, l)
	if l.Full >= 1-q {
		return math.Inf(1)
	}
	for exceeds(hi) > 1-q {
		hi *= 2
	}
	for range 30 {
		mid := (lo + hi) / 2
		if exceeds(mid) > 1-q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// ttftTail returns P(TTFT > x) as ttftQuantile models it, and the own
// prefill and the idle engine's, the lesser and the greater, each with the
// request's overhead: the quantile is past the first.
func (e Engine) ttftTail(rate, prompt, output float64, l Load) (exceeds func(x float64) float64, lo, hi float64) {
	return e.ttftTailOf(rate, prompt, prompt, output, l)
}

// ttftTailOf is ttftTail for a request whose own prompt is of ownPrompt
// tokens, the same cached prefix as the mean's, among requests of the
// mean prompt (those of the steady state l and of the steps it waits for
// and shares).
func (e Engine) ttftTailOf(rate, prompt, ownPrompt, output float64, l Load) (exceeds func(x float64) float64, lo, hi float64) {
	m := e.Model
	overhead := m.PrefillPerRequest
	decoding, usage := int(math.Ceil(l.Decoding)), l.Usage
	own := e.ownMs(ownPrompt, l.cachedTk, decoding, usage)
	idle := e.ownMs(ownPrompt, l.cachedTk, 0, 0)
	np, _, k := computed(prompt, l.cachedTk)
	lambda := rate / 1000 // per ms
	// The engine is idle when none of the requests it holds (each for
	// the mean prompt's prefill and its output's steps) is there.
	held := own
	if ownPrompt != prompt {
		held = e.ownMs(prompt, l.cachedTk, decoding, usage)
	}
	pIdle := math.Exp(-lambda * (held + output*l.StepMs))
	// The step in progress: its prompt count j's probability, its length.
	f := lambda * l.StepMs
	var types []struct{ w, s float64 }
	total, pj := 0.0, math.Exp(-f)
	for j, cum := 0, 0.0; j < maxPrompts && cum < 1-1e-6; j++ {
		if j > 0 {
			pj *= f / float64(j)
		}
		cum += pj
		s := m.StepAttentionMs(float64(j)*np, float64(j)*np*k, true, usage)
		types = append(types, struct{ w, s float64 }{pj * s, s})
		total += pj * s
	}
	// extra[k] is what k more prompts add to the request's own step:
	// their tokens and each one's attention over itself.
	var extra [maxPrompts]float64
	piggyback := 0.0
	if np > 0 {
		piggyback = m.PrefillQuadratic*np*k + m.PrefillPerToken*np
	}
	for i := range extra {
		extra[i] = float64(i) * piggyback
	}
	// The waits R integrated over, each with its weight and the chance
	// of at least k more prompts in it (tail[k]), which do not depend on
	// the time x asked about below.
	type point struct {
		w, r float64
		tail [maxPrompts]float64
	}
	points := make([]point, 0, len(types)*waitPoints)
	for _, st := range types {
		for i := range waitPoints {
			pt := point{w: st.w / total / waitPoints, r: (float64(i) + 0.5) / waitPoints * st.s}
			mu := lambda * pt.r
			term, below := math.Exp(-mu), 0.0
			for k := range pt.tail {
				if k > 0 {
					term *= mu / float64(k)
				}
				pt.tail[k] = max(1-below, 0)
				below += term
			}
			points = append(points, pt)
		}
	}
	// exceeds is P(TTFT > x): of the engine's time past x less the
	// overhead.
	exceeds = func(x float64) float64 {
		x -= overhead
		p := 0.0
		if idle > x {
			p = pIdle
		}
		busy := 0.0
		for i := range points {
			pt := &points[i]
			left := x - pt.r - own
			// The fewest more prompts that take the first token past x,
			// and the chance of at least that many.
			k := 0
			for k < len(extra) && extra[k] <= left {
				k++
			}
			if k < len(extra) {
				busy += pt.w * pt.tail[k]
			}
		}
		return l.Full + (1-l.Full)*(p+(1-pIdle)*busy)
	}
	return exceeds, min(own, idle) + overhead, max(own, idle) + overhead
}

// maxPrompts bounds the prompts counted in one step, and waitPoints are
// the points at which ttftQuantile integrates over the wait for the step
// in progress.
const (
	maxPrompts = 16
	waitPoints = 16
)

// itlQuantile is the q-quantile of the requests' mean inter-token
// latency on an engine at l, for requests of output tokens arriving at
// rate per second (Poisson), blocksPerRequest being the KV share one
// holds. A request's intervals are its life's steps, L = (output-1)*T ms:
// a decode step at the KV usage of the requests decoding beside it,
// plus, in the steps that carry a prompt, that prompt's compute. Both
// follow the arrivals: the K prompts computed in its life are those that
// arrived during it (Poisson, mean mu = rate*L), and the requests decoding
// beside it at a moment are those that arrived in the L before, so their
// mean over its life counts the arrivals of the 2L around it with
// triangular weights (variance 2mu/3, covariance with K mu/2). Each prompt
// adds b = (T-D)/mu to its mean interval (D the decode step alone), each
// request beside it a = D'(u)*blocksPerRequest. A prompt's step lengthens
// the life and so lets more prompts in (a busy period of work rho =
// rate*b*(output-1)/1000 per prompt), which scales the variance by
// 1/(1-rho)^2. The quantile is the normal one, about the mean T.
func itlQuantile(q float64, m timingmodel.Model, l Load, rate, output, blocksPerRequest float64) float64 {
	t, sd := itlMoments(m, l, rate, output, blocksPerRequest)
	if sd == 0 || math.IsInf(sd, 1) {
		return t + sd
	}
	return t + normalQuantile(q)*sd
}

// itlMoments is the mean and the standard deviation of a request's mean
// inter-token latency as itlQuantile models it: sd 0 when no prompt comes
// in a request's life, +Inf when the prompts' work outgrows it.
func itlMoments(m timingmodel.Model, l Load, rate, output, blocksPerRequest float64) (mean, sd float64) {
	t := l.StepMs
	mu := rate * (output - 1) * t / 1000
	if !(mu > 0) {
		return t, 0
	}
	u := min((l.Decoding+1)*blocksPerRequest, 1)
	d := m.StepMs(0, true, u)
	b := max(t-d, 0) / mu
	slope := 0.0
	if u < 1 && d > m.DecodeMin {
		slope = m.DecodeLinear + 2*m.DecodeQuadratic*u
	}
	a := slope * blocksPerRequest
	rho := rate * b * (output - 1) / 1000
	if rho >= 1 {
		return t, math.Inf(1)
	}
	variance := mu * (2*a*a/3 + b*b + a*b) / ((1 - rho) * (1 - rho))
	return t, math.Sqrt(variance)
}

// erlangC is the probability that an arrival waits in a queue of c
// servers at offered load a (Erlang's C formula; 1 when a >= c), by the
// recurrence of Erlang's B.
func erlangC(c int, a float64) float64 {
	if float64(c) <= a {
		return 1
	}
	if !(a > 0) {
		return 0
	}
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return float64(c) * b / (float64(c) - a*(1-b))
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
	if role != Prefill && l.outputTk > 0 && l.ITLMs > o.ITLMs {
		return false
	}
	// Past the TTFT, which counts them, arrivals that find the engine
	// full slow the others' steps too (a request pushed out of a full KV
	// cache computes its prompt again): the ITL objective holds for nine
	// in ten requests only while fewer than one in ten does.
	return l.Full <= 1-objectiveQuantile
}

// objectiveQuantile is the share of requests the objectives bind: their
// 90th percentiles.
const objectiveQuantile = 0.9

// Capacity is the most requests per second one engine sustains in role,
// for requests of prompt and output tokens, cached of the prompt's served
// from the prefix cache (SteadyState), while holding the objectives.
// It is 0 when not even one request alone holds them (a prompt whose own
// prefill takes longer than the TTFT objective); then bound is the most
// the engine sustains at all, which a planner falls back to, else bound
// equals the capacity. Bisection over the rate: the load's latencies rise
// with it.
func (e Engine) Capacity(role Role, prompt, cached, output float64, o Objectives) (capacity, bound float64) {
	if !e.Model.Valid() || (prompt <= 0 && output <= 0) {
		return 0, 0
	}
	// search finds the highest rate that is ok, from hi up (doubling)
	// or down (bisection, to a relative 1e-9).
	search := func(hi float64, ok func(float64) bool) float64 {
		lo := 0.0
		for range 80 {
			if !ok(hi) {
				break
			}
			lo, hi = hi, hi*2
		}
		if ok(hi) {
			return hi
		}
		for i := 0; i < 60 && hi-lo > 1e-9*hi; i++ {
			mid := (lo + hi) / 2
			if ok(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		return lo
	}
	bound = search(1e-3, func(r float64) bool { return e.steady(role, r, prompt, cached, output, false).Feasible })
	if !(bound > 0) {
		return 0, 0
	}
	// The capacity is at most the bound: the search starts there. An agg
	// engine's TTFT tail costs more than the rest, and every objective
	// breaks past some rate: the rate that holds the others first, then,
	// if the TTFT breaks there, the highest below it that holds it too.
	others := func(r float64) bool { return e.steady(role, r, prompt, cached, output, false).meets(role, o) }
	capacity = search(bound, others)
	if role == Agg && prompt > 0 && output > 0 && capacity > 0 {
		ttft := func(r float64) bool {
			l := e.steady(role, r, prompt, cached, output, false)
			if !l.meets(role, o) {
				return false
			}
			// The 90th percentile is within the objective when at most
			// one in ten first tokens comes later: one evaluation of the
			// tail, not the quantile's search.
			exceeds, _, _ := e.ttftTail(r, prompt, output, l)
			return exceeds(o.TTFTMs) <= 1-objectiveQuantile
		}
		if !ttft(capacity) {
			capacity = search(capacity, ttft)
		}
	}
	if capacity == 0 {
		return 0, bound
	}
	return capacity, capacity
}

// Now is what an engine predicts for a new request of prompt and output
// tokens, cached of the prompt's served from the prefix cache, in its
// present state: queued prompt tokens still to prefill and running
// requests decoding at KV usage usage. TTFT is the timing model's, as the
// router predicts it, of the request's uncached tokens after the queue's,
// each attending over the cached prefix too, as the client sees it (the
// request's own overhead after the engine's time: Model.FirstTokenMs). ITL is the mean inter-token
// latency of a request decoding over its next output tokens: a decode step
// each, and the queued prompts' compute (their tokens and each one's
// attention over its own sequence, prompts of the mean size) spread over
// those steps, at most a whole chunk's in one. The objective binds a
// request's mean interval, and a prompt computed beside it lengthens one
// step of its life, not every one: one step's time (a 7,000-token prompt
// beside a decode step takes over 100 ms) says nothing of the objective.
func (e Engine) Now(role Role, queued, running int, usage, prompt, cached, output float64) (ttftMs, itlMs float64) {
	m := e.Model
	if role == Decode {
		prompt, cached = 0, 0
	}
	np, c, k := computed(prompt, cached)
	s := m.Steps(running, usage)
	own := int(math.Ceil(np))
	all, ahead := s.SpanPair(queued, own)
	if all.Tokens > 0 {
		nn := float64(max(own, 0))
		all.Attn = ahead.Attn + nn*(2*c+nn)
	}
	ttftMs = spanMs(&s, all)
	if own > 0 {
		ttftMs += s.RequestMs()
	}
	if running > 0 && role != Prefill {
		// t queued tokens are t/n prompts of n uncached tokens, each
		// attending over its sequence: t*(2*cached+n) of attention.
		compute := func(t float64) float64 { return m.PrefillPerToken*t + m.PrefillQuadratic*t*k }
		chunk := float64(max(m.MaxBatchedTokens-running, 1))
		q := float64(max(queued, 0))
		itlMs = m.DecodeMs(usage) + min(compute(q)/max(output, 1), compute(min(q, chunk)))
	}
	return ttftMs, itlMs
}

// computed is what an engine computes of a prompt of prompt tokens of
// which cached are served from its prefix cache: n new tokens, prompt -
// cached (at least one of a prompt: an engine computes a wholly cached
// prompt's last token to start the output), the cached part c it kept,
// and k, the attention per new token, 2*c + n: the n tokens attend over
// the c cached ones and one another, timingmodel.Attention(c, n) = n*k.
// With nothing cached, n = prompt and k = prompt.
func computed(prompt, cached float64) (n, c, k float64) {
	if !(prompt > 0) {
		return 0, 0, 0
	}
	c = min(max(cached, 0), max(prompt-1, 0))
	n = prompt - c
	return n, c, 2*c + n
}

// ownMs is the time to first token of a prompt of prompt tokens, cached
// of them served from the prefix cache, prefilled alone beside decoding
// requests at KV usage usage: the timing model's TTFT of its uncached
// tokens (rounded up to a whole token) with their attention over the
// cached prefix. With nothing cached it is TTFTMs(0, prompt, ...).
func (e Engine) ownMs(prompt, cached float64, decoding int, usage float64) float64 {
	np, c, _ := computed(prompt, cached)
	s := e.Model.Steps(decoding, usage)
	sp := s.Span(int(math.Ceil(np)))
	nn := float64(sp.Tokens)
	sp.Attn = nn * (2*c + nn)
	return spanMs(&s, sp)
}

// spanMs is the time to the end of sp's steps: its prefill, then its
// decode steps (timingmodel.Model.TTFTMs of a span whose attention the
// caller set).
func spanMs(s *timingmodel.Steps, sp timingmodel.Span) float64 {
	ms := s.PrefillMs(sp, 1)
	if d, ok := s.DecodeMs(sp); ok {
		ms += d
	}
	return ms
}
