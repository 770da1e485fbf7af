// Command registry-bench measures the registry: registrations per second,
// watch propagation latency (etcd write -> event at a watching client through
// the registry), and the CPU the registry spends keeping many sessions alive.
// It starts its own etcd and, when bin/registry is beside it, runs the
// registry as a separate process so that its CPU is measured alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/bench/registrybench"
)

func main() {
	var cfg registrybench.Config
	fs := flag.NewFlagSet("registry-bench", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := registrybench.Run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "registry-bench:", err)
		os.Exit(1)
	}
}
