package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/bench/frontendbench"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// overloadOptions shape frontend-bench --overload.
type overloadOptions struct {
	workers   int
	speedup   float64
	threshold time.Duration
	duration  time.Duration
	// flood is how long the 10x flood sends (0: 3x duration; negative:
	// none).
	flood time.Duration
	// runs is how many times each flooded scenario runs, each on a stack
	// of its own: the goals are read over the runs (least, median,
	// largest), since on a shared machine one run is one sample of the
	// load.
	runs int
	// seed is the flows' arrivals and prompts (OverloadConfig.Seed): 0
	// evenly spaced, another a Poisson process of its own.
	seed uint64
	// csv, when set, is a file to write every request of every scenario
	// to (frontendbench.RequestCSVHeader), with the frontend's side of
	// each (frontendbench.OverloadConfig.Record).
	csv string
}

// runOverload measures admission control: the fleet's capacity, then each
// scenario with admission control off and on, side by side.
//
//   - tenants: tenant A floods at 3x the capacity, tenant B sends at 0.2x,
//     both in band 0, through one frontend;
//   - bands: a low band (0) floods at 3x beside a high band (10) at 0.1x;
//   - tenants, 2 frontends: as tenants, A's flood split over two frontend
//     replicas, B on the first;
//   - flood alone: A as in tenants with no other tenant: the fleet's
//     throughput under admission control with no room kept, beside which
//     A's and B's in tenants say what the rooms kept for B cost the flood;
//   - flood 10x: tenant A at 10x the capacity for 3x as long, past the
//     frontend's --queue-timeout (set to the other flows' duration), B at
//     0.2x: what is shed (503 with Retry-After, by timeout or a full
//     queue), and whether the memory stays bounded.
//
// The idle rows are B and the high band alone at their rates, for as long
// as the runs of a flooded scenario together. The goals compare the p90
// of a flow's requests under the flood, over every run, with its idle p90.
func runOverload(o overloadOptions) error {
	ctx := context.Background()
	var csv *os.File
	if o.csv != "" {
		f, err := os.Create(o.csv)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := fmt.Fprintln(f, frontendbench.RequestCSVHeader); err != nil {
			return err
		}
		csv = f
	}
	// Run number run of a scenario draws its arrivals and prompts from a
	// seed of its own (frontendbench.RunSeed); the idle flows and the 10x
	// flood are run 0's.
	start := func(frontends int, admission bool, run int) (*frontendbench.OverloadEnv, error) {
		return frontendbench.StartOverload(frontendbench.OverloadConfig{Workers: o.workers, Speedup: o.speedup, Frontends: frontends,
			Admission: admission, TTFTThreshold: o.threshold, Seed: frontendbench.RunSeed(o.seed, run), Record: csv != nil})
	}
	if o.flood == 0 {
		o.flood = 3 * o.duration
	}
	o.runs = max(o.runs, 1)
	// Admission is off while the capacity and the idle figures are
	// measured (the threshold is not known yet).
	env, err := start(1, false, 0)
	if err != nil {
		return err
	}
	capacity := env.Capacity(ctx, 8*o.workers, o.duration)
	fmt.Printf("fleet: %d mockers at --speedup-ratio %g, prompts of %d words, max_tokens %d: capacity %.1f req/s (closed loop, %d in flight, %v)\n",
		o.workers, o.speedup, frontendbench.PromptWords, frontendbench.OverloadTokens, capacity, 8*o.workers, o.duration)
	if capacity <= 0 {
		env.Close()
		return fmt.Errorf("no request completed while measuring the capacity")
	}
	// Long enough for every request queued when the flows stop to be
	// answered: released, or shed at the frontends' --queue-timeout.
	grace := max(3*o.duration, frontend.DefaultQueueTimeout+o.duration)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "scenario\tadmission\tflow\trate req/s\tserved req/s\tTTFT p50\tTTFT p90\tcompleted\tshed\terrors\tpeak heap MiB\tlate ms\trun\t\n")
	run := 0
	var csvErr error
	row := func(scenario, admission string, flows []frontendbench.Flow, rs []frontendbench.FlowResult, env *frontendbench.OverloadEnv) {
		if csv != nil && csvErr == nil {
			csvErr = frontendbench.WriteRequestCSV(csv, scenario, admission, run+1, flows, rs)
		}
		late := "-"
		if ms, n := env.Lateness(); n > 0 {
			late = fmt.Sprintf("%.0f", ms)
		}
		for i, r := range rs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%.2f\t%v\t%v\t%d\t%d\t%d\t%.0f\t%s\t%d\t\n", scenario, admission, r.Name, flows[i].Rate, r.Served,
				round(frontendbench.P(r.TTFT, 50)), round(frontendbench.P(r.TTFT, 90)), r.Completed, r.Shed, r.Errors+r.RateLimited, float64(env.PeakHeap())/(1<<20), late, run+1)
		}
	}
	b := frontendbench.Flow{Name: "B", Tenant: "B", Rate: 0.2 * capacity, Frontends: []int{0}}
	high := frontendbench.Flow{Name: "high", Tenant: "H", Priority: 10, Rate: 0.1 * capacity, Frontends: []int{0}}
	// The idle flows send for as long as each flooded scenario does over
	// all its runs, so that the idle p90 is of as many requests as the
	// flooded one it is compared with.
	idle := map[string]time.Duration{}
	idleTTFT := map[string][]time.Duration{}
	for _, f := range []frontendbench.Flow{b, high} {
		env.ResetPeak()
		rs := env.RunFlows(ctx, []frontendbench.Flow{f}, time.Duration(o.runs)*o.duration, grace)
		row("idle", "-", []frontendbench.Flow{f}, rs, env)
		idle[f.Name] = frontendbench.P(rs[0].TTFT, 90)
		idleTTFT[f.Name] = rs[0].TTFT
	}
	env.Close()
	if o.threshold == 0 {
		// The fleet's objective, as an operator would set it from the
		// goals: the TTFT p90 a request may have under load, half as long
		// again as an idle request's p90. The goals are each flow's own
		// (B's, the high band's), and one threshold serves both: the
		// lower, or the router would let the other flow's requests be
		// predicted past its goal (with Poisson arrivals B's idle p90 is
		// its own bursts queueing on the idle fleet, longer than the
		// high band's at half the rate).
		lowest := idle["B"]
		if h := idle["high"]; h > 0 && (lowest == 0 || h < lowest) {
			lowest = h
		}
		o.threshold = lowest * 3 / 2
	}
	// under are the TTFT p90 under the floods, a list of the runs' each.
	under := map[string][]time.Duration{}
	// pooled are the TTFTs under the floods, every run's together: with a
	// flow of a few requests a run (B at 0.2x the capacity, the high band
	// at 0.1x), one run's p90 is its largest or second largest, and the
	// pooled p90 is the flow's p90 over every run.
	pooled := map[string][]time.Duration{}
	// served are the flows' served rates in req/s, a list of the runs'
	// each, by scenario, admission and flow.
	served := map[string][]float64{}
	for run = range o.runs {
		for _, frontends := range []int{1, 2} {
			for _, admission := range []bool{false, true} {
				env, err := start(frontends, admission, run)
				if err != nil {
					return err
				}
				on := map[bool]string{false: "off", true: "on"}[admission]
				a := frontendbench.Flow{Name: "A", Tenant: frontendbench.FloodTenant, Rate: 3 * capacity, Frontends: []int{0}}
				scen := "tenants"
				if frontends == 2 {
					a.Frontends, scen = []int{0, 1}, "tenants, 2 frontends"
				}
				flows := []frontendbench.Flow{a, b}
				env.ResetPeak()
				rs := env.RunFlows(ctx, flows, o.duration, grace)
				row(scen, on, flows, rs, env)
				under[scen+" "+on+" B"] = append(under[scen+" "+on+" B"], frontendbench.P(rs[1].TTFT, 90))
				served[scen+" "+on+" A"] = append(served[scen+" "+on+" A"], rs[0].Served)
				served[scen+" "+on+" B"] = append(served[scen+" "+on+" B"], rs[1].Served)
				served[scen+" "+on+" A drained"] = append(served[scen+" "+on+" A drained"], rs[0].Drained)
				pooled[scen+" "+on+" B"] = append(pooled[scen+" "+on+" B"], rs[1].TTFT...)
				if frontends == 1 {
					low := frontendbench.Flow{Name: "low", Tenant: frontendbench.FloodTenant, Rate: 3 * capacity, Frontends: []int{0}}
					flows := []frontendbench.Flow{low, high}
					env.ResetPeak()
					rs := env.RunFlows(ctx, flows, o.duration, grace)
					row("bands", on, flows, rs, env)
					under["bands "+on+" high"] = append(under["bands "+on+" high"], frontendbench.P(rs[1].TTFT, 90))
					pooled["bands "+on+" high"] = append(pooled["bands "+on+" high"], rs[1].TTFT...)
					alone := []frontendbench.Flow{a}
					env.ResetPeak()
					rs = env.RunFlows(ctx, alone, o.duration, grace)
					row("flood alone", on, alone, rs, env)
					served["flood alone "+on+" A"] = append(served["flood alone "+on+" A"], rs[0].Served)
					served["flood alone "+on+" A drained"] = append(served["flood alone "+on+" A drained"], rs[0].Drained)
				}
				env.Close()
			}
		}
	}
	run = 0
	var flood []string
	if o.flood > 0 {
		for _, admission := range []bool{false, true} {
			env, err := frontendbench.StartOverload(frontendbench.OverloadConfig{Workers: o.workers, Speedup: o.speedup, Frontends: 1,
				Admission: admission, TTFTThreshold: o.threshold, QueueTimeout: o.duration, Seed: o.seed, Record: csv != nil})
			if err != nil {
				return err
			}
			on := map[bool]string{false: "off", true: "on"}[admission]
			a := frontendbench.Flow{Name: "A", Tenant: frontendbench.FloodTenant, Rate: 10 * capacity, Frontends: []int{0}}
			flows := []frontendbench.Flow{a, b}
			env.ResetPeak()
			rs := env.RunFlows(ctx, flows, o.flood, grace)
			row("flood 10x", on, flows, rs, env)
			for _, r := range rs {
				if r.Shed > 0 {
					flood = append(flood, fmt.Sprintf("  admission %s, %s: shed %d (%d past --queue-timeout, %d of a full queue), Retry-After %s",
						on, r.Name, r.Shed, r.ShedTimeout, r.Shed-r.ShedTimeout, spread(r.RetryAfter)))
				}
			}
			env.Close()
		}
	}
	w.Flush()
	if csvErr != nil {
		return fmt.Errorf("--overload-csv: %w", csvErr)
	}
	if len(flood) > 0 {
		fmt.Printf("flood 10x: A at 10x the capacity for %v, frontends' --queue-timeout %v:\n", o.flood, o.duration)
		for _, l := range flood {
			fmt.Println(l)
		}
	}
	fmt.Printf("goals (TTFT p90 under the flood within 1.5x of idle): the p90 of every run's requests together against the idle p90 (as many requests);\n")
	fmt.Printf("  beside it, the %d runs' own p90s (median, least..largest) and how many met it\n", o.runs)
	for _, g := range []struct{ name, key, idle string }{
		{"tenant B, 1 frontend", "tenants", "B"}, {"high band, 1 frontend", "bands", "high"}, {"tenant B, 2 frontends", "tenants, 2 frontends", "B"},
	} {
		for _, on := range []string{"off", "on"} {
			key := g.key + " " + on + " " + g.idle
			runs, base := slices.Clone(under[key]), idle[g.idle]
			slices.Sort(runs)
			if len(runs) == 0 {
				continue
			}
			got := frontendbench.P(pooled[key], 90)
			ratio := func(d time.Duration) float64 { return float64(d) / float64(max(base, 1)) }
			verdict := "met"
			if base == 0 || got == 0 || got > base*3/2 {
				verdict = "NOT met"
			}
			met := 0
			for _, d := range runs {
				if base > 0 && d <= base*3/2 {
					met++
				}
			}
			fmt.Printf("  %-24s admission %-3s  p90 %10v of %3d vs idle %10v of %3d  %.2fx  %-7s  runs: %.2fx (%.2fx..%.2fx), %d of %d met\n", g.name, on,
				round(got), len(pooled[key]), round(base), len(idleTTFT[g.idle]), ratio(got), verdict,
				ratio(runs[len(runs)/2]), ratio(runs[0]), ratio(runs[len(runs)-1]), met, len(runs))
		}
	}
	fmt.Printf("served req/s (runs' least..largest), admission on: A alone %s; beside B, 1 frontend: A %s, B %s; 2 frontends: A %s, B %s\n",
		spreadRate(served["flood alone on A"]), spreadRate(served["tenants on A"]), spreadRate(served["tenants on B"]),
		spreadRate(served["tenants, 2 frontends on A"]), spreadRate(served["tenants, 2 frontends on B"]))
	fmt.Printf("  A's queue drained at (req/s once the flows stopped sending), admission on: alone %s; beside B, 1 frontend %s, 2 frontends %s\n",
		spreadRate(served["flood alone on A drained"]), spreadRate(served["tenants on A drained"]), spreadRate(served["tenants, 2 frontends on A drained"]))
	arrivals := "evenly spaced"
	if o.seed != 0 {
		arrivals = fmt.Sprintf("Poisson arrivals and prompts of --overload-seed %d, run r's of seed %d+r", o.seed, o.seed)
	}
	fmt.Printf("flows are open loop (%s) for %v, then %v for the answers; shed = 503 with Retry-After; errors = any other answer or none in time\n", arrivals, o.duration, grace)
	fmt.Printf("router --queue-ttft-threshold %v; peak heap is the whole stack's (one process), sampled every 100 ms\n", o.threshold)
	fmt.Printf("late ms: how much later than the router predicted first tokens came at the run's end, as its saturation counts it (its %g quantile over the last %d within the threshold)\n",
		scheduler.LateQuantile, scheduler.LateWindow)
	return nil
}

// spreadRate is the least and largest of rates, "-" for none.
func spreadRate(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f..%.2f", slices.Min(vs), slices.Max(vs))
}

// spread is the least, median and largest of Retry-After values in
// seconds.
func spread(vs []int) string {
	if len(vs) == 0 {
		return "-"
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return fmt.Sprintf("%d..%d s (median %d)", s[0], s[len(s)-1], s[len(s)/2])
}
