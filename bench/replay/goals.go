package replay

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The goal table: the routing goals, checked on one trace at a time
// and printed for a set of traces in one table (router-replay-bench
// --goals, make bench-goals). The goals, on every trace:
//   - hit: kv's hit rate at the default rate is at least 90% of the
//     pooled-cache bound;
//   - approx: approximate kv's, at least 85%;
//   - goodput: kv's goodput (the highest rate scale whose TTFT p90 meets
//     the SLO) is at least twice round-robin's;
//   - ttft: kv's TTFT p90 at the default rate is at most 1.5 times the
//     cached floor's p90 (out of reach for every router when the chain
//     floor's p90 at that rate is above that);
//   - replicas: 3 and 8 synced routers are within 2 points of hit rate
//     and 10% of TTFT p90 of one router at the default rate.
const (
	goalHitPooled     = 0.90
	goalApproxPooled  = 0.85
	goalGoodputRatio  = 2.0
	goalTTFTFloor     = 1.5
	goalReplicaPoints = 2.0
	goalReplicaTTFT   = 0.10
)

// settleRounds bounds the extra rounds (one run of round-robin and one of
// kv each) SettleGoodputRatio may take to decide the goodput goal, and
// those (one run of kv and of each peer still in question) SettlePeerRatio
// may take to decide kv's 1.2x over the best peer.
const settleRounds = 3

// GoalModes are the modes the goal table runs: round-robin, kv and the
// peers' policies over the whole sweep (for goodput), the others at the
// default rate only.
var GoalModes = []string{"round-robin", "kv", "kv-approx", "kv-3-replicas", "kv-8-replicas", "dynamo", "llm-d", "sglang"}

// goodputModes are swept over every rate scale and refined.
var goodputModes = []string{"round-robin", "kv", "dynamo", "llm-d", "sglang"}

// RunGoals runs what the goal table needs on one trace: round-robin, kv and
// the peers' policies at every rate scale in rates (and defaultRate),
// refined to their goodput
// as RefineGoodput does and then, when bisect > 0, until their brackets
// decide the goodput goal (SettleGoodputRatio, at most settleRounds more
// rounds) and kv's 1.2x over the best peer (SettlePeerRatio, as many), and
// kv-approx, kv-3-replicas and kv-8-replicas at defaultRate. The report's
// results are in GoalModes order, then rate.
func RunGoals(trace []Request, cfg Config, rates []float64, defaultRate float64, slo Objectives, bisect, parallel int) ([]Result, error) {
	if !slices.Contains(rates, defaultRate) {
		rates = append(slices.Clone(rates), defaultRate)
		slices.Sort(rates)
	}
	var jobs []job
	for _, m := range goodputModes {
		for _, r := range rates {
			jobs = append(jobs, job{mode: m, rate: r})
		}
	}
	for _, m := range GoalModes {
		if !slices.Contains(goodputModes, m) {
			jobs = append(jobs, job{mode: m, rate: defaultRate})
		}
	}
	results, err := runJobs(trace, cfg, jobs, parallel)
	if err == nil {
		// Only the goodput modes are refined (the others ran at one rate).
		results, err = RefineGoodput(trace, cfg, goodputModes, results, slo, bisect, parallel)
	}
	if err == nil && bisect > 0 {
		results, err = SettleGoodputRatio(trace, cfg, results, slo, goalGoodputRatio, settleRounds, parallel)
	}
	if err == nil && bisect > 0 {
		results, err = SettlePeerRatio(trace, cfg, results, slo, goalPeerGoodput, settleRounds, parallel)
	}
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(results, func(a, b Result) int {
		if d := slices.Index(GoalModes, a.Mode) - slices.Index(GoalModes, b.Mode); d != 0 {
			return d
		}
		return cmp.Compare(a.RateScale, b.RateScale)
	})
	return results, nil
}

