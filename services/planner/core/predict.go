package core

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Demand is a pool's load in rates: requests, prompt tokens and output
// tokens per second.
type Demand struct {
	RequestsPerSec     float64 `json:"requests_per_sec"`
	PromptTokensPerSec float64 `json:"prompt_tokens_per_sec"`
	OutputTokensPerSec float64 `json:"output_tokens_per_sec"`
}

// PromptTokens is the mean prompt of a request, 0 without requests.
func (d Demand) PromptTokens() float64 { return perRequest(d.PromptTokensPerSec, d.RequestsPerSec) }

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
	for _, v := range []float64{d.RequestsPerSec, d.PromptTokensPerSec, d.OutputTokensPerSec} {
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
}

// predictors lists the predictors by their --predictor name.
var predictors = map[string]func(window int) Predictor{
	// window is the mean of the last window samples: it follows a level
	// and smooths noise, and lags a ramp by half the window.
	"window": func(w int) Predictor { return &windowPredictor{history: history{size: w}} },
	// trend fits a line to the last window samples by least squares and
	// reads it ahead: it follows a ramp without lag, and amplifies noise
	// more than window does.
	"trend": func(w int) Predictor { return &trendPredictor{history: history{size: w}} },
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
// samples (at least 1).
func NewPredictor(name string, window int) (Predictor, error) {
	mk, ok := predictors[name]
	if !ok {
		return nil, fmt.Errorf("unknown predictor %q: valid values are %s", name, strings.Join(PredictorNames(), ", "))
	}
	return mk(max(window, 1)), nil
}

// history is the last size samples, oldest first.
type history struct {
	size    int
	samples []Sample
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
	}
	n := float64(len(h.samples))
	return Demand{d.RequestsPerSec / n, d.PromptTokensPerSec / n, d.OutputTokensPerSec / n}
}

type windowPredictor struct{ history }

func (p *windowPredictor) Forecast(time.Duration) Demand { return p.mean() }

type trendPredictor struct{ history }

// Forecast reads the least-squares line through the samples ahead of the
// last one, never below zero. With fewer than two samples it is the mean.
func (p *trendPredictor) Forecast(ahead time.Duration) Demand {
	n := len(p.samples)
	if n < 2 {
		return p.mean()
	}
	t0 := p.samples[0].At
	xs := make([]float64, n)
	var mx float64
	for i, s := range p.samples {
		xs[i] = s.At.Sub(t0).Seconds()
		mx += xs[i]
	}
	mx /= float64(n)
	at := p.samples[n-1].At.Sub(t0).Seconds() + ahead.Seconds()
	line := func(y func(Sample) float64) float64 {
		var my, sxy, sxx float64
		for _, s := range p.samples {
			my += y(s)
		}
		my /= float64(n)
		for i, s := range p.samples {
			dx := xs[i] - mx
			sxy += dx * (y(s) - my)
			sxx += dx * dx
		}
		if sxx == 0 {
			return my
		}
		return max(my+sxy/sxx*(at-mx), 0)
	}
	return Demand{
		RequestsPerSec:     line(func(s Sample) float64 { return s.RequestsPerSec }),
		PromptTokensPerSec: line(func(s Sample) float64 { return s.PromptTokensPerSec }),
		OutputTokensPerSec: line(func(s Sample) float64 { return s.OutputTokensPerSec }),
	}
}

// Counters are a worker's counts since it started, as its load report
// carries them, at the report's time.
type Counters struct {
	At                                   time.Time
	Requests, PromptTokens, OutputTokens uint64
}

// Rates is the demand between two reports of one worker: the counts'
// differences over the time between them. It is false when cur is not
// later than prev or a count went down (not the same worker's counts).
func Rates(prev, cur Counters) (Demand, bool) {
	dt := cur.At.Sub(prev.At).Seconds()
	if !(dt > 0) || cur.Requests < prev.Requests || cur.PromptTokens < prev.PromptTokens || cur.OutputTokens < prev.OutputTokens {
		return Demand{}, false
	}
	return Demand{
		RequestsPerSec:     float64(cur.Requests-prev.Requests) / dt,
		PromptTokensPerSec: float64(cur.PromptTokens-prev.PromptTokens) / dt,
		OutputTokensPerSec: float64(cur.OutputTokens-prev.OutputTokens) / dt,
	}, true
}
