// Command frontend-bench prints the frontend's overhead on each request
// plane: the latency it adds to the first token and to each following token
// compared with calling the mocker (no delays) directly over the request
// plane, and the highest sustained requests per second of each path.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/bench/frontendbench"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

func main() {
	samples := flag.Int("samples", 200, "sequential requests per latency run")
	tokens := flag.Int("tokens", 32, "tokens generated per request")
	duration := flag.Duration("duration", 2*time.Second, "length of each throughput run")
	admissionRuns := flag.Int("admission-runs", 0, "measure only what admission control adds to the TTFT below saturation: this many runs, each on a stack of its own (tcp), --samples requests through each frontend (on, off) alternating")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of each path's throughput run at concurrency 64 to <this prefix>-<plane>-<path>.pprof (go tool pprof reads them; -diff_base the direct path's to see what the frontend adds)")
	overload := flag.Bool("overload", false, "measure admission control instead: tenants and bands flooding a slowed fleet, admission off and on")
	var o overloadOptions
	flag.IntVar(&o.workers, "overload-workers", 2, "--overload: mockers")
	flag.Float64Var(&o.speedup, "overload-speedup", 0.05, "--overload: the mockers' --speedup-ratio (below 1: slower than the H100 they model, so that the simulated engines, not this machine's CPU, are what saturates)")
	flag.DurationVar(&o.threshold, "overload-ttft-threshold", 0, "--overload: the router's --queue-ttft-threshold, this fleet's TTFT objective (0: 1.5x the lower of the idle flows' TTFT p90s measured first, the goals' own objective)")
	flag.IntVar(&o.runs, "overload-runs", 1, "--overload: how many times each flooded scenario runs, each on a stack of its own (the goals give the median run and the spread)")
	flag.Uint64Var(&o.seed, "overload-seed", 0, "--overload: 0 sends every flow evenly spaced; another value sends each as a Poisson process at its rate, arrivals and prompts drawn from this seed (run r of a scenario: this seed + r)")
	flag.DurationVar(&o.duration, "overload-duration", 20*time.Second, "--overload: how long each flow sends")
	flag.DurationVar(&o.flood, "overload-flood-duration", 0, "--overload: how long the 10x flood sends, past the frontends' --queue-timeout (set to --overload-duration there); 0: 3x --overload-duration, negative: no flood")
	flag.StringVar(&o.csv, "overload-csv", "", "--overload: write every request of every scenario to this CSV file (scenario, admission, run, flow, tenant, priority, frontend, request, sent_s, status, ttft_ms, retry_after_s, and the frontend's routed_s, decided_s, worker, first_token_s, recorded through its tracing)")
	flag.Parse()
	if *admissionRuns > 0 {
		if err := runAdmissionCost(*samples, *tokens, *admissionRuns); err != nil {
			fmt.Fprintln(os.Stderr, "frontend-bench:", err)
			os.Exit(1)
		}
		return
	}
	if *overload {
		if err := runOverload(o); err != nil {
			fmt.Fprintln(os.Stderr, "frontend-bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*samples, *tokens, *duration, *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "frontend-bench:", err)
		os.Exit(1)
	}
}

func run(samples, tokens int, d time.Duration, cpuProfile string) error {
	ctx := context.Background()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "plane\tpath\tTTFT p50\tTTFT p99\tITL p50\tITL p99\treq/s (best of conc)\tconc\tCPU/req @64\t\n")
	type row struct {
		ttft50, ttft99, itl50, itl99 time.Duration
		cpu                          time.Duration
	}
	var goals, admission []string
	for _, plane := range transport.Planes() {
		env, err := frontendbench.Start(plane)
		if err != nil {
			return fmt.Errorf("%s: %w", plane, err)
		}
		rows := map[string]row{}
		for _, p := range []struct {
			name string
			fn   func(context.Context, int) (frontendbench.Timing, error)
		}{{"direct", env.Direct}, {"frontend", env.Frontend}} {
			ttft, itl, err := frontendbench.Latency(ctx, samples, tokens, p.fn)
			if err != nil {
				env.Close()
				return fmt.Errorf("%s %s: %w", plane, p.name, err)
			}
			r := row{ttft50: frontendbench.Percentile(ttft, 50), ttft99: frontendbench.Percentile(ttft, 99),
				itl50: frontendbench.Percentile(itl, 50), itl99: frontendbench.Percentile(itl, 99)}
			best, bestConc := 0.0, 0
			for _, conc := range []int{16, 64} {
				stop := func() {}
				if cpuProfile != "" && conc == 64 {
					if stop, err = startProfile(fmt.Sprintf("%s-%s-%s.pprof", cpuProfile, plane, p.name)); err != nil {
						env.Close()
						return err
					}
				}
				rps, cpu, err := frontendbench.CPUPerRequest(ctx, conc, 16, d, p.fn)
				stop()
				if err != nil {
					env.Close()
					return fmt.Errorf("%s %s throughput: %w", plane, p.name, err)
				}
				if rps > best {
					best, bestConc = rps, conc
				}
				if conc == 64 {
					r.cpu = cpu
				}
			}
			rows[p.name] = r
			fmt.Fprintf(w, "%s\t%s\t%v\t%v\t%v\t%v\t%.0f\t%d\t%v\t\n", plane, p.name, round(r.ttft50), round(r.ttft99), round(r.itl50), round(r.itl99), best, bestConc, round(r.cpu))
		}
		if plane == transport.PlaneTCP {
			// What admission control costs below saturation: the same
			// requests through a frontend with it on and one with it off,
			// alternating.
			on, off, err := frontendbench.LatencyPair(ctx, samples, tokens, env.Frontend, env.FrontendNoAdmission)
			if err != nil {
				env.Close()
				return fmt.Errorf("%s admission: %w", plane, err)
			}
			on50, off50 := frontendbench.Percentile(on, 50), frontendbench.Percentile(off, 50)
			admission = append(admission, fmt.Sprintf("admission control below saturation (tcp, %d requests each, alternating): TTFT p50 %v on, %v off",
				samples, round(on50), round(off50)))
			goals = append(goals, goal("added TTFT p50 of admission control (tcp)", on50-off50, 20*time.Microsecond))
		}
		env.Close()
		dr, fr := rows["direct"], rows["frontend"]
		fmt.Fprintf(w, "%s\tadded\t%v\t%v\t%v\t%v\t\t\t%v\t\n", plane, round(fr.ttft50-dr.ttft50), round(fr.ttft99-dr.ttft99), round(fr.itl50-dr.itl50), round(fr.itl99-dr.itl99), round(fr.cpu-dr.cpu))
		if plane == transport.PlaneTCP {
			goals = append(goals,
				goal("frontend CPU per streamed request at concurrency 64", fr.cpu-dr.cpu, 250*time.Microsecond),
				goal("added TTFT p50 (tcp)", fr.ttft50-dr.ttft50, 300*time.Microsecond),
				goal("added TTFT p99 (tcp)", fr.ttft99-dr.ttft99, 2*time.Millisecond))
		}
	}
	w.Flush()
	for _, l := range admission {
		fmt.Println(l)
	}
	fmt.Println("goals:")
	for _, g := range goals {
		fmt.Println("  " + g)
	}
	fmt.Printf("latency: %d sequential streamed requests of %d tokens per path; throughput: requests of 16 tokens, %v per concurrency level (16, 64)\n",
		samples, tokens, d)
	fmt.Println("CPU/req: process CPU (user+system) per completed request at concurrency 64; the stack runs in one process, so added = frontend and router")
	fmt.Println("direct: the request plane client calling the mocker (--no-delay); frontend: POST /v1/chat/completions stream through the frontend (kv mode, router service)")
	fmt.Println("admission: a second frontend on the same router and mocker with --admission=false; below saturation nothing is ever queued")
	fmt.Println("both paths: the same prompt with Qwen3's thinking off (the first token generated is the first a client sees); a few untimed warm-up requests first")
	return nil
}

// startProfile starts a CPU profile written to path; the returned function
// stops it and closes the file.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// goal prints one goal row: the figure, the bound and whether it is met.
func goal(name string, got, bound time.Duration) string {
	verdict := "met"
	if got > bound {
		verdict = "NOT met"
	}
	return fmt.Sprintf("%-52s %10v  goal <= %v  %s", name, round(got), bound, verdict)
}

func round(d time.Duration) time.Duration {
	switch {
	case d < 0 && d > -time.Microsecond, d >= 0 && d < time.Microsecond:
		return d
	case d < 100*time.Microsecond && d > -100*time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	}
	return d.Round(10 * time.Microsecond)
}
