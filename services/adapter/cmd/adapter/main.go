// Command adapter runs a Switchyard worker in front of an OpenAI-compatible
// engine such as vLLM (see package adapter).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/adapter"
)

func main() {
	var cfg adapter.Config
	opts := cli.Options{Name: "adapter", EnvPrefix: "SWITCHYARD_ADAPTER_", Env: adapter.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return adapter.Run(ctx, cfg, log, nil)
	}))
}
