package core

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Demand is a pool's load in rates: requests, prompt tokens and output
// tokens per second, and of the prompt tokens those the engines served
// from their prefix caches (0 when the workers do not count them).
type Demand struct {
	RequestsPerSec           float64 `json:"requests_per_sec"`
	PromptTokensPerSec       float64 `json:"prompt_tokens_per_sec"`
	OutputTokensPerSec       float64 `json:"output_tokens_per_sec"`
	CachedPromptTokensPerSec float64 `json:"cached_prompt_tokens_per_sec,omitempty"`
	// ComputedPromptRequestsPerSec is the requests per second that ended
	// in each bucket of the prompt tokens their engine computed
	// (wire.ComputedPromptBucket); all 0 when the workers do not count
	// them. The decision's inputs record the shares it was sized with
	// (Inputs.ComputedPrompts), not these.
	ComputedPromptRequestsPerSec [wire.ComputedPromptBuckets]float64 `json:"-"`
}

// PromptTokens is the mean prompt of a request, 0 without requests.
func (d Demand) PromptTokens() float64 { return perRequest(d.PromptTokensPerSec, d.RequestsPerSec) }

// CachedPromptTokens is the mean cached part of a request's prompt, at
// most PromptTokens; 0 without requests.
func (d Demand) CachedPromptTokens() float64 {
	return perRequest(min(d.CachedPromptTokensPerSec, d.PromptTokensPerSec), d.RequestsPerSec)
}

// OutputTokens is the mean output of a request, 0 without requests.
func (d Demand) OutputTokens() float64 { return perRequest(d.OutputTokensPerSec, d.RequestsPerSec) }

func perRequest(tokens, requests float64) float64 {
	if !(requests > 0) || !(tokens > 0) {
		return 0
	}
	return tokens / requests
}

// valid says whether every rate is finite and not negative.
func (d Demand) valid() bool {
	for _, v := range []float64{d.RequestsPerSec, d.PromptTokensPerSec, d.OutputTokensPerSec, d.CachedPromptTokensPerSec} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return false
		}
	}
	return true
}

// Sample is the demand observed over one interval, ending at At.
type Sample struct {
	At time.Time
	Demand
}

// Predictor forecasts a pool's demand over the next interval from the
// samples of the past ones. It keeps its own history; Observe and
// Forecast are deterministic functions of the samples observed.
type Predictor interface {
	// Observe adds the demand of the interval ending at s.At; samples come
	// in time order (one not later than the last is ignored).
	Observe(s Sample)
	// Forecast is the demand expected ahead of the last sample's time;
	// the zero Demand before any sample.
	Forecast(ahead time.Duration) Demand
	// Sizes is the mean request of the samples: prompt tokens, the
	// cached part of them, and output tokens (their tokens over their
	// requests), 0 without requests.
	Sizes() (prompt, cached, output float64)
	// Spread is how far from Forecast(ahead) the request rate of the
	// interval then may be; zero before there are samples enough to
	// tell.
	Spread(ahead time.Duration) Spread
}

// Spread is a forecast's uncertainty, in requests per second: Noise is
// the standard deviation of one interval's rate around the level it
// measures, Error that of the forecast's level itself, and Drift the part
// of Error that a fitted slope carries ahead (0 for a flat forecast): the
// next forecasts move by about that much on a steady rate, as the slope
// is fitted anew on the next samples.
type Spread struct {
	Noise, Error, Drift float64
}

// Total is the standard deviation of an interval's rate around the
// forecast: its noise and the forecast's error, independent.
func (s Spread) Total() float64 { return math.Hypot(s.Noise, s.Error) }

// predictors lists the predictors by their --predictor name.
var predictors = map[string]func(window int, quantile float64) Predictor{
	// window is the mean of the last window samples: it follows a level
	// and smooths noise, and lags a ramp by half the window.
	"window": func(w int, _ float64) Predictor { return &windowPredictor{history: history{size: w}} },
	// trend fits a line to the last window samples by least squares and
	// reads it ahead: it follows a ramp without lag, and amplifies noise
	// more than window does. Where the samples' noise cannot explain how
	// far they lie from the line (a step, a burst), it forecasts the
	// level since the rate's last step instead.
	"trend": func(w int, q float64) Predictor { return &trendPredictor{history: history{size: w}, quantile: q} },
}

