// Command router runs Switchyard's KV-aware router.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/router"
)

func main() {
	var cfg router.Config
	opts := cli.Options{Name: "router", EnvPrefix: "SWITCHYARD_ROUTER_", Env: router.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return router.Run(ctx, cfg, log)
	}))
}
