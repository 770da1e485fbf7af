// Package stack runs the whole Switchyard system on one machine as separate
// processes (the `make run` of the README): registry on an embedded etcd,
// eventbus on an embedded NATS, router, two mocker workers and the frontend.
// It starts them in dependency order, prints one line per component as it
// becomes ready, and on Ctrl-C stops them in reverse order, each with SIGTERM
// and a deadline, so that workers deregister and drain and nothing is left
// behind.
package stack

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Config is the stack's configuration.
type Config struct {
	BinDir   string
	DataDir  string
	HTTPPort int
	// Mockers are the aggregated mocker workers.
	Mockers int
	// PrefillWorkers and DecodeWorkers are mockers of the prefill and
	// decode roles (--disaggregation-mode): with both, the model is served
	// disaggregated, the router pairing a prefill worker with a decode
	// worker (Disaggregation).
	PrefillWorkers, DecodeWorkers int
	// Disaggregation is the router's --disaggregation: auto, always, off.
	Disaggregation string
	// Wait bounds each component's start.
	Wait time.Duration
	// StopTimeout bounds each component's stop before it is killed.
	StopTimeout time.Duration
	// Extra arguments per component, e.g. to switch the router mode.
	RouterMode string
	// KVEventsMode is --kv-events-mode of the router, mockers and frontend
	// (pkg/kvevents; empty: jetstream).
	KVEventsMode string
	Speedup      float64
	// Host is the address every component listens on: 127.0.0.1 keeps the
	// whole stack to this machine (its services run without credentials).
	Host string
	// Ports are the components' listen ports; zero fields take the
	// defaults of DefaultPorts.
	Ports Ports
	// Planner runs the planner with the local connector: it starts and
	// stops more mockers, between MinReplicas and MaxReplicas.
	Planner                  bool
	MinReplicas, MaxReplicas int
}

// Ports are where the stack's components listen, on Config.Host.
type Ports struct {
	Registry, Eventbus, Router                      int
	RegistryMetrics, EventbusMetrics, RouterMetrics int
	// Planner, PlannerMetrics and PlannerStatus are the planner's gRPC
	// (health), /metrics and /status.json ports.
	Planner, PlannerMetrics, PlannerStatus int
	EtcdClient, EtcdPeer, NATS             int
	// MockerMetrics is the base of the mockers' /metrics ports: mocker-i
	// serves on MockerMetrics+i.
	MockerMetrics int
}

// DefaultPorts are the ports of `make run`, those the docs name.
var DefaultPorts = Ports{
	Registry: 7001, Eventbus: 7002, Router: 7003,
	RegistryMetrics: 9101, EventbusMetrics: 9102, RouterMetrics: 9103,
	EtcdClient: 2379, EtcdPeer: 2380, NATS: 4222, MockerMetrics: 9110,
	Planner: 7004, PlannerMetrics: 9104, PlannerStatus: 9105,
}

func (p Ports) withDefaults() Ports {
	d := DefaultPorts
	for _, f := range []struct{ v, def *int }{
		{&p.Registry, &d.Registry}, {&p.Eventbus, &d.Eventbus}, {&p.Router, &d.Router},
		{&p.RegistryMetrics, &d.RegistryMetrics}, {&p.EventbusMetrics, &d.EventbusMetrics}, {&p.RouterMetrics, &d.RouterMetrics},
		{&p.EtcdClient, &d.EtcdClient}, {&p.EtcdPeer, &d.EtcdPeer}, {&p.NATS, &d.NATS}, {&p.MockerMetrics, &d.MockerMetrics},
		{&p.Planner, &d.Planner}, {&p.PlannerMetrics, &d.PlannerMetrics}, {&p.PlannerStatus, &d.PlannerStatus},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return p
}

// RegisterFlags adds the stack's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.BinDir, "bin-dir", "bin", "directory of the service binaries")
	fs.StringVar(&c.DataDir, "data-dir", ".data", "directory for the embedded etcd and NATS data and the logs")
	fs.IntVar(&c.HTTPPort, "http-port", 8000, "frontend HTTP port")
	fs.IntVar(&c.Mockers, "mockers", 2, "aggregated mocker workers to run")
	fs.IntVar(&c.PrefillWorkers, "prefill-workers", 0, "mocker workers with --disaggregation-mode prefill (with --decode-workers: a disaggregated stack)")
	fs.IntVar(&c.DecodeWorkers, "decode-workers", 0, "mocker workers with --disaggregation-mode decode")
	fs.StringVar(&c.Disaggregation, "disaggregation", "auto", "the router's --disaggregation with prefill and decode workers: auto, always, off")
	fs.StringVar(&c.RouterMode, "router-mode", "kv", "routing mode of the router and frontend")
	fs.StringVar(&c.KVEventsMode, "kv-events-mode", string(kvevents.JetStream), "KV event plane of the router, mockers and frontend: jetstream, core, direct, none")
	fs.Float64Var(&c.Speedup, "speedup-ratio", 1, "mocker speed-up ratio")
	fs.DurationVar(&c.Wait, "start-timeout", 60*time.Second, "bound on each component's start")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", 15*time.Second, "bound on each component's stop before SIGKILL")
	fs.StringVar(&c.Host, "host", "127.0.0.1", "address every component listens on; the stack runs without credentials, so keep it on loopback")
	fs.BoolVar(&c.Planner, "planner", false, "run the planner with the local connector: it starts and stops mockers to hold the latency objectives")
	fs.IntVar(&c.MinReplicas, "min-replicas", 1, "with --planner: fewest mockers")
	fs.IntVar(&c.MaxReplicas, "max-replicas", 4, "with --planner: most mockers")
}