// PredictorNames lists the valid --predictor values, sorted.
func PredictorNames() []string {
	names := make([]string, 0, len(predictors))
	for n := range predictors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewPredictor returns the predictor named name over the last window
// samples (at least 1); quantile (in [0.5, 1)) is how sure a trend must
// be that its samples do not lie on a line before it stops reading one.
func NewPredictor(name string, window int, quantile float64) (Predictor, error) {
	mk, ok := predictors[name]
	if !ok {
		return nil, fmt.Errorf("unknown predictor %q: valid values are %s", name, strings.Join(PredictorNames(), ", "))
	}
	return mk(max(window, 1), quantile), nil
}

// history is the last size samples, oldest first, and the request rates
// of the last noiseSamples (at least size) for the noise estimate.
type history struct {
	size    int
	samples []Sample
	rates   []float64
}

// noiseSamples is how many intervals' request rates the noise estimate
// looks at: a scale estimated from m differences is within about
// 1.2/sqrt(m) of the truth (the median's efficiency), a quarter at 24.
const noiseSamples = 24

// noise is the standard deviation of one sample's request rate around
// the level it measures, from the successive differences of the recent
// rates: the difference of two independent samples of one level has the
// standard deviation sqrt(2)*s, and a level that moves slowly next to the
// interval adds little to it. The median of their sizes is taken, not
// their mean square: a step of the level is one difference, not noise,
// and must not hold a pool large for the whole memory after it. For
// normal noise the median of |d| is 0.6745*sqrt(2)*s. 0 with fewer than
// 3 rates.
func (h *history) noise() float64 {
	if len(h.rates) < 3 {
		return 0
	}
	d := make([]float64, 0, len(h.rates)-1)
	for i := 1; i < len(h.rates); i++ {
		d = append(d, math.Abs(h.rates[i]-h.rates[i-1]))
	}
	slices.Sort(d)
	m := d[len(d)/2]
	if len(d)%2 == 0 {
		m = (d[len(d)/2-1] + m) / 2
	}
	return m / (0.6744897501960817 * math.Sqrt2)
}

func (h *history) Observe(s Sample) {
	if !s.valid() {
		return
	}
	if n := len(h.samples); n > 0 && !s.At.After(h.samples[n-1].At) {
		return
	}
	h.samples = append(h.samples, s)
	if len(h.samples) > h.size {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-h.size:]...)
	}
	h.rates = append(h.rates, s.RequestsPerSec)
	if keep := max(h.size, noiseSamples); len(h.rates) > keep {
		h.rates = append(h.rates[:0], h.rates[len(h.rates)-keep:]...)
	}
}

func (h *history) Sizes() (prompt, cached, output float64) {
	m := h.mean()
	return m.PromptTokens(), m.CachedPromptTokens(), m.OutputTokens()
}

func (h *history) mean() Demand {
	var d Demand
	if len(h.samples) == 0 {
		return d
	}
	for _, s := range h.samples {
		d.RequestsPerSec += s.RequestsPerSec
		d.PromptTokensPerSec += s.PromptTokensPerSec
		d.OutputTokensPerSec += s.OutputTokensPerSec
		d.CachedPromptTokensPerSec += s.CachedPromptTokensPerSec
	}
	n := float64(len(h.samples))
	return Demand{RequestsPerSec: d.RequestsPerSec / n, PromptTokensPerSec: d.PromptTokensPerSec / n, OutputTokensPerSec: d.OutputTokensPerSec / n,
		CachedPromptTokensPerSec: d.CachedPromptTokensPerSec / n}
}

type windowPredictor struct{ history }

