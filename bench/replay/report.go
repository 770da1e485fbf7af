package replay

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Report is one trace's sweep: the results of every mode at every rate
// scale, with the trace's bounds and what the run was.
type Report struct {
	// Trace names the trace.
	Trace string
	// Requests is the trace's length.
	Requests int
	Config   Config
	Bounds   Bounds
	// SLO is the TTFT p90 a rate scale must meet to count as goodput;
	// SLOITL, when positive, the ITL p90 it must meet too.
	SLO, SLOITL time.Duration
	// Results are ordered by mode, then rate scale.
	Results []Result
	// Horizon is the finite-horizon bound at SLO (nil: computed from
	// Bounds when first needed, by HorizonBound).
	Horizon *Horizon
	// ChainFloors are ChainFloor's p50, p90 and p99 at each rate scale of
	// Results (nil: not computed; SetChainFloors fills it). Unlike the
	// cached floor it depends on the rate: arrivals closer together leave
	// less time to compute a shared prefix before the next one needs it.
	ChainFloors map[float64][3]time.Duration
}

// SetChainFloors computes the chain floor at every rate scale in Results,
// with the report's Config otherwise (the same engine timing the cached
// floor uses; the chain floor counts neither workers nor cache size, as
// it bounds any number of engines with infinite caches).
func (r *Report) SetChainFloors(trace []Request) {
	r.ChainFloors = map[float64][3]time.Duration{}
	for _, x := range r.Results {
		if _, ok := r.ChainFloors[x.RateScale]; ok {
			continue
		}
		cfg := r.Config
		cfg.RateScale = x.RateScale
		r.ChainFloors[x.RateScale] = ChainFloor(trace, cfg)
	}
}

// HorizonBound is the report's finite-horizon bound at its SLO.
func (r *Report) HorizonBound() Horizon {
	if r.Horizon == nil {
		h := r.Bounds.Horizon(r.SLO)
		r.Horizon = &h
	}
	return *r.Horizon
}

// Modes lists the report's modes in order.
func (r *Report) Modes() []string {
	var out []string
	for _, x := range r.Results {
		if !slices.Contains(out, x.Mode) {
			out = append(out, x.Mode)
		}
	}
	return out
}

// Objectives are the report's SLO and SLOITL.
func (r *Report) Objectives() Objectives { return Objectives{TTFT: r.SLO, ITL: r.SLOITL} }

// Goodput is the highest rate scale at which mode met the objectives
// (with every request served), or 0 if none did.
func (r *Report) Goodput(mode string) float64 {
	pass, _ := bracket(r.Results, mode, r.Objectives())
	return pass
}

// floorRatio is a TTFT p90 over the cached floor's p90, as the goal
// table's ratio column prints it; "-" without a floor.
func floorRatio(p90, floor time.Duration) string {
	if floor <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(p90)/float64(floor), 'f', 3, 64) + "x"
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

func pct(x, of float64) float64 {
	if of <= 0 {
		return 0
	}
	return 100 * x / of
}

