// Command switchyard-stack runs the whole system on one machine (make run).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/stack"
)

func main() {
	var cfg stack.Config
	opts := cli.Options{Name: "switchyard-stack", EnvPrefix: "SWITCHYARD_STACK_"}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, _ *slog.Logger) error {
		return stack.Run(ctx, cfg, os.Stdout)
	}))
}
