// Command mocker runs a simulated LLM worker (see package mocker).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/mocker"
)

func main() {
	var cfg mocker.Config
	opts := cli.Options{Name: "mocker", EnvPrefix: "SWITCHYARD_MOCKER_", Env: mocker.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return mocker.Run(ctx, cfg, log, nil)
	}))
}
