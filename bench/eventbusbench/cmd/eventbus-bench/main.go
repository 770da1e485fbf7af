// Command eventbus-bench prints publish -> deliver throughput and latency of
// the eventbus next to NATS JetStream used directly, on one embedded
// nats-server with file storage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/bench/eventbusbench"
)

// latencyRounds is how many turns the latency paths take.
const latencyRounds = 20

func main() {
	events := flag.Int("events", 100_000, "events per throughput run")
	batch := flag.Int("batch", 500, "events per published batch")
	inFlight := flag.Int("in-flight", 16, "batches published and not yet acknowledged")
	samples := flag.Int("samples", 2000, "events per latency run, one at a time")
	runs := flag.Int("runs", 3, "throughput runs per row, alternating between the paths; the table gives their median and range")
	flag.Parse()
	if *runs < 1 || *events < 1 || *batch < 1 || *inFlight < 1 || *samples < latencyRounds {
		fmt.Fprintf(os.Stderr, "eventbus-bench: -runs, -events, -batch and -in-flight must be positive and -samples at least %d\n", latencyRounds)
		os.Exit(2)
	}
	if err := run(*events, *batch, *inFlight, *samples, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "eventbus-bench:", err)
		os.Exit(1)
	}
}

func run(events, batch, inFlight, samples, runs int) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "path\teventbus-NATS link\tmsg ids\tevents\tbytes\tbatch\tevents/s\tmin-max\tp50\tp99\t\n")
	var ratios []string
	// embedded: the eventbus's default, its own nats-server reached in
	// process; tcp: NATS_SERVER set, a nats-server reached over TCP.
	for _, embedded := range []bool{true, false} {
		link := "tcp"
		if embedded {
			link = "in-process"
		}
		ratio, err := table(w, link, embedded, events, batch, inFlight, samples, runs)
		if err != nil {
			return err
		}
		ratios = append(ratios, fmt.Sprintf("%s %.2fx", link, ratio))
	}
	w.Flush()
	fmt.Printf("latency: one event at a time, publish -> deliver, %d samples per path in %d alternating rounds; p50 eventbus / direct: %s\n", samples, latencyRounds, strings.Join(ratios, ", "))
	return nil
}

// table prints the rows of one environment and returns the p50 latency
// ratio of the eventbus to direct JetStream.
func table(w io.Writer, link string, embedded bool, events, batch, inFlight, samples, runs int) (float64, error) {
	dir, err := eventbusbench.TempDir()
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	env, err := eventbusbench.Start(dir, embedded, slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, err
	}
	defer env.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	paths := []eventbusbench.Path{eventbusbench.ViaEventbus, eventbusbench.DirectNATS}
	type row struct {
		path  eventbusbench.Path
		dedup bool
		rates []float64 // sorted
	}
	var rows []row
	for _, dedup := range []bool{true, false} {
		rates := map[eventbusbench.Path][]float64{}
		for range runs {
			for _, p := range paths {
				// A short warm-up, so that each run starts with warm connections.
				if _, err := env.Throughput(ctx, p, min(events, 10*batch), batch, inFlight, dedup); err != nil {
					return 0, err
				}
				rate, err := env.Throughput(ctx, p, events, batch, inFlight, dedup)
				if err != nil {
					return 0, err
				}
				rates[p] = append(rates[p], rate)
			}
		}
		for _, p := range paths {
			slices.Sort(rates[p])
			rows = append(rows, row{p, dedup, rates[p]})
		}
	}
	// Latency in rounds that alternate between the paths, so that the drift
	// of a shared machine weighs on both alike.
	lats, err := env.Latencies(ctx, paths, samples, latencyRounds)
	if err != nil {
		return 0, err
	}
	p50s := map[eventbusbench.Path]time.Duration{}
	for _, r := range rows {
		p50, p99 := "-", "-"
		if lat := lats[r.path]; r.dedup {
			p50s[r.path] = eventbusbench.Percentile(lat, 0.5)
			p50 = p50s[r.path].Round(time.Microsecond).String()
			p99 = eventbusbench.Percentile(lat, 0.99).Round(time.Microsecond).String()
		}
		l := link
		if r.path == eventbusbench.DirectNATS {
			l = "-"
		}
		median := r.rates[len(r.rates)/2]
		if len(r.rates)%2 == 0 {
			median = (r.rates[len(r.rates)/2-1] + median) / 2
		}
		spread := fmt.Sprintf("%.0f-%.0f", r.rates[0], r.rates[len(r.rates)-1])
		fmt.Fprintf(w, "%s\t%s\t%v\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t\n", r.path, l, r.dedup, events, eventbusbench.EventSize, batch, median, spread, p50, p99)
	}
	return float64(p50s[eventbusbench.ViaEventbus]) / float64(p50s[eventbusbench.DirectNATS]), nil
}
