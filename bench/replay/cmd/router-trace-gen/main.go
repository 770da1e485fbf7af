// Command router-trace-gen writes a synthetic Mooncake-format trace (JSON
// lines: timestamp ms, input_length, output_length, hash_ids) from named
// presets and documented knobs; run it with -h for the knobs. The traces
// router-replay-bench sweeps besides the shipped one come from it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/bench/replay"
)

func main() {
	if err := replay.GenCommand(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "router-trace-gen:", err)
		}
		os.Exit(2)
	}
}
