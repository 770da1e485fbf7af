package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The peer goals: kv against the peers' policies (peers.go) on the same
// trace, in the same run, on every trace of the goal table:
//   - kv is at least the best peer on hit rate and TTFT p90 at the default
//     rate, and on goodput, each within the run-to-run spread measured in
//     the same run (the modes again with other seeds: RunSpread at the
//     default rate, RunGoodputSpread over the sweep's rate scales);
//   - kv's goodput is at least 1.2 times the best peer's on at least half
//     of the traces;
//   - kv's TTFT p90 at the default rate is at most 1.5 times the chain
//     floor's p90 wherever any policy (a peer, round-robin or kv) reaches
//     that; where none does it is reported, not judged.
const (
	goalPeerGoodput = 1.2
	goalChainRatio  = 1.5
)

// PeerModes are the modes kv is compared with in the peer table, after kv:
// the peers, then round-robin (for scale; not a peer).
var PeerModes = []string{"dynamo", "llm-d", "sglang", "round-robin"}

// comparedModes are kv and PeerModes, the peer table's columns.
var comparedModes = append([]string{"kv"}, PeerModes...)

// Figures are one mode's figures on a trace: hit rate and TTFT percentiles
// at the default rate, and its goodput bracket (Pass, the highest rate
// scale meeting the SLO, 0 if none; Fail the lowest above it missing it,
// +Inf if none ran). Ran says the mode had a result at the default rate.
type Figures struct {
	Mode       string
	Ran        bool
	HitRate    float64
	TTFT       [3]time.Duration
	Pass, Fail float64
	// HitSpread (hit-rate points) and TTFTSpread are the ranges of its hit
	// rate and TTFT p90 at the default rate over the seeds RunSpread ran
	// (0 when it ran one).
	HitSpread  float64
	TTFTSpread time.Duration
	// GoodLo and GoodHi are the lowest and highest goodput over those
	// seeds (RunGoodputSpread; both Pass when it ran one).
	GoodLo, GoodHi float64
	// SentAway and GaveUp are the mode's Result fields at the default
	// rate: the requests it placed away from the worker it saw caching
	// most of their prompt, and the share of the prompt blocks they gave
	// up so (what the hit rate lost by those choices, as it saw the
	// caches).
	SentAway int
	GaveUp   float64
	// Missed says what the mode missed of the objectives at Fail (see
	// Objectives.missed): which of them bounds its goodput; empty when no
	// rate above its goodput ran.
	Missed string
}

// GoodSpread is the range of the mode's goodput over the seeds run.
func (f Figures) GoodSpread() float64 { return max(f.GoodHi-f.GoodLo, 0) }

// peerFigures reads each compared mode's figures from a report.
func peerFigures(r *Report, defaultRate float64) []Figures {
	out := make([]Figures, len(comparedModes))
	for i, m := range comparedModes {
		f := Figures{Mode: m}
		if j := slices.IndexFunc(r.Results, func(x Result) bool { return x.Mode == m && x.RateScale == defaultRate }); j >= 0 {
			x := r.Results[j]
			f.Ran, f.HitRate, f.TTFT, f.SentAway, f.GaveUp = true, x.HitRate, x.TTFT, x.SentAway, x.GaveUp
		}
		f.Pass, f.Fail = r.GoodputBracket(m)
		f.GoodLo, f.GoodHi = f.Pass, f.Pass
		if j := slices.IndexFunc(r.Results, func(x Result) bool { return x.Mode == m && x.RateScale == f.Fail }); j >= 0 {
			f.Missed = r.Objectives().missed(r.Results[j])
		}
		out[i] = f
	}
	return out
}

// Spread is the range of one mode's hit rate (points) and TTFT p90 at one
// rate over several seeds.
type Spread struct {
	HitPoints float64
	TTFTP90   time.Duration
}

