package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Goodput refinement: a sweep's fixed rate scales may end below the rate
// where a mode misses the SLO (its goodput is then unmeasured: the top of
// the sweep), or bracket it coarsely. RefineGoodput runs each mode at more
// rate scales until its goodput is measured.
const (
	// extendFactor multiplies the top rate while a mode still meets the
	// SLO there.
	extendFactor = 1.5
	// maxExtend bounds those extensions (1.5^8 is about 25 times the top).
	maxExtend = 8
	// bracketTolerance stops bisecting once the highest rate that meets
	// the SLO and the lowest above it that does not are this close.
	bracketTolerance = 0.05
)

// Objectives are what a rate scale must meet to count towards a mode's
// goodput, beside serving every request: TTFT p90 at most TTFT and, when
// ITL is positive, ITL p90 (over every gap between two tokens of a
// request, all requests pooled) at most ITL.
type Objectives struct {
	TTFT, ITL time.Duration
}

// met says whether x meets the objectives with every request served.
func (o Objectives) met(x Result) bool {
	return x.Rejected == 0 && x.TTFT[1] <= o.TTFT && (o.ITL <= 0 || x.ITL[1] <= o.ITL)
}

// missed names what x missed of the objectives: its rejected requests,
// its TTFT p90 and its ITL p90 where each is over its objective, joined
// by " and "; empty when x meets them.
func (o Objectives) missed(x Result) string {
	var parts []string
	if x.Rejected > 0 {
		parts = append(parts, fmt.Sprintf("%d rejected", x.Rejected))
	}
	if x.TTFT[1] > o.TTFT {
		parts = append(parts, "TTFT p90 "+ms(x.TTFT[1])+" ms")
	}
	if o.ITL > 0 && x.ITL[1] > o.ITL {
		parts = append(parts, "ITL p90 "+ms(x.ITL[1])+" ms")
	}
	return strings.Join(parts, " and ")
}

// String names the objectives, as the tables print them.
func (o Objectives) String() string {
	if o.ITL <= 0 {
		return "TTFT p90 <= " + o.TTFT.String()
	}
	return "TTFT p90 <= " + o.TTFT.String() + " and ITL p90 <= " + o.ITL.String()
}

// job is one simulation: a mode at a rate scale.
type job struct {
	mode string
	rate float64
}

// nextRate is the rate scale to run mode at next to measure its goodput
// from its results so far, or 0 when there is none: above the top while
// the top meets the SLO (unless extended extensions already ran; up is
// then true), else halfway between the highest rate meeting it and the
// lowest above that missing it, while bisect > 0 and they are apart.
func nextRate(results []Result, mode string, slo Objectives, extended, bisect int) (rate float64, up bool) {
	top := 0.0
	for _, x := range results {
		if x.Mode == mode {
			top = max(top, x.RateScale)
		}
	}
	if top == 0 {
		return 0, false
	}
	pass, fail := bracket(results, mode, slo)
	switch {
	case math.IsInf(fail, 1):
		if extended >= maxExtend {
			return 0, false
		}
		return round3(top * extendFactor), true
	case pass == 0 || bisect <= 0 || (fail-pass)/pass <= bracketTolerance:
		return 0, false
	}
	mid := round3((pass + fail) / 2)
	if mid <= pass || mid >= fail {
		return 0, false
	}
	return mid, false
}

// round3 rounds a rate scale to three significant digits, for readable
// tables (13.5, not 13.4999).
func round3(x float64) float64 {
	if x <= 0 {
		return x
	}
	// Scaled by a power of ten and divided back, so that the result is
	// the float nearest the decimal (16.9, not 16.900000000000002).
	q := math.Pow(10, 2-math.Floor(math.Log10(x)))
	return math.Round(x*q) / q
}

