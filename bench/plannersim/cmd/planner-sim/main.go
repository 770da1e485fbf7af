// Command planner-sim runs the planner against simulated engines and
// compares it with static pools (see package plannersim); -h lists the
// knobs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/bench/plannersim"
)

func main() {
	if err := plannersim.Command(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "planner-sim:", err)
		}
		os.Exit(2)
	}
}