func (p *windowPredictor) Forecast(time.Duration) Demand { return p.mean() }

// Spread of a mean of n samples: a sample's noise s around the level,
// and the mean's own error s/sqrt(n).
func (p *windowPredictor) Spread(time.Duration) Spread {
	s := p.noise()
	return Spread{Noise: s, Error: s / math.Sqrt(float64(max(len(p.samples), 1)))}
}

type trendPredictor struct {
	history
	// quantile is the line test's: a line is given up for a step when
	// its residuals are past their quantile-quantile under noise alone.
	quantile float64
}

// Forecast reads the least-squares line of the request rate through the
// samples ahead of the last one, never below zero; its token rates are
// that many requests of the samples' mean sizes (their tokens over their
// requests). A ratio of two lines read ahead would be noise over noise:
// near a rate of zero it gives requests of any size. With fewer than two
// samples it is the mean.
// It reads no further ahead than the samples span: a slope fitted over a
// span s carries an error that, read a distance d past its end, grows as
// d/s; past d = s the extrapolated change is more error than signal (two
// samples an interval apart read six intervals ahead multiply their noise
// sixfold), so a short history forecasts at most its own span ahead.
// Where the samples do not lie on a line (step), it is the flat level
// since the rate's last step.
func (p *trendPredictor) Forecast(ahead time.Duration) Demand {
	if len(p.samples) < 2 {
		return p.mean()
	}
	prompt, cached, output := p.Sizes()
	rps, _, _ := p.fit(ahead)
	return Demand{RequestsPerSec: rps, PromptTokensPerSec: rps * prompt, OutputTokensPerSec: rps * output, CachedPromptTokensPerSec: rps * cached}
}

// Spread of the line read at x0: a sample's noise s around the level,
// and the line's own error there, s*sqrt(1/n + (x0-mean x)^2/Sxx) (the
// least-squares prediction interval). Read far past a short history the
// error outgrows the noise: the line's slope is mostly noise.
func (p *trendPredictor) Spread(ahead time.Duration) Spread {
	s := p.noise()
	if len(p.samples) < 2 {
		return Spread{Noise: s, Error: s}
	}
	// The line's error at x0 splits into its mean's, s^2/n, and its
	// slope's carried to x0, s^2*(x0-mean x)^2/Sxx: the latter is Drift.
	// A step's level has its mean's alone.
	_, leverage, slope := p.fit(ahead)
	return Spread{Noise: s, Error: s * math.Sqrt(leverage), Drift: s * math.Sqrt(slope)}
}

