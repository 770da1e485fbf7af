// Command frontend runs Switchyard's OpenAI-compatible HTTP frontend.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/frontend"
)

func main() {
	var cfg frontend.Config
	opts := cli.Options{Name: "frontend", EnvPrefix: "SWITCHYARD_FRONTEND_", Env: frontend.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return frontend.Run(ctx, cfg, log)
	}))
}