// RunSpread runs each mode at rate with seeds cfg.Seed+1 .. cfg.Seed+seeds-1
// and returns, per mode, the range of its hit rate and TTFT p90 over those
// runs and the one of cfg.Seed in results (the seed moves every random
// tie-break: the run-to-run spread of the replay). seeds <= 1 runs nothing.
func RunSpread(trace []Request, cfg Config, results []Result, modes []string, rate float64, seeds, parallel int) (map[string]Spread, error) {
	out := map[string]Spread{}
	if seeds <= 1 {
		return out, nil
	}
	byMode := map[string][]Result{}
	for _, x := range results {
		if x.RateScale == rate && slices.Contains(modes, x.Mode) {
			byMode[x.Mode] = append(byMode[x.Mode][:0], x)
		}
	}
	type seeded struct {
		mode string
		seed uint64
	}
	var runs []seeded
	for _, m := range modes {
		for s := 1; s < seeds; s++ {
			runs = append(runs, seeded{m, cfg.Seed + uint64(s)})
		}
	}
	got := make([]Result, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan struct{})
	for i, r := range runs {
		go func() {
			sem <- struct{}{}
			c := cfg
			c.RateScale, c.Seed = rate, r.seed
			got[i], errs[i] = Run(trace, c, r.mode)
			<-sem
			done <- struct{}{}
		}()
	}
	for range runs {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("mode %s at seed %d: %w", runs[i].mode, runs[i].seed, err)
		}
		byMode[runs[i].mode] = append(byMode[runs[i].mode], got[i])
	}
	for m, rs := range byMode {
		hlo, hhi := math.Inf(1), math.Inf(-1)
		tlo, thi := time.Duration(math.MaxInt64), time.Duration(0)
		for _, x := range rs {
			hlo, hhi = min(hlo, x.HitRate), max(hhi, x.HitRate)
			tlo, thi = min(tlo, x.TTFT[1]), max(thi, x.TTFT[1])
		}
		out[m] = Spread{HitPoints: 100 * (hhi - hlo), TTFTP90: thi - tlo}
	}
	return out, nil
}

// RunGoodputSpread measures each mode's goodput again with seeds
// cfg.Seed+1 .. cfg.Seed+seeds-1, on the rate scales the mode ran at in
// results (cfg.Seed's sweep): from its goodput there, up the scales while
// it meets slo, or down them until it does (0 below the lowest). It
// returns, per mode, the lowest and highest goodput over all the seeds,
// cfg.Seed's included: a goodput is one seed's draw of every tie-break
// as much as a hit rate is. seeds <= 1 runs nothing.
func RunGoodputSpread(trace []Request, cfg Config, results []Result, modes []string, slo Objectives, seeds, parallel int) (map[string][2]float64, error) {
	out := map[string][2]float64{}
	if seeds <= 1 {
		return out, nil
	}
	type search struct {
		mode  string
		seed  uint64
		rates []float64
		good  float64
		err   error
	}
	var runs []*search
	for _, m := range modes {
		var rates []float64
		for _, x := range results {
			if x.Mode == m {
				rates = append(rates, x.RateScale)
			}
		}
		slices.Sort(rates)
		rates = slices.Compact(rates)
		if len(rates) == 0 {
			continue
		}
		pass, _ := bracket(results, m, slo)
		out[m] = [2]float64{pass, pass}
		for s := 1; s < seeds; s++ {
			runs = append(runs, &search{mode: m, seed: cfg.Seed + uint64(s), rates: rates, good: pass})
		}
	}
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan struct{})
	for _, r := range runs {
		go func() {
			sem <- struct{}{}
			r.good, r.err = seedGoodput(trace, cfg, r.mode, r.seed, r.rates, r.good, slo)
			<-sem
			done <- struct{}{}
		}()
	}
	for range runs {
		<-done
	}
	for _, r := range runs {
		if r.err != nil {
			return nil, fmt.Errorf("mode %s at seed %d: %w", r.mode, r.seed, r.err)
		}
		lo := out[r.mode]
		out[r.mode] = [2]float64{min(lo[0], r.good), max(lo[1], r.good)}
	}
	return out, nil
}

