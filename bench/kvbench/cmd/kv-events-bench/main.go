// Command kv-events-bench measures the KV event planes side by side (see
// package kvbench) and prints one row per mode: block events per second
// into one router from 8 workers, publish-to-indexed latency p50/p99, and
// the recovery time of a restarted router over about a million blocks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

	"github.com/switchyard-llm/switchyard/bench/kvbench"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
)

func main() {
	o := kvbench.DefaultOptions()
	modes := flag.String("modes", "jetstream,core,direct", "modes to measure, comma-separated")
	flag.IntVar(&o.Workers, "workers", o.Workers, "workers publishing at once")
	flag.IntVar(&o.Batches, "batches", o.Batches, "batches per worker in the throughput phase")
	flag.IntVar(&o.EventsPerBatch, "events-per-batch", o.EventsPerBatch, "stored events per batch")
	flag.IntVar(&o.BlocksPerEvent, "blocks-per-event", o.BlocksPerEvent, "new blocks per stored event")
	flag.IntVar(&o.Probes, "probes", o.Probes, "single events timed from publish to indexed")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	o.Modes = nil
	for _, s := range strings.Split(*modes, ",") {
		m, err := kvevents.Parse(s)
		if err != nil || m == kvevents.None {
			fmt.Fprintf(os.Stderr, "kv-events-bench: --modes: %q is not jetstream, core or direct\n", s)
			os.Exit(2)
		}
		o.Modes = append(o.Modes, m)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := kvbench.Run(ctx, o)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mode\tblock events/s\tCPU per 1M blocks\tpublish->indexed p50\tp99\trestart: blocks\texact after\t\n")
	for _, r := range res {
		exact := r.Restart.Round(1e6).String()
		if !r.Exact {
			exact = "NOT EXACT after " + exact
		}
		fmt.Fprintf(tw, "%s\t%.2fM\t%s\t%s\t%s\t%d\t%s\t\n", r.Mode, r.BlockEventsPerSec/1e6, r.CPUPerMBlocks.Round(1e6), r.P50.Round(1e3), r.P99.Round(1e3), r.Blocks, exact)
	}
	tw.Flush()
	fmt.Printf("(%d workers; %d batches x %d events x %d blocks each; CPU is the whole process's, every component of the plane; "+
		"jetstream restarts replay the whole stream, no snapshot)\n", o.Workers, o.Batches, o.EventsPerBatch, o.BlocksPerEvent)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kv-events-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