// GoalRow is one trace's line of the goal table.
type GoalRow struct {
	Trace  string
	Pooled float64
	// KVPooled and ApproxPooled are kv's and kv-approx's hit rates at the
	// default rate as fractions of the pooled bound.
	KVPooled, ApproxPooled float64
	// RR and KV are the goodputs (0: no rate met the SLO); RRFail and
	// KVFail the lowest rate scale above each that missed it (+Inf: none
	// ran), so the true goodput lies in [RR, RRFail).
	RR, RRFail, KV, KVFail float64
	// Capacity is the capacity bound's rate scale (sustained), Horizon the
	// finite-horizon bound's (this trace, its end included).
	Capacity, Horizon float64
	// TTFTP90 and Floor are kv's TTFT p90 at the default rate and the
	// cached floor's p90.
	TTFTP90, Floor time.Duration
	// Chain is the chain floor's p90 at the default rate (ChainFloor; 0:
	// the report has none): no router's TTFT p90 there is below it.
	Chain time.Duration
	// Rep3Points and Rep8Points are the replicas' hit rate minus one
	// router's, in hit-rate points (100 x the difference of the hit
	// rates, as the goal says; points of the pooled bound are that over
	// Pooled); Rep3TTFT and Rep8TTFT their TTFT p90 over one router's,
	// minus 1.
	Rep3Points, Rep8Points, Rep3TTFT, Rep8TTFT float64
	// Missing names modes the report had no result for at the default
	// rate; their goals fail.
	Missing []string
	// Peers are kv's, the peers' and round-robin's figures, in
	// comparedModes order (peergoals.go).
	Peers []Figures
}

// HitOK says kv's hit rate is at least 90% of the pooled bound.
func (g GoalRow) HitOK() bool { return g.KVPooled >= goalHitPooled && !g.missing("kv") }

// ApproxOK says kv-approx's hit rate is at least 85% of the pooled bound.
func (g GoalRow) ApproxOK() bool {
	return g.ApproxPooled >= goalApproxPooled && !g.missing("kv-approx")
}

// GoodputOK says kv's measured goodput is at least twice round-robin's.
func (g GoalRow) GoodputOK() bool { return g.RR > 0 && g.KV >= goalGoodputRatio*g.RR }

// GoodputSettled says the goodput brackets decide GoodputOK: it holds for
// any goodputs within them (kv's at least twice round-robin's highest
// bracket end, or twice round-robin's at least kv's), or twice
// round-robin's is above the finite-horizon bound, which kv's cannot
// pass; so it does not depend on where the swept rates fell.
func (g GoalRow) GoodputSettled() bool {
	return ratioSettled(g.RR, g.RRFail, g.KV, g.KVFail, goalGoodputRatio) || g.GoodputUnreachable()
}

// GoodputUnreachable says twice round-robin's goodput is above the
// finite-horizon bound: no router could meet the goodput goal on this
// trace. RR is the highest rate round-robin met, at most its true goodput,
// so the verdict holds for the true one too.
func (g GoalRow) GoodputUnreachable() bool { return goalGoodputRatio*g.RR > g.Horizon }

// GoodputUnsustainable says twice round-robin's goodput is above the
// capacity bound: no router could sustain it, though a finite trace may
// still pass there (GoodputUnreachable is the proof for this trace).
func (g GoalRow) GoodputUnsustainable() bool { return goalGoodputRatio*g.RR > g.Capacity }

// TTFTRatio is kv's TTFT p90 over the floor's.
func (g GoalRow) TTFTRatio() float64 {
	if g.Floor <= 0 {
		return math.Inf(1)
	}
	return float64(g.TTFTP90) / float64(g.Floor)
}

// TTFTOK says kv's TTFT p90 is at most 1.5 times the floor's.
func (g GoalRow) TTFTOK() bool { return g.TTFTRatio() <= goalTTFTFloor && !g.missing("kv") }

// TTFTUnreachable says the chain floor's p90 is above 1.5 times the
// cached floor's: every router's TTFT p90 is at least the chain floor's
// (each request's TTFT is at least its own chain floor), so no router
// could meet the TTFT goal on this trace at the default rate.
func (g GoalRow) TTFTUnreachable() bool {
	return g.Chain > 0 && float64(g.Chain) > goalTTFTFloor*float64(g.Floor)
}

// ReplicasOK says 3 and 8 synced routers are within 2 points of hit rate
// and 10% of TTFT p90 of one router.
func (g GoalRow) ReplicasOK() bool {
	within := func(points, ttft float64) bool {
		return math.Abs(points) <= goalReplicaPoints && math.Abs(ttft) <= goalReplicaTTFT
	}
	return within(g.Rep3Points, g.Rep3TTFT) && within(g.Rep8Points, g.Rep8TTFT) &&
		!g.missing("kv") && !g.missing("kv-3-replicas") && !g.missing("kv-8-replicas")
}