// seedGoodput is mode's goodput with seed over the rate scales rates
// (sorted), starting at from (a goodput with another seed; 0 starts at
// the lowest): the highest rate it meets slo at, going up while it does,
// or down until it does.
func seedGoodput(trace []Request, cfg Config, mode string, seed uint64, rates []float64, from float64, slo Objectives) (float64, error) {
	i := max(slices.Index(rates, from), 0)
	met := func(rate float64) (bool, error) {
		c := cfg
		c.RateScale, c.Seed = rate, seed
		x, err := Run(trace, c, mode)
		return slo.met(x), err
	}
	ok, err := met(rates[i])
	if err != nil {
		return 0, err
	}
	if ok {
		for i+1 < len(rates) {
			if ok, err = met(rates[i+1]); err != nil || !ok {
				return rates[i], err
			}
			i++
		}
		return rates[i], nil
	}
	for i > 0 {
		i--
		if ok, err = met(rates[i]); err != nil || ok {
			return rates[i], err
		}
	}
	return 0, nil
}

// SetGoodputSpread records the goodput ranges RunGoodputSpread measured in
// the row's figures.
func (g *GoalRow) SetGoodputSpread(s map[string][2]float64) {
	for i := range g.Peers {
		if r, ok := s[g.Peers[i].Mode]; ok {
			g.Peers[i].GoodLo, g.Peers[i].GoodHi = r[0], r[1]
		}
	}
}

// SetSpread records the spreads RunSpread measured in the row's figures.
func (g *GoalRow) SetSpread(s map[string]Spread) {
	for i := range g.Peers {
		sp := s[g.Peers[i].Mode]
		g.Peers[i].HitSpread, g.Peers[i].TTFTSpread = sp.HitPoints, sp.TTFTP90
	}
}

func (g GoalRow) figures(mode string) Figures {
	for _, f := range g.Peers {
		if f.Mode == mode {
			return f
		}
	}
	return Figures{Mode: mode}
}

// bestPeer is the peer (not round-robin) best on a figure: by better(a, b),
// a is better than b. ok is false when no peer ran.
func (g GoalRow) bestPeer(better func(a, b Figures) bool) (Figures, bool) {
	var best Figures
	found := false
	for _, f := range g.Peers {
		if f.Mode == "kv" || f.Mode == "round-robin" || !f.Ran {
			continue
		}
		if !found || better(f, best) {
			best, found = f, true
		}
	}
	return best, found
}

// BestHit, BestTTFT and BestGoodput are the best peer on each figure.
func (g GoalRow) BestHit() (Figures, bool) {
	return g.bestPeer(func(a, b Figures) bool { return a.HitRate > b.HitRate })
}

func (g GoalRow) BestTTFT() (Figures, bool) {
	return g.bestPeer(func(a, b Figures) bool { return a.TTFT[1] < b.TTFT[1] })
}

func (g GoalRow) BestGoodput() (Figures, bool) {
	return g.bestPeer(func(a, b Figures) bool { return a.Pass > b.Pass })
}

// PeerHitOK says kv's hit rate is at least the best peer's, less the
// larger of the two modes' seed spreads.
func (g GoalRow) PeerHitOK() bool {
	kv, best, ok := g.figures("kv"), Figures{}, false
	if best, ok = g.BestHit(); !ok || !kv.Ran {
		return false
	}
	return 100*kv.HitRate >= 100*best.HitRate-max(kv.HitSpread, best.HitSpread)
}

// PeerTTFTOK says kv's TTFT p90 is at most the best peer's, plus the
// larger of the two modes' seed spreads.
func (g GoalRow) PeerTTFTOK() bool {
	kv, best, ok := g.figures("kv"), Figures{}, false
	if best, ok = g.BestTTFT(); !ok || !kv.Ran {
		return false
	}
	return kv.TTFT[1] <= best.TTFT[1]+max(kv.TTFTSpread, best.TTFTSpread)
}

