package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/bench/frontendbench"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// runAdmissionCost measures what admission control adds to the time to
// first token below saturation, runs times, each run on a stack of its own
// (tcp): samples requests through a frontend with admission control on and
// as many through one with it off, on the same router and mocker,
// alternating. The odd runs send the off frontend's request first in each
// pair, so that an order effect (the second of two requests finding the
// worker busier or its caches warmer) falls on each side in half the runs.
//
// One run's p50 difference is one sample of the stack and the machine's
// load at that moment: the difference is read as the median of the runs'
// (with the least and largest beside it) and as the difference of the
// pooled p50s, every run's requests together.
func runAdmissionCost(samples, tokens, runs int) error {
	ctx := context.Background()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "run\tfirst in a pair\tTTFT p50 on\tTTFT p50 off\tadded\t\n")
	var diffs []time.Duration
	var allOn, allOff []time.Duration
	for run := range runs {
		env, err := frontendbench.Start(transport.PlaneTCP)
		if err != nil {
			return err
		}
		first := "on"
		var on, off []time.Duration
		if run%2 == 0 {
			on, off, err = frontendbench.LatencyPair(ctx, samples, tokens, env.Frontend, env.FrontendNoAdmission)
		} else {
			first = "off"
			off, on, err = frontendbench.LatencyPair(ctx, samples, tokens, env.FrontendNoAdmission, env.Frontend)
		}
		env.Close()
		if err != nil {
			return fmt.Errorf("run %d: %w", run+1, err)
		}
		on50, off50 := frontendbench.Percentile(on, 50), frontendbench.Percentile(off, 50)
		diffs = append(diffs, on50-off50)
		allOn, allOff = append(allOn, on...), append(allOff, off...)
		fmt.Fprintf(w, "%d\t%s\t%v\t%v\t%v\t\n", run+1, first, us(on50), us(off50), us(on50-off50))
	}
	w.Flush()
	slices.Sort(diffs)
	med := diffs[len(diffs)/2]
	if len(diffs)%2 == 0 {
		med = (diffs[len(diffs)/2-1] + diffs[len(diffs)/2]) / 2
	}
	pooledOn, pooledOff := frontendbench.Percentile(allOn, 50), frontendbench.Percentile(allOff, 50)
	fmt.Printf("added TTFT p50 of admission control (tcp): median of %d runs %v (least %v, largest %v); pooled p50s %v on, %v off: %v\n",
		runs, us(med), us(diffs[0]), us(diffs[len(diffs)-1]), us(pooledOn), us(pooledOff), us(pooledOn-pooledOff))
	fmt.Printf("  %s\n", goal("added TTFT p50 of admission control (tcp, median run)", med, 20*time.Microsecond))
	fmt.Printf("each run: a stack of its own, %d streamed requests of %d tokens through each frontend, alternating; a few untimed warm-up requests first\n",
		samples, tokens)
	return nil
}

// us rounds d to 0.1 µs: the differences read here are a few µs.
func us(d time.Duration) time.Duration { return d.Round(100 * time.Nanosecond) }