func (g GoalRow) missing(mode string) bool { return slices.Contains(g.Missing, mode) }

// Goals computes a report's goal row at the default rate scale.
func Goals(r *Report, defaultRate float64) GoalRow {
	g := GoalRow{Trace: r.Trace, Pooled: r.Bounds.Pooled, Capacity: r.Bounds.Capacity.Rate, Horizon: r.HorizonBound().Rate,
		Floor: r.Bounds.FloorTTFT[1], Chain: r.ChainFloors[defaultRate][1]}
	at := map[string]Result{}
	for _, m := range GoalModes {
		if slices.Contains(peerModes, m) {
			continue // the peer table marks its own (Figures.Ran)
		}
		i := slices.IndexFunc(r.Results, func(x Result) bool { return x.Mode == m && x.RateScale == defaultRate })
		if i < 0 {
			g.Missing = append(g.Missing, m)
			continue
		}
		at[m] = r.Results[i]
	}
	ofPooled := func(h float64) float64 {
		if r.Bounds.Pooled <= 0 {
			return 0
		}
		return h / r.Bounds.Pooled
	}
	kv := at["kv"]
	g.KVPooled, g.ApproxPooled = ofPooled(kv.HitRate), ofPooled(at["kv-approx"].HitRate)
	g.TTFTP90 = kv.TTFT[1]
	g.RR, g.RRFail = r.GoodputBracket("round-robin")
	g.KV, g.KVFail = r.GoodputBracket("kv")
	rel := func(x time.Duration) float64 {
		if kv.TTFT[1] <= 0 {
			return 0
		}
		return float64(x)/float64(kv.TTFT[1]) - 1
	}
	g.Rep3Points, g.Rep3TTFT = 100*(at["kv-3-replicas"].HitRate-kv.HitRate), rel(at["kv-3-replicas"].TTFT[1])
	g.Rep8Points, g.Rep8TTFT = 100*(at["kv-8-replicas"].HitRate-kv.HitRate), rel(at["kv-8-replicas"].TTFT[1])
	g.Peers = peerFigures(r, defaultRate)
	return g
}

