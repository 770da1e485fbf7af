package core

import (
	"math"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Judged is how the objectives are judged: by windows of requests, each
// holding them when the 90th percentiles of its own requests' latencies
// do, a share Attainment of the windows holding. window.md derives the
// capacity this asks for.
type Judged struct {
	// Requests is the pool's requests in one window; 0 judges the 90th
	// percentiles over all requests (the steady state's) instead.
	Requests float64
	// Dispersion is the index of dispersion of a window's arrivals, their
	// variance over their mean: 1 for a Poisson process, more when
	// requests come in clusters. Below 1 counts as 1.
	Dispersion float64
	// Attainment is the share of windows that must hold, in [0.5, 1).
	Attainment float64
	// LevelError is the standard deviation of the rate's level, relative
	// to it, when the pool is sized for a forecast of it rather than for
	// a bound on it: a window's rate then differs from the one sized for
	// by the forecast's error and by its own arrivals' noise, which are
	// independent and add in quadrature. 0 when the rate is known.
	LevelError float64
	// Computed is the share of requests in each bucket of the prompt
	// tokens they compute (wire.ComputedPromptBucket), when known: a
	// request's own prefill takes its own prompt's time, and one far past
	// the mean prompt is late on its own at any load (window.md). Empty:
	// every request computes the mean prompt.
	Computed []float64
}

// JudgedBy is how a pool sized for rate requests per second is judged
// over windows of window: the pool's requests in one, and the dispersion
// that noise, the standard deviation of the request rate of intervals of
// interval around its level, gives them (an interval's count has the
// variance noise^2*interval^2 and the mean rate*interval). It assumes
// the clusters are shorter than an interval, so that a window of several
// has the same dispersion.
func JudgedBy(rate, noise float64, interval, window time.Duration, attainment float64) Judged {
	j := Judged{Attainment: attainment, Dispersion: 1}
	if !(rate > 0) || window <= 0 {
		return j
	}
	j.Requests = rate * window.Seconds()
	if d := noise * noise * interval.Seconds() / rate; d > 1 {
		j.Dispersion = d
	}
	return j
}

// CapacityJudged is the most requests per second one engine of a pool
// sustains while a share j.Attainment of the windows of j.Requests
// requests hold both objectives that apply to role (window.md): at the
// rate r, with e(r) the steady state's share of requests past an
// objective, e(r) plus the normal quantile of j.Attainment times the
// spread of a window's share, sqrt((e(r*(1+s)) - e(r))^2 + e(1-e)/n)
// with s = sqrt(Dispersion/n + LevelError^2), must be at most a tenth. It is at most
// Capacity's, which it equals when j.Requests is 0; bound is Capacity's.
// With j.Computed, e(r)'s TTFT part is the mean over the buckets of
// their requests' late shares, and the requests that wait behind a long
// prompt add to it and, late together, to the spread (waitBehind); where
// even the lightest load leaves a window too many requests late on their
// own prompts, which no number of engines changes, the capacity is the
// one of requests of the mean prompt instead.
func (e Engine) CapacityJudged(role Role, prompt, cached, output float64, o Objectives, j Judged) (capacity, bound float64) {
	capacity, bound = e.Capacity(role, prompt, cached, output, o)
	if !(j.Requests > 0) || !(capacity > 0) {
		return capacity, bound
	}
	n := j.Requests
	s := math.Sqrt(max(j.Dispersion, 1)/n + j.LevelError*j.LevelError)
	z := normalQuantile(min(max(j.Attainment, 0.5), 1-1e-9))
	sizes := j.Computed
	holds := func(r float64) bool {
		t0, i0, c0 := e.lateParts(role, r, prompt, cached, output, o, sizes)
		t1, i1, _ := e.lateParts(role, r*(1+s), prompt, cached, output, o, sizes)
		for k, p := range [][2]float64{{t0, t1}, {i0, i1}} {
			// The late count's variance: the binomial one, and for the
			// TTFT the excess of the requests late together behind one
			// long prompt.
			v := p[0] * (1 - p[0])
			if k == 0 {
				v += c0
			}
			spread := math.Sqrt((p[1]-p[0])*(p[1]-p[0]) + v/n)
			if p[0]+z*spread > 1-objectiveQuantile {
				return false
			}
		}
		return true
	}
	if len(sizes) > 0 && !holds(capacity*1e-3) {
		sizes = nil
	}
	if holds(capacity) {
		return capacity, bound
	}
	lo, hi := 0.0, capacity
	for i := 0; i < 50 && hi-lo > 1e-6*hi; i++ {
		mid := (lo + hi) / 2
		if holds(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, bound
}

// late is the steady state's share of requests past each objective at
// rate per engine, 0 for one the role does not serve: for the TTFT, the
// tail its 90th percentile is found on (SteadyState); for the ITL, the
// normal tail of a request's mean interval (itlQuantile's), a request
// that finds the engine full counted late too. Both are 1 where the
// engine does not keep up. With sizes (the share of requests in each
// bucket of computed prompt tokens, wire.ComputedPromptBucket), the TTFT's
// share is the mean of each bucket's: a request of the bucket's middle
// size, over the mean's cached prefix, among requests of the mean prompt.
func (e Engine) late(role Role, rate, prompt, cached, output float64, o Objectives, sizes []float64) (ttft, itl float64) {
	ttft, itl, _ = e.lateParts(role, rate, prompt, cached, output, o, sizes)
	return ttft, itl
}

// lateParts is late, and the excess over the binomial of the variance of
// a request's being late on its first token (per request: a window of n
// requests has its late share's variance grow by cluster/n). With sizes,
// on an engine that decodes, the TTFT's share counts the requests that
// wait behind a long prompt's prefill too (waitBehind), and cluster their
// clusters.
func (e Engine) lateParts(role Role, rate, prompt, cached, output float64, o Objectives, sizes []float64) (ttft, itl, cluster float64) {
	l := e.steady(role, rate, prompt, cached, output, false)
	if !l.Feasible {
		return 1, 1, 0
	}
	if role != Decode && l.promptTok > 0 {
		switch {
		case l.outputTk > 0 && len(sizes) > 0:
			total := 0.0
			for i, w := range sizes {
				if !(w > 0) {
					continue
				}
				exceeds, _, _ := e.ttftTailOf(rate, l.promptTok, l.cachedTk+bucketMiddle(i), l.outputTk, l)
				ttft += w * exceeds(o.TTFTMs)
				total += w
			}
			if total > 0 {
				ttft /= total
			}
			wait, c := e.waitBehind(rate, l, o, sizes)
			ttft += (1 - min(ttft, 1)) * wait
			cluster = c
		case l.outputTk > 0:
			exceeds, _, _ := e.ttftTail(rate, l.promptTok, l.outputTk, l)
			ttft = exceeds(o.TTFTMs)
		default:
			// A prefill-only engine is a single server (ttft90's tail):
			// P(wait > t) = rho*exp(-t*(1-rho)/own).
			own, rho := l.StepMs, l.PrefillUtilization
			wait := o.TTFTMs - e.Model.PrefillPerRequest - own
			ttft = 1
			if wait >= 0 {
				ttft = rho * math.Exp(-wait*(1-rho)/own)
			}
		}
	}
	if role != Prefill && l.outputTk > 0 {
		mean, sd := itlMoments(e.Model, l, rate, l.outputTk, l.blocksPerRequest)
		tail := 0.0
		switch {
		case math.IsInf(sd, 1):
			tail = 1
		case sd > 0:
			tail = 0.5 * math.Erfc((o.ITLMs-mean)/(sd*math.Sqrt2))
		case mean > o.ITLMs:
			tail = 1
		}
		itl = l.Full + (1-l.Full)*tail
	}
	return min(ttft, 1), itl, cluster
}

// waitBehind is the share of an engine's requests that are late on their
// first token for waiting behind another request's long prompt, and the
// excess of their count's variance over the binomial one, per request
// (window.md, "Waiting behind a long prompt"). A prompt of bucket i
// (sizes[i] of the requests) holds the engine's steps for its own
// prefill, P_i ms, and the requests that came meanwhile queue behind it;
// the engine clears that backlog in a busy period, P_i/(1 - rho) in all,
// rho being the prefill work of the arrivals it keeps taking. A request
// that arrives in the first P_i/(1 - rho) - slack ms of it, slack being
// the time a request of the mean prompt can wait and still have its first
// token within the objective, is late. The router sends the engine a
// share g of its usual arrivals meanwhile: those bound to it by a cached
// prefix (it sends the rest where no long prompt is), g taken as the mean
// prompt's cached share (a prefix cached on every engine binds a request
// to none, so this errs on the side of more late requests); rho is then
// rate*g times a mean prompt's own prefill. A prompt of bucket i has b_i
// = rate*g*(P_i/(1 - rho) - slack)/1000 late requests behind it
// (Poisson): the share is the sum of sizes[i]*b_i and, the long prompts
// arriving as a Poisson process too, the count's variance is a compound
// Poisson one, sizes[i]*b_i*(1 + b_i) a request, whose excess over the
// binomial is sizes[i]*b_i^2. Where the bound arrivals alone would keep
// the engine prefilling (rho >= 1), every request is late.
func (e Engine) waitBehind(rate float64, l Load, o Objectives, sizes []float64) (share, cluster float64) {
	if !(l.promptTok > 0) || !(rate > 0) {
		return 0, 0
	}
	g := min(max(l.cachedTk/l.promptTok, 0), 1)
	if g == 0 {
		return 0, 0
	}
	decoding, usage := int(math.Ceil(l.Decoding)), l.Usage
	mean := e.ownMs(l.promptTok, l.cachedTk, decoding, usage)
	rho := rate / 1000 * g * mean
	if rho >= 1 {
		return 1, 0
	}
	slack := max(o.TTFTMs-e.Model.PrefillPerRequest-mean, 0)
	total := 0.0
	for i, w := range sizes {
		if !(w > 0) {
			continue
		}
		total += w
		held := e.ownMs(l.cachedTk+bucketMiddle(i), l.cachedTk, decoding, usage) / (1 - rho)
		if held <= slack {
			continue
		}
		b := rate / 1000 * g * (held - slack)
		share += w * b
		cluster += w * b * b
	}
	if !(total > 0) {
		return 0, 0
	}
	return min(share/total, 1), cluster / total
}

// bucketMiddle is a request's computed prompt tokens in bucket i of
// wire.ComputedPromptBucket: the geometric middle of its bounds (half the
// first's bound in the first, a quarter octave past its lower bound in
// the last).
func bucketMiddle(i int) float64 {
	if i <= 0 {
		return wire.ComputedPromptBound(0) / 2
	}
	lo := wire.ComputedPromptBound(i - 1)
	hi := wire.ComputedPromptBound(i)
	if math.IsInf(hi, 1) {
		return lo * math.Pow(2, 0.25)
	}
	return math.Sqrt(lo * hi)
}
