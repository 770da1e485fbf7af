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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// Config is the stack's configuration.
type Config struct {
	BinDir   string
	DataDir  string
	HTTPPort int
	Mockers  int
	// Wait bounds each component's start.
	Wait time.Duration
	// StopTimeout bounds each component's stop before it is killed.
	StopTimeout time.Duration
	// Extra arguments per component, e.g. to switch the router mode.
	RouterMode string
	Speedup    float64
}

// RegisterFlags adds the stack's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.BinDir, "bin-dir", "bin", "directory of the service binaries")
	fs.StringVar(&c.DataDir, "data-dir", ".data", "directory for the embedded etcd and NATS data and the logs")
	fs.IntVar(&c.HTTPPort, "http-port", 8000, "frontend HTTP port")
	fs.IntVar(&c.Mockers, "mockers", 2, "mocker workers to run")
	fs.StringVar(&c.RouterMode, "router-mode", "kv", "routing mode of the router and frontend")
	fs.Float64Var(&c.Speedup, "speedup-ratio", 1, "mocker speed-up ratio")
	fs.DurationVar(&c.Wait, "start-timeout", 60*time.Second, "bound on each component's start")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", 15*time.Second, "bound on each component's stop before SIGKILL")
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Mockers < 1 || c.HTTPPort < 1 || c.HTTPPort > 65535 {
		return errors.New("--mockers must be positive and --http-port a port number")
	}
	for _, b := range []string{"registry", "eventbus", "router", "mocker"} {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("missing binary %s in --bin-dir %s (run make build): %w", b, c.BinDir, err)
		}
	}
	return nil
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
	env := []string{"SWITCHYARD_REGISTRY_ADDR=localhost:7001", "SWITCHYARD_EVENTBUS_ADDR=localhost:7002", "SWITCHYARD_ROUTER_ADDR=localhost:7003"}
	start := func(name string, args ...string) (*proc, error) {
		f, err := os.Create(filepath.Join(logs, name+".log"))
		if err != nil {
			return nil, err
		}
		bin := filepath.Join(c.BinDir, name)
		if strings.HasPrefix(name, "mocker-") {
			bin = filepath.Join(c.BinDir, "mocker")
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(append(os.Environ(), env...), "DYN_TCP_RPC_HOST=127.0.0.1")
		cmd.Stdout, cmd.Stderr = f, f
		// Own process group: the terminal's Ctrl-C reaches only the stack,
		// which stops the components in order; Pdeathsig ends them if the
		// stack itself dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		p := &proc{name: name, cmd: cmd, done: make(chan error, 1)}
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
				return fmt.Errorf("%s exited during start (%v); see %s", p.name, err, filepath.Join(logs, p.name+".log"))
			case <-wctx.Done():
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%s not ready after %v; see %s", p.name, c.Wait, filepath.Join(logs, p.name+".log"))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	fmt.Fprintf(out, "Starting Switchyard (logs in %s)\n", logs)

	p, err := start("registry", "--data-dir", filepath.Join(c.DataDir, "registry"))
	if err != nil {
		return err
	}
	if err := ready(p, "gRPC localhost:7001, embedded etcd http://127.0.0.1:2379", grpcHealthy("localhost:7001")); err != nil {
		return err
	}
	if p, err = start("eventbus", "--data-dir", filepath.Join(c.DataDir, "eventbus")); err != nil {
		return err
	}
	if err := ready(p, "gRPC localhost:7002, embedded NATS nats://127.0.0.1:4222", grpcHealthy("localhost:7002")); err != nil {
		return err
	}
	if p, err = start("router", "--router-mode", c.RouterMode); err != nil {
		return err
	}
	if err := ready(p, "gRPC localhost:7003, mode "+c.RouterMode, grpcHealthy("localhost:7003")); err != nil {
		return err
	}
	for i := 1; i <= c.Mockers; i++ {
		name := "mocker-" + strconv.Itoa(i)
		if p, err = start(name, "--speedup-ratio", strconv.FormatFloat(c.Speedup, 'g', -1, 64)); err != nil {
			return err
		}
		if err := ready(p, "worker registered (Qwen/Qwen3-0.6B)", registered("localhost:7001", i)); err != nil {
			return err
		}
	}
	port := strconv.Itoa(c.HTTPPort)
	if _, err := os.Stat(filepath.Join(c.BinDir, "frontend")); err != nil {
		return c.serve(ctx, procs, out, "no frontend binary in "+c.BinDir+": the stack runs without the OpenAI API")
	}
	if p, err = start("frontend", "--http-port", port, "--router-mode", c.RouterMode); err != nil {
		return err
	}
	if err := ready(p, "OpenAI API http://localhost:"+port+"/v1", httpOK("http://localhost:"+port+"/health")); err != nil {
		return err
	}
	return c.serve(ctx, procs, out, fmt.Sprintf("Switchyard is up. Try:\n\n  curl http://localhost:%s/v1/chat/completions -H \"Content-Type: application/json\" -d '{\"model\": \"Qwen/Qwen3-0.6B\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'", port))
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
		return fmt.Errorf("%s exited; see %s", p.name, filepath.Join(logs, p.name+".log"))
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

func grpcHealthy(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			return errors.New(r.Status.String())
		}
		return nil
	}
}

// registered is ready once n workers have published their model cards.
func registered(addr string, n int) func(context.Context) error {
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := registryv1.NewRegistryServiceClient(cc).ListModels(cctx, &registryv1.ListModelsRequest{})
		if err != nil {
			return err
		}
		if len(r.Cards) < n {
			return fmt.Errorf("%d of %d workers", len(r.Cards), n)
		}
		return nil
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