// PeerGoodputOK says kv's goodput is at least the best peer's, less the
// larger of the two modes' goodput ranges over the seeds.
func (g GoalRow) PeerGoodputOK() bool {
	kv := g.figures("kv")
	best, ok := g.BestGoodput()
	return ok && kv.Pass >= best.Pass-max(kv.GoodSpread(), best.GoodSpread())
}

// PeerGoodputSettled says the brackets decide PeerGoodputOK: it holds, or
// kv's whole bracket is below what it must reach.
func (g GoalRow) PeerGoodputSettled() bool {
	kv := g.figures("kv")
	best, ok := g.BestGoodput()
	return !ok || g.PeerGoodputOK() || kv.Fail <= best.Pass-max(kv.GoodSpread(), best.GoodSpread())
}

// PeerGoodputRatio is kv's goodput over the best peer's (+Inf when the
// best peer met the SLO at no rate and kv did; 0 when neither did).
func (g GoalRow) PeerGoodputRatio() float64 {
	kv := g.figures("kv")
	best, ok := g.BestGoodput()
	switch {
	case !ok || (best.Pass == 0 && kv.Pass == 0):
		return 0
	case best.Pass == 0:
		return math.Inf(1)
	}
	return kv.Pass / best.Pass
}

// PeerGoodputRange is the range kv's goodput over the best peer's can take
// within the goodput brackets: kv's true goodput is in [kv.Pass, kv.Fail)
// and the best peer's in [the peers' highest Pass, their highest Fail),
// so the true ratio is above lo and below hi (lo 0 and hi +Inf when a
// bracket is open). PeerGoodputRatio is the ratio of the two Passes, the
// highest rates each met: a point between them that depends on where the
// swept and bisected rates fell.
func (g GoalRow) PeerGoodputRange() (lo, hi float64) {
	kv := g.figures("kv")
	var peers [][2]float64
	for _, f := range g.Peers {
		if f.Mode != "kv" && f.Mode != "round-robin" && f.Ran {
			peers = append(peers, [2]float64{f.Pass, f.Fail})
		}
	}
	return peerRatioRange(kv.Pass, kv.Fail, peers)
}

// peerRatioRange is PeerGoodputRange from kv's bracket and the peers'.
func peerRatioRange(kvPass, kvFail float64, peers [][2]float64) (lo, hi float64) {
	bestPass, bestFail := 0.0, 0.0
	for _, p := range peers {
		bestPass, bestFail = max(bestPass, p[0]), max(bestFail, p[1])
	}
	if len(peers) == 0 {
		return 0, math.Inf(1)
	}
	lo, hi = 0, math.Inf(1)
	if !math.IsInf(bestFail, 1) && bestFail > 0 {
		lo = kvPass / bestFail
	}
	if bestPass > 0 {
		hi = kvFail / bestPass
	}
	return lo, hi
}

// PeerGoodputX12 says whether kv's goodput is at least 1.2 times the best
// peer's, and whether the brackets decide it (settled): it holds for any
// goodputs within them (lo >= 1.2) or for none (hi <= 1.2). Unsettled, ok
// is the Passes' ratio's verdict, a point that the rates swept decide.
func (g GoalRow) PeerGoodputX12() (ok, settled bool) {
	lo, hi := g.PeerGoodputRange()
	switch {
	case lo >= goalPeerGoodput:
		return true, true
	case hi <= goalPeerGoodput:
		return false, true
	}
	return g.PeerGoodputRatio() >= goalPeerGoodput, false
}

