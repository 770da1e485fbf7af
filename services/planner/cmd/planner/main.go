// Command planner sizes each worker pool to the latency objectives (see
// package planner).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/planner"
)

func main() {
	var cfg planner.Config
	opts := cli.Options{Name: "planner", EnvPrefix: planner.EnvPrefix, Env: planner.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return planner.Run(ctx, cfg, log)
	}))
}