// fit is the least-squares line of the request rate through the samples
// (at least two), read ahead of the last one (no further than they
// span), never below zero; the leverage of that reading, 1/n +
// (x0-mean x)^2/Sxx, and of it the slope's part, (x0-mean x)^2/Sxx.
//
// A line is a model of the rate: a level moving at a constant speed, the
// samples scattered around it by noise of the standard deviation s the
// successive differences measure (noise). Its residual sum of squares is
// then s^2 times a chi-square of n-2 degrees of freedom. Past that
// distribution's quantile, the samples are not a line plus noise: the
// rate stepped (a burst's start or end), and a line through a step,
// read ahead, runs on past the step's new level (up through a burst, down
// below its end). Then, if one step explains the samples better than the
// line, the forecast is the level after it (the mean of the samples
// since), flat, with a mean's leverage.
func (p *trendPredictor) fit(ahead time.Duration) (rps, leverage, slope float64) {
	n := len(p.samples)
	t0 := p.samples[0].At
	ahead = min(ahead, p.samples[n-1].At.Sub(t0))
	var mx, my float64
	for _, s := range p.samples {
		mx += s.At.Sub(t0).Seconds()
		my += s.RequestsPerSec
	}
	mx /= float64(n)
	my /= float64(n)
	var sxy, sxx float64
	for _, s := range p.samples {
		dx := s.At.Sub(t0).Seconds() - mx
		sxy += dx * (s.RequestsPerSec - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return my, 1 / float64(n), 0
	}
	b := sxy / sxx
	if level, m, ok := p.step(t0, mx, my, b); ok {
		return level, 1 / float64(m), 0
	}
	at := p.samples[n-1].At.Sub(t0).Seconds() + ahead.Seconds()
	return max(my+b*(at-mx), 0), 1/float64(n) + (at-mx)*(at-mx)/sxx, (at - mx) * (at - mx) / sxx
}

// step is the level after the samples' last step and the samples since
// it, when the line through them (mean x mx, mean rate my, slope b) is
// rejected at the quantile and one step (two levels, the later from
// sample k on) leaves smaller residuals than the line: the k of the
// smallest, the latest on a tie.
func (p *trendPredictor) step(t0 time.Time, mx, my, b float64) (level float64, since int, ok bool) {
	n := len(p.samples)
	s := p.noise()
	if n < 3 || !(s > 0) {
		return 0, 0, false
	}
	line := 0.0
	for _, x := range p.samples {
		r := x.RequestsPerSec - (my + b*(x.At.Sub(t0).Seconds()-mx))
		line += r * r
	}
	if line <= s*s*chiSquareQuantile(p.quantile, n-2) {
		return 0, 0, false
	}
	best := line
	for k := 1; k < n; k++ {
		var before, after float64
		for _, x := range p.samples[:k] {
			before += x.RequestsPerSec
		}
		for _, x := range p.samples[k:] {
			after += x.RequestsPerSec
		}
		before /= float64(k)
		after /= float64(n - k)
		rss := 0.0
		for i, x := range p.samples {
			m := after
			if i < k {
				m = before
			}
			rss += (x.RequestsPerSec - m) * (x.RequestsPerSec - m)
		}
		if rss <= best {
			best, level, since, ok = rss, after, n-k, true
		}
	}
	return level, since, ok
}

// chiSquareQuantile is the q-quantile of a chi-square distribution of k
// degrees of freedom (Wilson and Hilferty's cube-root normal
// approximation: within 1% for k >= 3 at the usual quantiles).
func chiSquareQuantile(q float64, k int) float64 {
	f := float64(max(k, 1))
	c := 1 - 2/(9*f) + normalQuantile(q)*math.Sqrt(2/(9*f))
	return f * c * c * c
}

// Counters are a worker's counts since it started, as its load report
// carries them, at the report's time. CachedPromptTokens is 0 from a
// worker that does not count them.
type Counters struct {
	At                                                       time.Time
	Requests, PromptTokens, OutputTokens, CachedPromptTokens uint64
	// ComputedPromptRequests counts the requests that ended by the prompt
	// tokens their engine computed (wire.ComputedPromptBucket).
	ComputedPromptRequests [wire.ComputedPromptBuckets]uint64
}

// Rates is the demand between two reports of one worker: the counts'
// differences over the time between them. It is false when cur is not
// later than prev or a count went down (not the same worker's counts).
func Rates(prev, cur Counters) (Demand, bool) {
	dt := cur.At.Sub(prev.At).Seconds()
	if !(dt > 0) || cur.Requests < prev.Requests || cur.PromptTokens < prev.PromptTokens || cur.OutputTokens < prev.OutputTokens ||
		cur.CachedPromptTokens < prev.CachedPromptTokens {
		return Demand{}, false
	}
	d := Demand{
		RequestsPerSec:           float64(cur.Requests-prev.Requests) / dt,
		PromptTokensPerSec:       float64(cur.PromptTokens-prev.PromptTokens) / dt,
		OutputTokensPerSec:       float64(cur.OutputTokens-prev.OutputTokens) / dt,
		CachedPromptTokensPerSec: float64(cur.CachedPromptTokens-prev.CachedPromptTokens) / dt,
	}
	for i, n := range cur.ComputedPromptRequests {
		if p := prev.ComputedPromptRequests[i]; n >= p {
			d.ComputedPromptRequestsPerSec[i] = float64(n-p) / dt
		}
	}
	return d, true
}
