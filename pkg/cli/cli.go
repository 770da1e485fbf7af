// Package cli is the shared body of every Switchyard main: flags filled from
// the environment, Complete then Validate, a JSON slog logger, a signal context, and an
// exit code. It keeps each cmd/<svc>/main.go to a few lines.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/flagenv"
	"github.com/switchyard-llm/switchyard/pkg/obs"
)

// Config is a service's configuration as the command line sees it.
type Config interface {
	// RegisterFlags adds the service's flags, with their defaults.
	RegisterFlags(fs *flag.FlagSet)
	// Complete reads what the settings name (files, the environment) and
	// fills the defaults that derive from other settings. It is the only
	// step that does I/O, and calling it twice changes nothing.
	Complete() error
	// Validate reports the first invalid setting. It reads nothing and
	// changes nothing; Main calls it after Complete.
	Validate() error
}

// Options says how to read a service's settings.
type Options struct {
	// Name is the binary's name, used in usage text and logs.
	Name string
	// EnvPrefix is the generic environment prefix, e.g. SWITCHYARD_REGISTRY_.
	EnvPrefix string
	// Env maps flag names to the documented variables that set them.
	Env map[string]string
}

// Main parses args into cfg, builds the logger, runs run until SIGINT or
// SIGTERM, and returns the process exit code: 0 on a clean stop, 2 on bad
// configuration, 1 on a failure.
//
// --version prints the build information (to stderr) and exits 0. A first
// argument "healthcheck" ([HealthCheckCommand]) reads the same flags and
// environment, probes the running service they describe instead of running
// one, and exits 0 when it is healthy, 1 when not.
func Main(opts Options, cfg Config, args []string, stderr io.Writer, run func(ctx context.Context, log *slog.Logger) error) int {
	check := len(args) > 0 && args[0] == HealthCheckCommand
	if check {
		args = args[1:]
	}
	fs := flag.NewFlagSet(opts.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	format := fs.String("log-format", "", "log format: text or json (empty: text on a terminal, json otherwise)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	cfg.RegisterFlags(fs)
	env := map[string]string{"log-level": "SWITCHYARD_LOG_LEVEL", "log-format": "SWITCHYARD_LOG_FORMAT"}
	for k, v := range opts.Env {
		env[k] = v
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of %s (each flag is also read from the environment variable named):\n", opts.Name)
		fmt.Fprintf(stderr, "  %s %s [flags]  probes the running service instead (exit 0: healthy)\n", opts.Name, HealthCheckCommand)
		flagenv.PrintDefaults(fs, opts.EnvPrefix, env)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		printVersion(opts.Name, stderr)
		return 0
	}
	if err := flagenv.Set(fs, opts.EnvPrefix, env); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", opts.Name, err)
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(*level))); err != nil {
		fmt.Fprintf(stderr, "%s: invalid --log-level %q: valid values are debug, info, warn, error\n", opts.Name, *level)
		return 2
	}
	if *format == "" {
		*format = "json"
		if isTerminal(stderr) {
			*format = "text"
		}
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "%s: invalid --log-format %q: valid values are text, json\n", opts.Name, *format)
		return 2
	}
	if err := cfg.Complete(); err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration: %v\n", opts.Name, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration: %v\n", opts.Name, err)
		return 2
	}
	if check {
		if err := healthCheck(context.Background(), fs); err != nil {
			fmt.Fprintf(stderr, "%s: unhealthy: %v\n", opts.Name, err)
			return 1
		}
		return 0
	}
	var handler slog.Handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl})
	if *format == "text" {
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})
	}
	log := slog.New(handler).With("service", opts.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdownTracing, err := obs.SetupTracing(ctx, opts.Name, log)
	if err != nil {
		log.Error("tracing not started", "err", err.Error())
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	if err := run(ctx, log); err != nil {
		log.Error("exiting on error", "err", err.Error())
		return 1
	}
	return 0
}

// isTerminal reports whether w is a character device (a person's terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