// Complete checks that the binaries the stack starts are in --bin-dir.
func (c *Config) Complete() error {
	bins := []string{"registry", "eventbus", "router", "mocker"}
	if c.Planner {
		bins = append(bins, "planner")
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("missing binary %s in --bin-dir %s (run make build): %w", b, c.BinDir, err)
		}
	}
	return nil
}

// Validate checks the configuration; it reads nothing.
func (c Config) Validate() error {
	if c.Mockers < 0 || c.PrefillWorkers < 0 || c.DecodeWorkers < 0 || c.Mockers+c.PrefillWorkers+c.DecodeWorkers < 1 {
		return errors.New("--mockers, --prefill-workers and --decode-workers must not be negative, and at least one worker must run")
	}
	if c.HTTPPort < 1 || c.HTTPPort > 65535 {
		return errors.New("--http-port must be a port number")
	}
	if c.PrefillWorkers > 0 && c.DecodeWorkers+c.Mockers == 0 {
		// Prefill workers never serve a whole request.
		return errors.New("--prefill-workers needs --decode-workers (or --mockers): a prefill worker only computes prompts for them")
	}
	if _, err := core.ParseDisaggregation(c.disaggregation()); err != nil {
		return err
	}
	if c.Host == "" {
		return errors.New("--host must not be empty")
	}
	if _, err := kvevents.Parse(c.KVEventsMode); err != nil {
		return err
	}
	if c.Planner && (c.MinReplicas < 0 || c.MaxReplicas < max(c.MinReplicas, 1)) {
		return errors.New("--min-replicas and --max-replicas: need 0 <= min <= max and max >= 1")
	}
	return nil
}

// disaggregation is the router's --disaggregation ("auto" when unset).
func (c Config) disaggregation() string {
	if c.Disaggregation == "" {
		return string(core.DisaggAuto)
	}
	return c.Disaggregation
}

// component is one process of the stack: its binary, arguments and
// environment, and how to tell that it is ready.
type component struct {
	name, bin string
	args, env []string
	what      string // printed once ready
	ready     func(context.Context) error
}

