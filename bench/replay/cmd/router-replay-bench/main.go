// Command router-replay-bench replays a Mooncake-format trace against
// simulated engines behind the router's real code, once per routing mode,
// and prints a table (also written as CSV and a PNG chart).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/bench/replay"
)

func main() {
	var cfg replay.CommandConfig
	fs := flag.NewFlagSet("router-replay-bench", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := replay.Command(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "router-replay-bench:", err)
		os.Exit(1)
	}
}
