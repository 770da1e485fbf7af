// Command eventbus-bench prints publish -> deliver throughput and latency of
// the eventbus next to NATS JetStream used directly, on one embedded
// nats-server with file storage.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/services/eventbus/eventbusbench"
)

func main() {
	events := flag.Int("events", 200_000, "events per throughput run")
	batch := flag.Int("batch", 500, "events per published batch")
	inFlight := flag.Int("in-flight", 16, "batches published and not yet acknowledged")
	samples := flag.Int("samples", 2000, "events per latency run, one at a time")
	flag.Parse()
	if err := run(*events, *batch, *inFlight, *samples); err != nil {
		fmt.Fprintln(os.Stderr, "eventbus-bench:", err)
		os.Exit(1)
	}
}

func run(events, batch, inFlight, samples int) error {
	dir, err := eventbusbench.TempDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env, err := eventbusbench.Start(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer env.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "path\tevents\tbytes/event\tbatch\tevents/s\tlatency p50\tlatency p99\t\n")
	p50s := map[eventbusbench.Path]time.Duration{}
	for _, p := range []eventbusbench.Path{eventbusbench.ViaEventbus, eventbusbench.DirectNATS} {
		// A short warm-up run, so that both paths start with created streams
		// and warm connections.
		if _, err := env.Throughput(ctx, p, min(events, 10*batch), batch, inFlight); err != nil {
			return err
		}
		rate, err := env.Throughput(ctx, p, events, batch, inFlight)
		if err != nil {
			return err
		}
		lat, err := env.Latency(ctx, p, samples)
		if err != nil {
			return err
		}
		p50s[p] = eventbusbench.Percentile(lat, 0.5)
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t\n", p, events, eventbusbench.EventSize, batch, rate,
			p50s[p].Round(time.Microsecond), eventbusbench.Percentile(lat, 0.99).Round(time.Microsecond))
	}
	w.Flush()
	fmt.Printf("p50 latency ratio eventbus / direct: %.2fx\n",
		float64(p50s[eventbusbench.ViaEventbus])/float64(p50s[eventbusbench.DirectNATS]))
	return nil
}