// SettlePeerRatio runs kv and the peers whose goodput could be the best at
// the middles of their goodput brackets, at most rounds times, until the
// brackets decide whether kv's goodput is at least ratio times the best
// peer's (see PeerGoodputX12): after the sweep's bisection the brackets
// are about 10% wide, so a verdict within that of the line is decided by
// where the rates fell, not by the runs. A peer takes part while its
// bracket reaches above the best peer's highest Pass (it may be the best)
// and above kv's Pass over ratio (it keeps the verdict open).
func SettlePeerRatio(trace []Request, cfg Config, results []Result, slo Objectives, ratio float64, rounds, parallel int) ([]Result, error) {
	peers := PeerModes[:3]
	round := 0
	return runRounds(trace, cfg, results, parallel, func(results []Result) []job {
		if round >= rounds {
			return nil
		}
		round++
		kvPass, kvFail := bracket(results, "kv", slo)
		var brackets [][2]float64
		for _, m := range peers {
			if slices.ContainsFunc(results, func(x Result) bool { return x.Mode == m }) {
				p, f := bracket(results, m, slo)
				brackets = append(brackets, [2]float64{p, f})
			}
		}
		lo, hi := peerRatioRange(kvPass, kvFail, brackets)
		if lo >= ratio || hi <= ratio {
			return nil
		}
		bestPass := 0.0
		for _, b := range brackets {
			bestPass = max(bestPass, b[0])
		}
		var jobs []job
		add := func(mode string, pass, fail float64) {
			if mid := round3((pass + fail) / 2); pass > 0 && mid > pass && mid < fail {
				jobs = append(jobs, job{mode: mode, rate: mid})
			}
		}
		add("kv", kvPass, kvFail)
		for _, m := range peers {
			p, f := bracket(results, m, slo)
			if f > bestPass && ratio*f > kvPass && slices.ContainsFunc(results, func(x Result) bool { return x.Mode == m }) {
				add(m, p, f)
			}
		}
		return jobs
	})
}

// ChainRatio is kv's TTFT p90 over the chain floor's at the default rate
// (+Inf without a chain floor).
func (g GoalRow) ChainRatio(mode string) float64 {
	f := g.figures(mode)
	if g.Chain <= 0 || !f.Ran {
		return math.Inf(1)
	}
	return float64(f.TTFT[1]) / float64(g.Chain)
}

// ChainReached says some compared policy's TTFT p90 is within 1.5 times
// the chain floor's at the default rate.
func (g GoalRow) ChainReached() bool {
	for _, m := range comparedModes {
		if g.ChainRatio(m) <= goalChainRatio {
			return true
		}
	}
	return false
}

// ChainOK says kv's TTFT p90 is within 1.5 times the chain floor's.
func (g GoalRow) ChainOK() bool { return g.ChainRatio("kv") <= goalChainRatio }