// plan lists the stack's components in start order. Every listener is on
// c.Host: gRPC, metrics, the embedded etcd and NATS, the workers' request
// plane and the frontend.
func (c Config) plan() []component {
	p := c.Ports.withDefaults()
	hp := func(port int) string { return net.JoinHostPort(c.Host, strconv.Itoa(port)) }
	reg, bus, rt := hp(p.Registry), hp(p.Eventbus), hp(p.Router)
	env := []string{
		"SWITCHYARD_REGISTRY_ADDR=" + reg, "SWITCHYARD_EVENTBUS_ADDR=" + bus, "SWITCHYARD_ROUTER_ADDR=" + rt,
		"DYN_TCP_RPC_HOST=" + c.Host, "DYN_HTTP_RPC_HOST=" + c.Host,
	}
	ev := string(kvevents.JetStream)
	if m, err := kvevents.Parse(c.KVEventsMode); err == nil {
		ev = string(m)
	}
	server := func(addr string, metricsPort int) []string {
		return []string{"--grpc-addr", addr, "--metrics-addr", hp(metricsPort), "--reflection"}
	}
	etcdURL := "http://" + hp(p.EtcdClient)
	comps := []component{
		{name: "registry", args: append(server(reg, p.RegistryMetrics), "--data-dir", filepath.Join(c.DataDir, "registry"),
			"--embedded-etcd-client-url", etcdURL, "--embedded-etcd-peer-url", "http://"+hp(p.EtcdPeer)),
			what: "gRPC " + reg + ", embedded etcd " + etcdURL, ready: grpcHealthy(reg)},
		{name: "eventbus", args: append(server(bus, p.EventbusMetrics), "--data-dir", filepath.Join(c.DataDir, "eventbus"),
			"--embedded-nats-port", strconv.Itoa(p.NATS)),
			what: "gRPC " + bus + ", embedded NATS nats://" + hp(p.NATS), ready: grpcHealthy(bus)},
		{name: "router", args: append(server(rt, p.RouterMetrics), "--router-mode", c.RouterMode,
			"--kv-events-mode", ev, "--registry-addr", reg, "--eventbus-addr", bus, "--disaggregation", c.disaggregation()),
			what: "gRPC " + rt + ", mode " + c.RouterMode + ", KV events " + ev, ready: grpcHealthy(rt)},
	}
	mockerArgs := []string{"--speedup-ratio", strconv.FormatFloat(c.Speedup, 'g', -1, 64), "--registry-addr", reg, "--eventbus-addr", bus,
		"--tool-call-parser", "qwen3", "--reasoning-parser", "qwen3", "--kv-events-mode", ev}
	// Workers in order: aggregated, prefill, decode; worker i serves its
	// /metrics on MockerMetrics+i and is ready once i model cards are.
	i := 0
	for _, pool := range []struct {
		name, mode string
		n          int
	}{{"mocker", "", c.Mockers}, {"prefill", "prefill", c.PrefillWorkers}, {"decode", "decode", c.DecodeWorkers}} {
		for k := 1; k <= pool.n; k++ {
			i++
			args := append(slices.Clone(mockerArgs), "--metrics-addr", hp(p.MockerMetrics+i))
			what := "worker registered (Qwen/Qwen3-0.6B)"
			if pool.mode != "" {
				args = append(args, "--disaggregation-mode", pool.mode)
				what = pool.mode + " worker registered (Qwen/Qwen3-0.6B)"
			}
			comps = append(comps, component{name: pool.name + "-" + strconv.Itoa(k), bin: "mocker", args: args, what: what, ready: registered(reg, i)})
		}
	}
	if _, err := os.Stat(filepath.Join(c.BinDir, "frontend")); err == nil {
		api := hp(c.HTTPPort)
		comps = append(comps, component{name: "frontend",
			args: []string{"--http-addr", api, "--router-mode", c.RouterMode, "--kv-events-mode", ev, "--registry-addr", reg, "--eventbus-addr", bus, "--router-addr", rt},
			what: "OpenAI API http://" + api + "/v1", ready: httpOK("http://" + api + "/health")})
	}
	if c.Planner {
		// The planner's mockers are the stack's, less their /metrics
		// (each would need a port of its own); it drains them when it
		// stops, within --worker-stop-timeout.
		pl := hp(p.Planner)
		comps = append(comps, component{name: "planner",
			args: []string{"--grpc-addr", pl, "--metrics-addr", hp(p.PlannerMetrics), "--status-addr", hp(p.PlannerStatus),
				"--registry-addr", reg, "--eventbus-addr", bus, "--connector", "local",
				"--worker-command", filepath.Join(c.BinDir, "mocker"), "--worker-args", strings.Join(mockerArgs, " "),
				"--worker-log-dir", filepath.Join(c.DataDir, "logs"), "--worker-host", c.Host, "--worker-stop-timeout", "10s",
				"--min-replicas", strconv.Itoa(c.MinReplicas), "--max-replicas", strconv.Itoa(c.MaxReplicas)},
			what:  fmt.Sprintf("gRPC %s, decisions http://%s/status.json, %d..%d mockers", pl, hp(p.PlannerStatus), c.MinReplicas, c.MaxReplicas),
			ready: grpcHealthy(pl)})
	}
	for i := range comps {
		if comps[i].bin == "" {
			comps[i].bin = comps[i].name
		}
		comps[i].env = env
	}
	return comps
}

// proc is one running component.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

