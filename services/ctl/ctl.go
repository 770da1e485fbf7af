// Package ctl is the `switchyard` command: an operator's view of a running
// fleet from the services' own APIs.
//
//	switchyard status [-o json]                  models, instances, routers, event streams
//	switchyard route --model M --prompt "..."    why the router would pick a worker
//	switchyard route --model M --messages f.json
//	switchyard workers [--watch]                 the instance table, refreshed
//	switchyard events --namespace NS             decoded KV and load events as they arrive
//
// Every flag can also come from the environment, as with the services:
// --registry-addr from SWITCHYARD_REGISTRY_ADDR, --router-addr from
// SWITCHYARD_ROUTER_ADDR, --eventbus-addr from SWITCHYARD_EVENTBUS_ADDR, and
// the others from SWITCHYARD_CLI_<FLAG>.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/flagenv"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// EnvPrefix is the generic environment prefix of the CLI's flags.
const EnvPrefix = "SWITCHYARD_CLI_"

// EnvVars maps flags to their documented environment variables.
var EnvVars = map[string]string{
	"registry-addr":          "SWITCHYARD_REGISTRY_ADDR",
	"router-addr":            "SWITCHYARD_ROUTER_ADDR",
	"eventbus-addr":          "SWITCHYARD_EVENTBUS_ADDR",
	"frontend-addr":          "SWITCHYARD_FRONTEND_ADDR",
	"auth-token":             authtoken.EnvToken,
	"client-auth-token-file": authtoken.EnvTokenFile,
}

// errUsage is a command line that cannot run; Main exits 2 on it.
var errUsage = errors.New("usage")

// Config is what every subcommand shares: where the services are.
type Config struct {
	RegistryAddr, RouterAddr, EventbusAddr string
	// FrontendAddr lists the frontends (host:port or http URL) whose
	// /status.json tells which workers they have fenced; empty asks none.
	FrontendAddr string
	// TLS secures the calls (client certificate and CA).
	TLS tlsconfig.Config
	// Auth is the bearer token sent on every call.
	Auth authtoken.Client
	// Timeout bounds each call.
	Timeout time.Duration
	// Output is table or json.
	Output string
}

// RegisterFlags adds the shared flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.RegistryAddr, "registry-addr", "localhost:7001", "registry address(es), comma-separated")
	fs.StringVar(&c.RouterAddr, "router-addr", "localhost:7003", "router address(es), comma-separated; status asks each")
	fs.StringVar(&c.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address(es), comma-separated")
	fs.StringVar(&c.FrontendAddr, "frontend-addr", "localhost:8000", "frontend HTTP address(es) or URLs, comma-separated; status asks each which workers it has fenced and what its admission queues hold (empty: none)")
	c.TLS.RegisterClientFlags(fs, "the services")
	c.Auth.RegisterFlags(fs)
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "bound on each call to a service")
	fs.StringVar(&c.Output, "o", "table", "output: table or json")
}

// Complete reads the token and TLS files the flags name.
func (c *Config) Complete() error {
	if err := c.Auth.Complete(); err != nil {
		return err
	}
	return c.TLS.Complete()
}

// Validate checks the shared flags; it reads nothing.
func (c Config) Validate() error {
	if c.Output != "table" && c.Output != "json" {
		return fmt.Errorf("invalid -o %q: valid values are table, json", c.Output)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("invalid --timeout %v: it must be positive", c.Timeout)
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	return c.TLS.Validate()
}

func (c Config) creds() (credentials.TransportCredentials, error) {
	if !c.TLS.Enabled() {
		return insecure.NewCredentials(), nil
	}
	return c.TLS.ClientCredentials()
}

// registry dials the registry.
func (c Config) registry() (*registryclient.Client, error) {
	creds, err := c.creds()
	if err != nil {
		return nil, err
	}
	auth, err := c.Auth.Credentials()
	if err != nil {
		return nil, err
	}
	return registryclient.Dial([]string{c.RegistryAddr}, registryclient.Options{Credentials: creds, Token: auth})
}

// eventbus dials the eventbusclient.
func (c Config) eventbus() (*eventbusclient.Client, error) {
	creds, err := c.creds()
	if err != nil {
		return nil, err
	}
	auth, err := c.Auth.Credentials()
	if err != nil {
		return nil, err
	}
	return eventbusclient.Dial(splitAddrs(c.EventbusAddr), eventbusclient.Options{Credentials: creds, Token: auth})
}

// dial connects to one address of a service without waiting.
func (c Config) dial(addr string) (*grpc.ClientConn, error) {
	creds, err := c.creds()
	if err != nil {
		return nil, err
	}
	auth, err := c.Auth.DialOptions()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, append(auth, grpc.WithTransportCredentials(creds))...)
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// command is one subcommand.
type command struct {
	summary string
	// flags adds the subcommand's own flags; run runs it.
	flags func(fs *flag.FlagSet) func(ctx context.Context, c Config, out io.Writer) error
}

var commands = map[string]command{
	"status":  {"models, instances with their load and cache, routers, event streams", statusFlags},
	"route":   {"tokenize a prompt like the frontend and show why the router would pick a worker", routeFlags},
	"workers": {"the instance table; --watch refreshes it", workersFlags},
	"events":  {"decoded KV and load events of a namespace as they arrive", eventsFlags},
}

// Main runs the command line args (without the program name) and returns
// the exit code: 0 on success, 1 on a failure, 2 on a bad command line.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := Run(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "switchyard: %v\n", err)
	return 1
}

// Run runs one subcommand until it ends or ctx does.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown command %q\n", args[0])
		usage(stderr)
		return errUsage
	}
	fs := flag.NewFlagSet("switchyard "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	cfg.RegisterFlags(fs)
	run := cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: switchyard %s [flags]\n\n%s.\n\nFlags (each also read from the environment variable named):\n", args[0], cmd.summary)
		flagenv.PrintDefaults(fs, EnvPrefix, EnvVars)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "switchyard %s: unexpected arguments %q\n", args[0], fs.Args())
		return errUsage
	}
	if err := flagenv.Set(fs, EnvPrefix, EnvVars); err != nil {
		fmt.Fprintf(stderr, "switchyard %s: %v\n", args[0], err)
		return errUsage
	}
	if err := cfg.Complete(); err != nil {
		fmt.Fprintf(stderr, "switchyard %s: %v\n", args[0], err)
		return errUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "switchyard %s: %v\n", args[0], err)
		return errUsage
	}
	return run(ctx, cfg, stdout)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: switchyard <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\n'switchyard <command> -h' lists a command's flags and their environment variables.")
}
