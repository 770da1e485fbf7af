// Command transport-bench compares Switchyard's request planes (tcp, http,
// nats) with a bare loopback TCP echo (the floor) and a gRPC
// server-streaming call, all in one process with the same payloads, and
// prints one table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/switchyard-llm/switchyard/bench/transportbench"
)

func main() {
	iters := flag.Int("iters", 2000, "calls per latency measurement")
	dur := flag.Duration("duration", time.Second, "length of each frames-per-second measurement")
	frames := flag.Int("frames", 1000, "responses per call in the frames-per-second measurement")
	flag.Parse()
	if err := transportbench.Run(context.Background(), os.Stdout, *iters, *dur, *frames); err != nil {
		fmt.Fprintln(os.Stderr, "transport-bench:", err)
		os.Exit(1)
	}
}
