// Command mocker-engine-bench drives the mocker engine on a simulated clock
// and prints what its timing model predicts for a closed-loop workload at
// several concurrencies, the CPU cost of a step, and the cost of hashing KV
// blocks.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/bench/enginebench"
)

func main() {
	var cfg enginebench.Config
	fs := flag.NewFlagSet("mocker-engine-bench", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := enginebench.Run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mocker-engine-bench:", err)
		os.Exit(1)
	}
}
