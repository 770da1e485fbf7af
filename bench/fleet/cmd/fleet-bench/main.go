// Command fleet-bench runs the control plane (3-member etcd, 3-server NATS
// JetStream cluster, registry, eventbus, router, two frontends, each its own
// process) with fleets of simulated workers and prints what every service
// costs as the fleet grows. See package fleet.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchyard-llm/switchyard/bench/fleet"
)

func main() {
	if fleet.IsChild() {
		os.Exit(fleet.RunChild(os.Args[1:]))
	}
	var cfg fleet.Config
	fs := flag.NewFlagSet("fleet-bench", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := fleet.Run(ctx, cfg, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-bench:", err)
		os.Exit(1)
	}
}
