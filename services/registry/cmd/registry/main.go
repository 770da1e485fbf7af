// Command registry runs Switchyard's service discovery over etcd or the
// Kubernetes API (DYN_DISCOVERY_BACKEND).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/registry"
)

func main() {
	var cfg registry.Config
	opts := cli.Options{Name: "registry", EnvPrefix: "SWITCHYARD_REGISTRY_", Env: registry.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return registry.Run(ctx, cfg, log)
	}))
}