// Run starts the stack, prints progress to out, and stops it when ctx ends.
func Run(ctx context.Context, c Config, out io.Writer) (err error) {
	logs := filepath.Join(c.DataDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	var procs []*proc
	defer func() {
		stopAll(procs, c.StopTimeout, out)
	}()
	start := func(comp component) (*proc, error) {
		f, err := os.Create(filepath.Join(logs, comp.name+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(filepath.Join(c.BinDir, comp.bin), comp.args...)
		cmd.Env = append(os.Environ(), comp.env...)
		cmd.Stdout, cmd.Stderr = f, f
		// Own process group: the terminal's Ctrl-C reaches only the stack,
		// which stops the components in order; Pdeathsig ends them if the
		// stack itself dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("start %s: %w", comp.name, err)
		}
		p := &proc{name: comp.name, cmd: cmd, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait(); f.Close() }()
		procs = append(procs, p)
		return p, nil
	}
	ready := func(p *proc, what string, check func(context.Context) error) error {
		wctx, cancel := context.WithTimeout(ctx, c.Wait)
		defer cancel()
		for {
			if err := check(wctx); err == nil {
				fmt.Fprintf(out, "  %-10s ready  %s\n", p.name, what)
				return nil
			}
			select {
			case err := <-p.done:
				p.done <- err
				log := filepath.Join(logs, p.name+".log")
				return fmt.Errorf("%s exited during start (%v): %s\nsee %s", p.name, err, LogCause(log), log)
			case <-wctx.Done():
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%s not ready after %v; see %s", p.name, c.Wait, filepath.Join(logs, p.name+".log"))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	plan := c.plan()
	if err := c.portsFree(plan); err != nil {
		return err
	}
	fmt.Fprintf(out, "Starting Switchyard on %s (logs in %s)\n", c.Host, logs)
	frontend := false
	for _, comp := range plan {
		p, err := start(comp)
		if err != nil {
			return err
		}
		if err := ready(p, comp.what, comp.ready); err != nil {
			return err
		}
		frontend = frontend || comp.name == "frontend"
	}
	if !frontend {
		return c.serve(ctx, procs, out, "no frontend binary in "+c.BinDir+": the stack runs without the OpenAI API")
	}
	api := "http://" + net.JoinHostPort(c.Host, strconv.Itoa(c.HTTPPort))
	return c.serve(ctx, procs, out, fmt.Sprintf("Switchyard is up. Try:\n\n  curl %s/v1/chat/completions -H \"Content-Type: application/json\" -d '{\"model\": \"Qwen/Qwen3-0.6B\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'", api))
}

// portsFree tries every address the plan's components will listen on and
// names each one another process holds. Without it a second `make run` beside
// a first one probes the first stack's services, calls its own ready, and then
// fails a component later with an error that hides the cause.
func (c Config) portsFree(plan []component) error {
	var busy []error
	for _, comp := range plan {
		for i := 0; i+1 < len(comp.args); i++ {
			addr, ok := listenAddr(c.Host, comp.args[i], comp.args[i+1])
			if !ok {
				continue
			}
			l, err := net.Listen("tcp", addr)
			if err != nil {
				busy = append(busy, fmt.Errorf("%s %s %s: %w", comp.name, comp.args[i], addr, err))
				continue
			}
			l.Close()
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("the stack's ports are in use (is another Switchyard running? stop it first):\n%w", errors.Join(busy...))
	}
	return nil
}

// listenAddr is the address a component on host listens on when given flag
// with value v, and false for flags that are not listen addresses.
func listenAddr(host, flag, v string) (string, bool) {
	switch flag {
	case "--grpc-addr", "--metrics-addr", "--http-addr", "--status-addr":
		return v, true
	case "--embedded-etcd-client-url", "--embedded-etcd-peer-url":
		return strings.TrimPrefix(v, "http://"), true
	case "--embedded-nats-port":
		return net.JoinHostPort(host, v), true
	}
	return "", false
}

// serve prints the banner and waits for Ctrl-C or a component's death.
func (c Config) serve(ctx context.Context, procs []*proc, out io.Writer, banner string) error {
	logs := filepath.Join(c.DataDir, "logs")
	fmt.Fprintf(out, "\n%s\n\nCtrl-C stops everything.\n", banner)
	died := make(chan *proc, len(procs))
	for _, p := range procs {
		go func() {
			err := <-p.done
			p.done <- err
			died <- p
		}()
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\nStopping Switchyard")
		return nil
	case p := <-died:
		log := filepath.Join(logs, p.name+".log")
		return fmt.Errorf("%s exited: %s\nsee %s", p.name, LogCause(log), log)
	}
}

// stopAll stops components in reverse start order.
func stopAll(procs []*proc, timeout time.Duration, out io.Writer) {
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		select {
		case err := <-p.done:
			p.done <- err
			continue // already gone
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			fmt.Fprintf(out, "  %-10s stopped\n", p.name)
		case <-time.After(timeout):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			fmt.Fprintf(out, "  %-10s killed after %v\n", p.name, timeout)
		}
	}
}

// grpcHealthy is ready once the service at addr answers SERVING.
func grpcHealthy(addr string) func(context.Context) error {
	return probe(addr, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			return errors.New(r.Status.String())
		}
		return nil
	})
}

// registered is ready once n workers have published their model cards.
func registered(addr string, n int) func(context.Context) error {
	return probe(addr, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := registryv1.NewRegistryServiceClient(cc).ListModels(ctx, &registryv1.ListModelsRequest{})
		if err != nil {
			return err
		}
		if len(r.Cards) < n {
			return fmt.Errorf("%d of %d workers", len(r.Cards), n)
		}
		return nil
	})
}

// probe is a readiness check that asks the service at addr once, on a
// connection of its own, within a second.
func probe(addr string, ask func(context.Context, *grpc.ClientConn) error) func(context.Context) error {
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return ask(cctx, cc)
	}
}

func httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	}
}
