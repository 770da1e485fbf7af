// Command eventbus serves Switchyard's event plane (EventBusService) in front
// of NATS JetStream: NATS_SERVER, or an embedded nats-server under --data-dir.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

func main() {
	var cfg eventbus.Config
	opts := cli.Options{Name: "eventbus", EnvPrefix: eventbus.EnvPrefix, Env: eventbus.EnvVars}
	os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
		return eventbus.Run(ctx, cfg, log)
	}))
}