// GoodputBracket is mode's goodput and the lowest rate scale above it that
// missed the SLO (+Inf when none ran): the true goodput is in between.
func (r *Report) GoodputBracket(mode string) (pass, fail float64) {
	return bracket(r.Results, mode, r.Objectives())
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// fmtHorizon prints a bound's rate scale, "none" when nothing binds.
func fmtHorizon(x float64) string {
	if math.IsInf(x, 1) {
		return "none"
	}
	return "x" + fmtRate(x)
}

func fmtBracket(pass, fail float64) string {
	s := "x" + fmtRate(pass)
	if !math.IsInf(fail, 1) {
		s += " (<x" + fmtRate(fail) + ")"
	}
	return s
}

// WriteGoals prints the goal table as markdown: one row per trace with the
// figures and a verdict after each goal's, then how many traces meet each
// goal. A goodput failure where twice round-robin's goodput is above the
// finite-horizon bound is marked "FAIL (>bound)": no router could meet it
// there; one above the capacity bound only, "FAIL (>cap)": no router could
// sustain that rate, but this finite trace might pass it. A TTFT failure
// where the chain floor's p90 is above 1.5 times the cached floor's is
// marked "FAIL (>chain)": no router could meet it; the traces where that
// holds are listed after the counts.
func WriteGoals(w io.Writer, rows []GoalRow, defaultRate float64, slo time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goals at the default rate x%g (SLO TTFT p90 <= %s): kv >= %.0f%% of pooled, approx >= %.0f%%, kv goodput >= %gx rr, kv TTFT p90 <= %gx floor, 3/8 replicas within %g hit-rate points and %.0f%% TTFT p90\n",
		defaultRate, slo, 100*goalHitPooled, 100*goalApproxPooled, goalGoodputRatio, goalTTFTFloor, goalReplicaPoints, 100*goalReplicaTTFT)
	b.WriteString("goodput (<xF): F is the lowest rate above that missed the SLO; capacity: the rate no router can sustain (a finite trace can pass above it: work runs on after the last arrival); horizon: the rate above which no router meets the SLO on this trace, its end included; FAIL (>bound): 2x rr's goodput is above the horizon, out of reach for any router; FAIL (>cap): above the capacity only, not proven out of reach; ?: the goodput brackets do not decide the verdict (it could change with the rates swept)\n")
	fmt.Fprintf(&b, "chain p90: the chain floor's TTFT p90 at x%g, below which no router's is (a block is reusable only once some request has computed it, so a request cannot reuse the prompt of one still in prefill; any number of idle engines, infinite caches); FAIL (>chain): it is above %gx the cached floor's p90, out of reach for any router; -: not computed\n\n",
		defaultRate, goalTTFTFloor)
	b.WriteString("| trace | pooled | kv % pooled | hit | approx % pooled | approx | goodput rr | goodput kv | kv/rr | capacity | horizon | goodput | TTFT p90 / floor ms | chain p90 ms | ratio | ttft | 3 rep hit pts (of pooled), TTFT | 8 rep hit pts (of pooled), TTFT | replicas |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var met [5]int
	for _, g := range rows {
		ratio := "-"
		if g.RR > 0 {
			ratio = fmt.Sprintf("%.2fx", g.KV/g.RR)
		}
		gv := verdict(g.GoodputOK())
		switch {
		case g.GoodputOK():
		case g.GoodputUnreachable():
			gv = "FAIL (>bound)"
		case g.GoodputUnsustainable():
			gv = "FAIL (>cap)"
		}
		if !g.GoodputSettled() {
			gv += " ?"
		}
		tv := verdict(g.TTFTOK())
		if !g.TTFTOK() && g.TTFTUnreachable() {
			tv = "FAIL (>chain)"
		}
		chain := "-"
		if g.Chain > 0 {
			chain = ms(g.Chain)
		}
		oks := []bool{g.HitOK(), g.ApproxOK(), g.GoodputOK(), g.TTFTOK(), g.ReplicasOK()}
		for i, ok := range oks {
			if ok {
				met[i]++
			}
		}
		ofPooled := func(points float64) float64 {
			if g.Pooled <= 0 {
				return 0
			}
			return points / g.Pooled
		}
		fmt.Fprintf(&b, "| %s | %.3f | %.1f | %s | %.1f | %s | %s | %s | %s | x%s | %s | %s | %s / %s | %s | %.2fx | %s | %+.1f (%+.1f), %+.1f%% | %+.1f (%+.1f), %+.1f%% | %s |\n",
			g.Trace, g.Pooled, 100*g.KVPooled, verdict(oks[0]), 100*g.ApproxPooled, verdict(oks[1]),
			fmtBracket(g.RR, g.RRFail), fmtBracket(g.KV, g.KVFail), ratio, fmtRate(g.Capacity), fmtHorizon(g.Horizon), gv,
			ms(g.TTFTP90), ms(g.Floor), chain, g.TTFTRatio(), tv,
			g.Rep3Points, ofPooled(g.Rep3Points), 100*g.Rep3TTFT, g.Rep8Points, ofPooled(g.Rep8Points), 100*g.Rep8TTFT, verdict(oks[4]))
	}
	fmt.Fprintf(&b, "\ngoals met on %d traces: hit %d, approx %d, goodput %d, ttft %d, replicas %d\n",
		len(rows), met[0], met[1], met[2], met[3], met[4])
	var chained []string
	for _, g := range rows {
		if !g.TTFTOK() && g.TTFTUnreachable() {
			chained = append(chained, g.Trace)
		}
	}
	if len(chained) > 0 {
		fmt.Fprintf(&b, "ttft out of reach for any router (FAIL (>chain)) on %d traces: %s\n", len(chained), strings.Join(chained, ", "))
	}
	for _, g := range rows {
		if len(g.Missing) > 0 {
			fmt.Fprintf(&b, "%s: no result at x%g for %s\n", g.Trace, defaultRate, strings.Join(g.Missing, ", "))
		}
	}
	writePeerGoals(&b, rows, defaultRate)
	_, err := io.WriteString(w, b.String())
	return err
}