// writePeerGoals prints the peer tables after the goal table: one row per
// trace of each mode's figures with kv's ratio to the best peer and the
// verdicts, then every mode's TTFT percentiles, then the counts.
func writePeerGoals(b *strings.Builder, rows []GoalRow, defaultRate float64) {
	if len(rows) == 0 || len(rows[0].Peers) == 0 {
		return
	}
	fmt.Fprintf(b, "\nkv against the peers' default policies at x%g (%s; round-robin for scale): kv >= the best peer on hit rate, TTFT p90 and goodput within the seed spread (spread: the range over the seeds run, kv's and the best peer's, the larger; goodput is measured again with each seed over the rate scales its sweep ran); kv goodput >= %gx the best peer's on at least half the traces; kv TTFT p90 <= %gx the chain floor's p90 where any policy reaches that (none: no policy does; reported, not judged); goodput kv/best: the ratio of the highest rates kv and the best peer met, then the range the true ratio can take within the goodput brackets (a verdict with ?: the brackets do not decide it, the ratio of the rates met gives it)\n",
		defaultRate, strings.Join(PeerModes[:3], ", "), goalPeerGoodput, goalChainRatio)
	head := strings.Join(comparedModes, " / ")
	fmt.Fprintf(b, "\n| trace | hit %s | kv/best | hit spread pts (kv, best) | hit | TTFT p90 ms %s | kv/best | p90 spread ms (kv, best) | ttft | goodput %s | kv/best (best; range) | goodput spread (kv, best) | goodput | >= %gx | chain p90 ms | kv p90/chain | best p90/chain | chain |\n",
		head, head, head, goalPeerGoodput)
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var met [4]int
	judged, undecided := 0, 0
	for _, g := range rows {
		kv := g.figures("kv")
		var hits, p90s, goods []string
		for _, m := range comparedModes {
			f := g.figures(m)
			if !f.Ran {
				hits, p90s = append(hits, "-"), append(p90s, "-")
			} else {
				hits, p90s = append(hits, fmt.Sprintf("%.3f", f.HitRate)), append(p90s, ms(f.TTFT[1]))
			}
			goods = append(goods, fmtBracket(f.Pass, f.Fail))
		}
		bh, _ := g.BestHit()
		bt, _ := g.BestTTFT()
		ratio := func(a, b float64) string {
			if b <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2fx", a/b)
		}
		gv := verdict(g.PeerGoodputOK())
		if !g.PeerGoodputSettled() {
			gv += " ?"
		}
		x12, x12Settled := g.PeerGoodputX12()
		oks := []bool{g.PeerHitOK(), g.PeerTTFTOK(), g.PeerGoodputOK(), x12 && x12Settled}
		for i, ok := range oks {
			if ok {
				met[i]++
			}
		}
		xv := verdict(x12)
		if !x12Settled {
			xv += " ?"
			undecided++
		}
		lo, hi := g.PeerGoodputRange()
		cv := "none"
		switch {
		case g.ChainOK():
			cv = "ok"
		case g.ChainReached():
			cv = "FAIL"
		}
		if cv != "none" {
			judged++
		}
		chain, kvChain, bestChain := "-", "-", "-"
		if g.Chain > 0 {
			chain = ms(g.Chain)
			kvChain = fmt.Sprintf("%.2fx", g.ChainRatio("kv"))
			best := math.Inf(1)
			for _, m := range comparedModes {
				best = min(best, g.ChainRatio(m))
			}
			bestChain = fmt.Sprintf("%.2fx", best)
		}
		bg, _ := g.BestGoodput()
		fmt.Fprintf(b, "| %s | %s | %s (%s) | %.2f, %.2f | %s | %s | %s (%s) | %s, %s | %s | %s | %s (%s; %s-%s) | %s, %s | %s | %s | %s | %s | %s | %s |\n",
			g.Trace, strings.Join(hits, " / "), ratio(kv.HitRate, bh.HitRate), bh.Mode, kv.HitSpread, bh.HitSpread, verdict(oks[0]),
			strings.Join(p90s, " / "), ratio(float64(kv.TTFT[1]), float64(bt.TTFT[1])), bt.Mode, ms(kv.TTFTSpread), ms(bt.TTFTSpread), verdict(oks[1]),
			strings.Join(goods, " / "), fmtPeerRatio(g.PeerGoodputRatio()), bestGoodputMode(g), fmtRangeEnd(lo), fmtRangeEnd(hi), fmtGoodSpread(kv), fmtGoodSpread(bg), gv, xv,
			chain, kvChain, bestChain, cv)
	}
	fmt.Fprintf(b, "\nTTFT p50 / p90 / p99 ms at x%g\n\n| trace | %s |\n|---|%s\n", defaultRate, strings.Join(comparedModes, " | "), strings.Repeat("---|", len(comparedModes)))
	for _, g := range rows {
		cells := []string{g.Trace}
		for _, m := range comparedModes {
			f := g.figures(m)
			if !f.Ran {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, ms(f.TTFT[0])+" / "+ms(f.TTFT[1])+" / "+ms(f.TTFT[2]))
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	// Why kv's hit rate is below the best peer's where it is: the blocks
	// its own choices gave up, against the gap.
	first := true
	for _, g := range rows {
		kv, best := g.figures("kv"), Figures{}
		var ok bool
		if best, ok = g.BestHit(); !ok || !kv.Ran || kv.HitRate >= best.HitRate {
			continue
		}
		if first {
			b.WriteString("\n")
			first = false
		}
		fmt.Fprintf(b, "%s: kv's hit rate is %.2f points below %s's; kv sent %d requests away from the worker it saw caching most of their prompt, giving up %.2f points (%s: %d requests, %.2f points)\n",
			g.Trace, 100*(best.HitRate-kv.HitRate), best.Mode, kv.SentAway, 100*kv.GaveUp, best.Mode, best.SentAway, 100*best.GaveUp)
	}
	// What bounds the goodputs where kv's is not 1.2x the best peer's:
	// which objective each of the two missed at the lowest rate above
	// its goodput.
	first = true
	for _, g := range rows {
		if x12, settled := g.PeerGoodputX12(); x12 && settled {
			continue
		}
		kv, best := g.figures("kv"), Figures{}
		var ok bool
		if best, ok = g.BestGoodput(); !ok || kv.Pass <= 0 {
			continue
		}
		if first {
			b.WriteString("\n")
			first = false
		}
		fmt.Fprintf(b, "%s: kv's goodput is %s, %gx %s's x%s is x%s; missed above the goodput: %s; %s\n", g.Trace, fmtBracket(kv.Pass, kv.Fail),
			goalPeerGoodput, best.Mode, fmtRate(best.Pass), fmtRate(goalPeerGoodput*best.Pass), boundBy(kv), boundBy(best))
	}
	half := (len(rows) + 1) / 2
	fmt.Fprintf(b, "\npeer goals met on %d traces: hit >= best peer %d, ttft p90 <= best peer %d, goodput >= best peer %d, goodput >= %gx best peer %d (goal: at least %d, %s; %d more undecided by the goodput brackets)\n",
		len(rows), met[0], met[1], met[2], goalPeerGoodput, met[3], half, verdict(met[3] >= half), undecided)
	chainMet := 0
	var none []string
	for _, g := range rows {
		if g.ChainOK() {
			chainMet++
		} else if !g.ChainReached() {
			none = append(none, g.Trace)
		}
	}
	fmt.Fprintf(b, "kv TTFT p90 <= %gx chain floor: %d of the %d traces where some policy reaches it\n", goalChainRatio, chainMet, judged)
	if len(none) > 0 {
		fmt.Fprintf(b, "no policy within %gx of the chain floor on %d traces: %s\n", goalChainRatio, len(none), strings.Join(none, ", "))
	}
}

// boundBy says what f's mode missed at the lowest rate above its goodput.
func boundBy(f Figures) string {
	if f.Missed == "" {
		return f.Mode + " ran no rate above its goodput"
	}
	return fmt.Sprintf("%s at x%s: %s", f.Mode, fmtRate(f.Fail), f.Missed)
}

// fmtGoodSpread prints a mode's goodput range over the seeds, "x" and
// its one value when the seeds agree.
func fmtGoodSpread(f Figures) string {
	if f.GoodLo == f.GoodHi {
		return fmt.Sprintf("x%g", f.GoodLo)
	}
	return fmt.Sprintf("x%g-x%g", f.GoodLo, f.GoodHi)
}

func bestGoodputMode(g GoalRow) string {
	if f, ok := g.BestGoodput(); ok {
		return f.Mode
	}
	return "-"
}

// fmtRangeEnd prints an end of PeerGoodputRange.
func fmtRangeEnd(x float64) string {
	if math.IsInf(x, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.2fx", x)
}

func fmtPeerRatio(x float64) string {
	switch {
	case x == 0:
		return "-"
	case math.IsInf(x, 1):
		return "inf"
	}
	return fmt.Sprintf("%.2fx", x)
}