// WriteTable prints the sweep as an aligned table, then goodput per mode.
func WriteTable(w io.Writer, r *Report) error {
	c := r.Config
	workers := fmt.Sprintf("%d workers", c.Workers)
	if c.ranks() > 1 {
		workers = fmt.Sprintf("%d workers of %d data-parallel ranks", c.Workers, c.ranks())
	}
	fmt.Fprintf(w, "router replay of %s: %d requests, %s x %d KV blocks of %d tokens, overlap weight %g, temperature %g\n",
		r.Trace, r.Requests, workers, c.Engine.NumGPUBlocks, c.Engine.BlockSize, c.OverlapWeight, c.Temperature)
	fmt.Fprintf(w, "bounds: reuse (infinite cache) %.3f, pooled (one LRU of %d blocks) %.3f; cached-floor TTFT p50/p90/p99 %s/%s/%s ms\n",
		r.Bounds.Reuse, c.engines()*c.Engine.NumGPUBlocks, r.Bounds.Pooled,
		ms(r.Bounds.FloorTTFT[0]), ms(r.Bounds.FloorTTFT[1]), ms(r.Bounds.FloorTTFT[2]))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The last column is the TTFT goal's ratio (--goals judges it at
	// --goals-rate), for every row: a sweep of one mode says it without
	// the goal table's other modes.
	// Before it, ITL p90 and the pools (prefill+decode workers, the share
	// of requests prefilled remotely), "-" for aggregated rows.
	fmt.Fprintln(tw, "mode\trate\thit rate\t% reuse\t% pooled\tTTFT mean ms\tp50\tp90\tp99\tE2E p50 ms\tp99\ttok/s\tspread\tdone\trejected\twall s\tITL p90 ms\tP+D\tremote\tp90/floor\t")
	for _, x := range r.Results {
		pools, remote := "-", "-"
		if x.PrefillWorkers+x.DecodeWorkers > 0 {
			pools, remote = fmt.Sprintf("%d+%d", x.PrefillWorkers, x.DecodeWorkers), fmt.Sprintf("%.2f", x.RemotePrefill)
		}
		fmt.Fprintf(tw, "%s\tx%g\t%.3f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.2f\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t\n",
			x.Mode, x.RateScale, x.HitRate, pct(x.HitRate, r.Bounds.Reuse), pct(x.HitRate, r.Bounds.Pooled),
			ms(x.TTFTMean), ms(x.TTFT[0]), ms(x.TTFT[1]), ms(x.TTFT[2]), ms(x.E2E[0]), ms(x.E2E[2]),
			x.Throughput, x.Spread, x.Completed, x.Rejected, x.Wall.Seconds(),
			ms(x.ITL[1]), pools, remote, floorRatio(x.TTFT[1], r.Bounds.FloorTTFT[1]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Engine.NumHostBlocks > 0 {
		fmt.Fprintf(w, "host tiers: pooled (one LRU of %d blocks, GPU and host) %.3f, against GPU alone %.3f and reuse %.3f\n",
			c.engines()*(c.Engine.NumGPUBlocks+c.Engine.NumHostBlocks), r.Bounds.PooledHost, r.Bounds.Pooled, r.Bounds.Reuse)
		fmt.Fprintf(w, "hit rate by tier (gpu + host, of prompt blocks), %d host blocks per engine:", c.Engine.NumHostBlocks)
		for _, x := range r.Results {
			fmt.Fprintf(w, " %s x%g %.3f + %.3f;", x.Mode, x.RateScale, x.HitRate-x.HostHitRate, x.HostHitRate)
		}
		fmt.Fprintln(w)
		fmt.Fprint(w, "blocks evicted from GPU to host / lost from host / hit on host:")
		for _, x := range r.Results {
			fmt.Fprintf(w, " %s x%g %d / %d / %d;", x.Mode, x.RateScale, x.Evicted, x.HostEvicted, x.HostHits)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "goodput (highest rate scale with %s):", r.Objectives())
	for _, m := range r.Modes() {
		fmt.Fprintf(w, " %s x%g;", m, r.Goodput(m))
	}
	fmt.Fprintln(w)
	writeSessions(w, r)
	writeAdapters(w, r)
	return writeCapacity(w, r)
}

// writeAdapters prints, for a trace whose requests carry LoRA adapters,
// each run's adapter loads and the requests routed to an engine that does
// not serve their adapter (which must be none).
func writeAdapters(w io.Writer, r *Report) {
	any := false
	for _, x := range r.Results {
		any = any || x.AdapterRequests > 0
	}
	if !any {
		return
	}
	fmt.Fprint(w, "LoRA adapter loads, and requests sent to an engine that cannot serve their adapter:")
	for _, x := range r.Results {
		fmt.Fprintf(w, " %s x%g %d loads, %d of %d;", x.Mode, x.RateScale, x.LoraLoads, x.AdapterMisrouted, x.AdapterRequests)
	}
	fmt.Fprintln(w)
}

// writeSessions prints, for a trace whose requests name their sessions,
// how many later turns each run sent away from the worker of their
// session's previous turn, and what the session modes' rule did.
func writeSessions(w io.Writer, r *Report) {
	any := false
	for _, x := range r.Results {
		any = any || x.LaterTurns > 0
	}
	if !any {
		return
	}
	fmt.Fprint(w, "later session turns routed away from their previous turn's worker:")
	for _, x := range r.Results {
		fmt.Fprintf(w, " %s x%g %d of %d;", x.Mode, x.RateScale, x.TurnsAway, x.LaterTurns)
	}
	fmt.Fprintln(w)
	for _, x := range r.Results {
		if s := x.Sessions; s != (SessionCounts{}) {
			fmt.Fprintf(w, "  %s x%g session rule: %d bound anew, %d on their bound worker, %d moved off a full one, %d off one that could not serve them\n",
				x.Mode, x.RateScale, s.New, s.Hit, s.MovedLoad, s.MovedUnavailable)
		}
	}
}

// writeCapacity prints the capacity bound, what it is made of, and each
// mode's goodput as a share of it.
func writeCapacity(w io.Writer, r *Report) error {
	c := r.Bounds.Capacity
	if math.IsInf(c.Rate, 1) {
		_, err := fmt.Fprintln(w, "capacity bound: none (the trace's requests all arrive at once, or it has no work)")
		return err
	}
	held := ""
	if c.HeldWork > 0 {
		held = fmt.Sprintf(" + %.2f ms per unit of KV usage x %d block-steps held privately while decoding / %d blocks = %.1f s",
			c.DecodeMsPerUsage, c.HeldBlockSteps, c.KVBlocks, c.HeldWork.Seconds())
	}
	fmt.Fprintf(w, "capacity bound: x%s (no router can sustain more): at x1 each engine is %.1f%% busy at best: prefill of the %d prompt tokens an infinite cache misses at %.4f ms/token (%d-token steps) and their attention (%.1f s, each request's misses squared) = %.1f s, decode of %d tokens in steps of %d at %.2f ms%s, %.1f s in all, over %d engines x %.1f s of arrivals\n",
		fmtRate(c.Rate), 100*c.Busy(1), c.UncachedTokens, c.PrefillMsPerToken, c.PrefillChunk, c.AttentionWork.Seconds(), c.PrefillWork.Seconds(),
		c.DecodeTokens, c.DecodeBatch, c.DecodeMsPerStep, held, c.DecodeWork.Seconds(), c.Workers, c.Span.Seconds())
	fmt.Fprint(w, "goodput as a share of the capacity bound:")
	for _, m := range r.Modes() {
		fmt.Fprintf(w, " %s x%g = %.0f%%;", m, r.Goodput(m), 100*c.Busy(r.Goodput(m)))
	}
	fmt.Fprintln(w)
	writeSplitCapacity(w, r)
	h := r.HorizonBound()
	switch {
	case math.IsInf(h.Rate, 1):
		fmt.Fprintf(w, "finite-horizon bound at TTFT p90 <= %s: none (no window of requests binds)\n", h.SLO)
	default:
		fmt.Fprintf(w, "finite-horizon bound at TTFT p90 <= %s: x%s (no router meets the SLO above it on this trace, its end included): %d of %d requests may miss, %d miss at any rate (their own prefill alone is longer); binding window: %d requests whose %.1f s of prefill must fit on %d engines (one of them only until the first free miss) in their %.1f s of arrivals / rate scale + the SLO; prefill only (decode may be deferred), the largest misses free\n",
			h.SLO, fmtRate(h.Rate), h.MayMiss, r.Requests, h.Forced, h.Requests, h.Work.Seconds(), c.Workers, h.Span.Seconds())
	}
	if rr := r.Goodput("round-robin"); rr > 0 {
		verdict := "within both bounds"
		switch {
		case 2*rr > h.Rate:
			verdict = "above the finite-horizon bound: kv >= 2x round-robin is out of reach for any router on this trace"
		case 2*rr > c.Rate:
			verdict = "above the capacity bound (no router sustains it) but within the finite-horizon bound: not proven out of reach on this finite trace"
		}
		fmt.Fprintf(w, "2x round-robin's goodput: x%g, %s\n", 2*rr, verdict)
	}
	return nil
}

// writeSplitCapacity prints, when the report has a disaggregated mode, the
// capacity bound of its split (SplitCapacity) and the best of every split
// of its engines, beside each disaggregated mode's goodput.
func writeSplitCapacity(w io.Writer, r *Report) {
	var modes []string
	for _, m := range r.Modes() {
		if m == "disagg" || m == "disagg-always" || m == "disagg-3-replicas" {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return
	}
	c, m := r.Bounds.Capacity, r.Config.Engine.Timing()
	p, d := r.Config.split()
	s := c.Split(m, p, d)
	fmt.Fprintf(w, "split capacity bound at %d+%d: x%s with every prompt on the prefill pool (prefill pool x%s: %d tokens at %.4f ms/token in %d-token prefill-only steps and their attention = %.1f s over %d engines; decode pool x%s: %.1f s of decode over %d engines), x%s with %.0f%% of the prompt tokens prefilled on the decode pool at %.4f ms/token\n",
		p, d, fmtRate(s.Always), fmtRate(float64(p)*c.Span.Seconds()/s.PrefillWork.Seconds()), c.UncachedTokens, s.PrefillMsPerToken, s.PrefillChunk,
		s.PrefillWork.Seconds(), p, fmtRate(float64(d)*c.Span.Seconds()/c.DecodeWork.Seconds()), c.DecodeWork.Seconds(), d,
		fmtRate(s.Auto), 100*s.LocalShare, c.PrefillMsPerToken)
	best, bestAuto := SplitCapacity{}, SplitCapacity{}
	for q := 1; q < c.Workers; q++ {
		x := c.Split(m, q, c.Workers-q)
		if x.Always > best.Always {
			best = x
		}
		if x.Auto > bestAuto.Auto {
			bestAuto = x
		}
	}
	if best.Decode > 0 {
		fmt.Fprintf(w, "best split of %d engines: x%s with every prompt on the prefill pool (at %d+%d), x%s with a local share (at %d+%d);",
			c.Workers, fmtRate(best.Always), best.Prefill, best.Decode, fmtRate(bestAuto.Auto), bestAuto.Prefill, bestAuto.Decode)
	} else {
		fmt.Fprint(w, "best split: none;")
	}
	for _, x := range modes {
		bound := s.Auto
		if x == "disagg-always" {
			bound = s.Always
		}
		fmt.Fprintf(w, " %s x%g = %.0f%% of its split's bound;", x, r.Goodput(x), 100*r.Goodput(x)/bound)
	}
	fmt.Fprintln(w)
}

// fmtRate prints a rate scale to three significant digits.
func fmtRate(x float64) string { return strconv.FormatFloat(round3(x), 'g', -1, 64) }

// CSVHeader is router-replay.csv's header. The first thirteen columns are
// a contract (checks outside the project read them), and so are
// itl_p90_ms, prefill_workers and decode_workers (0 and 0 on aggregated
// rows); more may follow, none renamed.
var CSVHeader = []string{"mode", "rate_scale", "workers", "kv_blocks", "hit_rate", "reuse_bound", "pooled_bound",
	"ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
	"trace", "overlap_weight", "e2e_p90_ms", "throughput_tok_s", "spread", "completed", "rejected", "makespan_s",
	"floor_ttft_p90_ms", "slo_ttft_p90_ms", "goodput_rate_scale", "capacity_bound_rate_scale", "horizon_bound_rate_scale",
	"chain_floor_ttft_p90_ms", "itl_p90_ms", "prefill_workers", "decode_workers", "slo_itl_p90_ms", "remote_prefill_share"}

// WriteCSV writes one row per (mode, rate scale) under CSVHeader. An
// unbounded horizon is written as +Inf; the chain floor's p90 is the row's
// rate scale's, NaN when ChainFloors lacks it.
func WriteCSV(w io.Writer, r *Report) error {
	horizon := r.HorizonBound().Rate
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	f := func(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	chainP90 := func(rate float64) string {
		if c, ok := r.ChainFloors[rate]; ok {
			return ms(c[1])
		}
		return "NaN"
	}
	c := r.Config
	for _, x := range r.Results {
		_ = cw.Write([]string{x.Mode, f(x.RateScale, -1), strconv.Itoa(c.Workers), strconv.Itoa(c.Engine.NumGPUBlocks),
			f(x.HitRate, 4), f(r.Bounds.Reuse, 4), f(r.Bounds.Pooled, 4),
			ms(x.TTFTMean), ms(x.TTFT[0]), ms(x.TTFT[1]), ms(x.TTFT[2]), ms(x.E2E[0]), ms(x.E2E[2]),
			r.Trace, f(c.OverlapWeight, -1), ms(x.E2E[1]), f(x.Throughput, 1), f(x.Spread, 3),
			strconv.Itoa(x.Completed), strconv.Itoa(x.Rejected), f(x.Makespan.Seconds(), 1),
			ms(r.Bounds.FloorTTFT[1]), ms(r.SLO), f(r.Goodput(x.Mode), -1), f(r.Bounds.Capacity.Rate, 4), f(horizon, 4),
			chainP90(x.RateScale), ms(x.ITL[1]), strconv.Itoa(x.PrefillWorkers), strconv.Itoa(x.DecodeWorkers),
			ms(r.SLOITL), f(x.RemotePrefill, 4)})
	}
	cw.Flush()
	return cw.Error()
}

// WritePNG draws two charts side by side under a caption naming the trace,
// cluster and weight: the hit rate of each mode against rate scale, with
// both bounds as dashed lines, and TTFT p90 against rate scale (log
// scale), with the SLO.
func WritePNG(w io.Writer, r *Report) error {
	const width, height = 16 * vg.Inch, 7 * vg.Inch
	modes := r.Modes()
	hit := plot.New()
	hit.Title.Text = "prefix hit rate vs both bounds"
	hit.X.Label.Text = "request rate scale"
	hit.Y.Label.Text = "hit rate (fraction of prompt blocks)"
	hit.Y.Min, hit.Y.Max = 0, 1
	ttft := plot.New()
	ttft.Title.Text = fmt.Sprintf("TTFT p90 (SLO %s)", r.SLO)
	ttft.X.Label.Text = "request rate scale"
	ttft.Y.Label.Text = "TTFT p90 (ms, log scale)"
	ttft.Y.Scale = plot.LogScale{}
	ttft.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range r.Results {
		lo, hi = min(lo, x.RateScale), max(hi, x.RateScale)
	}
	hitLegend, ttftLegend := plot.NewLegend(), plot.NewLegend()
	for i, m := range modes {
		var hp, tp plotter.XYs
		for _, x := range r.Results {
			if x.Mode == m {
				hp = append(hp, plotter.XY{X: x.RateScale, Y: x.HitRate})
				tp = append(tp, plotter.XY{X: x.RateScale, Y: max(float64(x.TTFT[1])/float64(time.Millisecond), 1)})
			}
		}
		for _, p := range []struct {
			pl  *plot.Plot
			leg *plot.Legend
			pts plotter.XYs
		}{{hit, &hitLegend, hp}, {ttft, &ttftLegend, tp}} {
			l, s, err := plotter.NewLinePoints(p.pts)
			if err != nil {
				return err
			}
			l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
			l.Width = vg.Points(1.5)
			l.Dashes = plotutil.Dashes(i / 7) // colours repeat after seven modes
			p.pl.Add(l, s)
			p.leg.Add(m, l, s)
		}
	}
	hline := func(p *plot.Plot, leg *plot.Legend, y float64, c color.Color, name string) error {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: y}, {X: hi, Y: y}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = c, []vg.Length{vg.Points(6), vg.Points(4)}, vg.Points(1.5)
		p.Add(l)
		leg.Add(name, l)
		return nil
	}
	red := color.RGBA{R: 200, A: 255}
	for _, e := range []error{
		hline(hit, &hitLegend, r.Bounds.Reuse, color.Black, fmt.Sprintf("reuse bound %.3f", r.Bounds.Reuse)),
		hline(hit, &hitLegend, r.Bounds.Pooled, red, fmt.Sprintf("pooled bound %.3f", r.Bounds.Pooled)),
		hline(ttft, &ttftLegend, float64(r.SLO)/float64(time.Millisecond), red, "SLO "+r.SLO.String()),
		hline(ttft, &ttftLegend, max(float64(r.Bounds.FloorTTFT[1])/float64(time.Millisecond), 1), color.Black,
			"cached floor p90 "+ms(r.Bounds.FloorTTFT[1])+" ms"),
	} {
		if e != nil {
			return e
		}
	}
	var ticks plot.ConstantTicks
	for _, x := range r.Results {
		if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == x.RateScale }) {
			ticks = append(ticks, plot.Tick{Value: x.RateScale, Label: "x" + strconv.FormatFloat(x.RateScale, 'g', -1, 64)})
		}
	}
	for _, p := range []*plot.Plot{hit, ttft} {
		p.Add(plotter.NewGrid())
		p.X.Min, p.X.Max = lo-0.05*(hi-lo+1), hi+0.05*(hi-lo+1)
		p.X.Tick.Marker = ticks
	}
	c := vgimg.New(width, height)
	dc := draw.New(c)
	// The caption takes the top strip; below it each chart has its legend
	// in a column of its own to the right, so no line hides under a label.
	caption := fmt.Sprintf("%s: %d requests, %d workers x %d KV blocks of %d tokens, overlap weight %g, temperature %g",
		r.Trace, r.Requests, r.Config.Workers, r.Config.Engine.NumGPUBlocks, r.Config.Engine.BlockSize, r.Config.OverlapWeight, r.Config.Temperature)
	if cr := r.Bounds.Capacity.Rate; !math.IsInf(cr, 1) {
		caption += ", capacity bound x" + fmtRate(cr)
	}
	sty := hit.Title.TextStyle
	sty.Font.Size = vg.Points(14)
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
	dc.FillText(sty, vg.Point{X: width / 2, Y: height - vg.Points(8)}, caption)
	const legendW = 2.6 * vg.Inch
	half := width / 2
	for i, p := range []struct {
		pl  *plot.Plot
		leg *plot.Legend
	}{{hit, &hitLegend}, {ttft, &ttftLegend}} {
		x0 := vg.Length(i) * half
		area := draw.Crop(dc, x0+vg.Points(8), x0+half-width, vg.Points(6), -vg.Points(34))
		p.pl.Draw(draw.Crop(area, 0, -legendW, 0, 0))
		p.leg.Top, p.leg.Left = true, true
		p.leg.XOffs, p.leg.YOffs = vg.Points(10), -vg.Points(30)
		p.leg.Draw(draw.Crop(area, area.Max.X-area.Min.X-legendW, 0, 0, 0))
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}
