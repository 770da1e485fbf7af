package fleet

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/registry"
	"github.com/switchyard-llm/switchyard/services/router"
)

// RoleEnv names the environment variable that makes the bench's own binary
// run one part of the control plane instead of the bench: the bench starts
// every part as a child process of itself (so that each one's CPU and memory
// can be read from /proc), and a test binary does the same from TestMain.
const RoleEnv = "SWITCHYARD_FLEET_BENCH_ROLE"

// IsChild reports whether this process was started as one part of the plane.
func IsChild() bool { return os.Getenv(RoleEnv) != "" }

// RunChild runs the part RoleEnv names with args until SIGTERM and returns
// the exit code. The services run their own main (flags, environment,
// logger); etcd members and NATS servers run embedded, as a cluster.
func RunChild(args []string) int {
	role := os.Getenv(RoleEnv)
	svc := func(name string, cfg cli.Config, env map[string]string, run func(context.Context, *slog.Logger) error) int {
		return cli.Main(cli.Options{Name: name, EnvPrefix: "SWITCHYARD_" + strings.ToUpper(name) + "_", Env: env}, cfg, args, os.Stderr, run)
	}
	switch role {
	case "registry":
		var cfg registry.Config
		return svc(role, &cfg, registry.EnvVars, func(ctx context.Context, log *slog.Logger) error { return registry.Run(ctx, cfg, log) })
	case "eventbus":
		var cfg eventbus.Config
		return svc(role, &cfg, eventbus.EnvVars, func(ctx context.Context, log *slog.Logger) error { return eventbus.Run(ctx, cfg, log) })
	case "router":
		var cfg router.Config
		return svc(role, &cfg, router.EnvVars, func(ctx context.Context, log *slog.Logger) error { return router.Run(ctx, cfg, log) })
	case "frontend":
		var cfg frontend.Config
		return svc(role, &cfg, frontend.EnvVars, func(ctx context.Context, log *slog.Logger) error { return frontend.Run(ctx, cfg, log) })
	case "etcd":
		return runEtcd(args)
	case "nats":
		return runNATS(args)
	}
	fmt.Fprintf(os.Stderr, "%s=%q: not a part of the plane (registry, eventbus, router, frontend, etcd, nats)\n", RoleEnv, role)
	return 2
}

func untilSignal() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
}

// runEtcd runs one member of an embedded etcd cluster.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data dir")
	client := fs.String("client-url", "", "client URL")
	peer := fs.String("peer-url", "", "peer URL")
	initial := fs.String("initial-cluster", "", "name=peer-url,...")
	fsync := fs.Bool("fsync", false, "fsync the WAL")
	prof := fs.Bool("pprof", false, "serve /debug/pprof on the client URL")
	if fs.Parse(args) != nil {
		return 2
	}
	cu, err1 := url.Parse(*client)
	pu, err2 := url.Parse(*peer)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "etcd: bad URL")
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.InitialClusterToken = *initial, "switchyard-fleet-bench"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.UnsafeNoFsync = !*fsync
	cfg.EnablePprof = *prof
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-time.After(2 * time.Minute):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 2m")
		return 1
	}
	untilSignal()
	return 0
}

// runNATS runs one server of a NATS JetStream cluster with routes to every
// other.
func runNATS(args []string) int {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	name := fs.String("name", "", "server name")
	port := fs.Int("port", 0, "client port")
	clusterPort := fs.Int("cluster-port", 0, "route port")
	httpPort := fs.Int("http-port", 0, "monitoring port")
	profPort := fs.Int("prof-port", 0, "/debug/pprof port (0: none)")
	store := fs.String("store", "", "JetStream store dir")
	routes := fs.String("routes", "", "route URLs, comma-separated")
	if fs.Parse(args) != nil {
		return 2
	}
	var rs []*url.URL
	for _, r := range strings.Split(*routes, ",") {
		u, err := url.Parse(r)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nats: bad route:", err)
			return 2
		}
		rs = append(rs, u)
	}
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: *name, Host: "127.0.0.1", Port: *port, HTTPHost: "127.0.0.1", HTTPPort: *httpPort, ProfPort: *profPort,
		JetStream: true, StoreDir: *store, NoSigs: true,
		Cluster: natsserver.ClusterOpts{Name: "switchyard-fleet-bench", Host: "127.0.0.1", Port: *clusterPort},
		Routes:  rs,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats:", err)
		return 1
	}
	// Its notices, warnings and errors (a slow consumer cut off, a lost
	// route) go to stderr, the part's log.
	ns.ConfigureLogger()
	ns.Start()
	if !ns.ReadyForConnections(time.Minute) {
		fmt.Fprintln(os.Stderr, "nats: not ready after 1m")
		ns.Shutdown()
		return 1
	}
	untilSignal()
	ns.Shutdown()
	ns.WaitForShutdown()
	return 0
}