// RefineGoodput runs more rate scales per mode until each one's goodput is
// measured: first above the sweep while the top still meets slo, then
// bisect rounds of bisection between the highest rate that meets it and
// the lowest above that misses it. It returns results with the new ones,
// ordered by mode (as in modes), then rate scale.
func RefineGoodput(trace []Request, cfg Config, modes []string, results []Result, slo Objectives, bisect, parallel int) ([]Result, error) {
	extended := map[string]int{}
	bisected := map[string]int{}
	results, err := runRounds(trace, cfg, results, parallel, func(results []Result) []job {
		var jobs []job
		for _, m := range modes {
			r, up := nextRate(results, m, slo, extended[m], bisect-bisected[m])
			if r == 0 {
				continue
			}
			if up {
				extended[m]++
			} else {
				bisected[m]++
			}
			jobs = append(jobs, job{mode: m, rate: r})
		}
		return jobs
	})
	if err != nil {
		return nil, err
	}
	order := func(m string) int { return slices.Index(modes, m) }
	slices.SortStableFunc(results, func(a, b Result) int {
		if d := order(a.Mode) - order(b.Mode); d != 0 {
			return d
		}
		return cmp.Compare(a.RateScale, b.RateScale)
	})
	return results, nil
}

// runRounds runs rounds of simulations, each round the jobs next asks
// for given the results so far, until it asks for none, and returns the
// results with every round's appended. RefineGoodput and
// SettleGoodputRatio differ only in what they ask for.
func runRounds(trace []Request, cfg Config, results []Result, parallel int, next func([]Result) []job) ([]Result, error) {
	for {
		jobs := next(results)
		if len(jobs) == 0 {
			return results, nil
		}
		more, err := runJobs(trace, cfg, jobs, parallel)
		if err != nil {
			return nil, err
		}
		results = append(results, more...)
	}
}

// runJobs runs simulations, at most parallel at once, in jobs' order.
func runJobs(trace []Request, cfg Config, jobs []job, parallel int) ([]Result, error) {
	results := make([]Result, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan struct{})
	for i, j := range jobs {
		go func() {
			sem <- struct{}{}
			c := cfg
			c.RateScale = j.rate
			results[i], errs[i] = Run(trace, c, j.mode)
			<-sem
			done <- struct{}{}
		}()
	}
	for range jobs {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("mode %s at rate x%g: %w", jobs[i].mode, jobs[i].rate, err)
		}
	}
	return results, nil
}

// bracket is mode's goodput in results (the highest rate scale meeting slo
// with every request served) and the lowest rate above it that missed
// (+Inf when none ran): the true goodput is in between.
func bracket(results []Result, mode string, slo Objectives) (pass, fail float64) {
	fail = math.Inf(1)
	for _, x := range results {
		if x.Mode == mode && slo.met(x) {
			pass = max(pass, x.RateScale)
		}
	}
	for _, x := range results {
		if x.Mode == mode && x.RateScale > pass && !slo.met(x) {
			fail = min(fail, x.RateScale)
		}
	}
	return pass, fail
}

// ratioSettled says whether kv's goodput bracket [kv, kvFail) and
// round-robin's [rr, rrFail) decide kv >= ratio x rr for any goodputs in
// them: kv >= ratio x rrFail (it holds) or ratio x rr >= kvFail (it does
// not). No round-robin goodput at all decides it too (the goal fails).
func ratioSettled(rr, rrFail, kv, kvFail, ratio float64) bool {
	return rr == 0 || kv >= ratio*rrFail || ratio*rr >= kvFail
}

// SettleGoodputRatio runs round-robin and kv at the middles of their
// goodput brackets, at most rounds times, until the brackets decide
// whether kv's goodput is at least ratio times round-robin's (see
// ratioSettled): with the sweep's brackets alone (about 10% wide after
// two bisections) a verdict near the line can depend on where the rates
// fell. Both modes run at the same SLO and refine the same way.
func SettleGoodputRatio(trace []Request, cfg Config, results []Result, slo Objectives, ratio float64, rounds, parallel int) ([]Result, error) {
	round := 0
	return runRounds(trace, cfg, results, parallel, func(results []Result) []job {
		if round >= rounds {
			return nil
		}
		round++
		rr, rrFail := bracket(results, "round-robin", slo)
		kv, kvFail := bracket(results, "kv", slo)
		if ratioSettled(rr, rrFail, kv, kvFail, ratio) {
			return nil
		}
		var jobs []job
		for _, m := range []struct {
			mode       string
			pass, fail float64
		}{{"round-robin", rr, rrFail}, {"kv", kv, kvFail}} {
			if mid := round3((m.pass + m.fail) / 2); m.pass > 0 && mid > m.pass && mid < m.fail {
				jobs = append(jobs, job{mode: m.mode, rate: mid})
			}
		}
		return jobs
	})
}
