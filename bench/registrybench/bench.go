// Package registrybench is the registry benchmark behind registry-bench: it
// starts etcd and a registry, drives them with real clients over gRPC, and
// prints a table.
package registrybench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/registry"
)

// Config says how much load to apply.
type Config struct {
	Registrations int
	Concurrency   int
	WatchSamples  int
	Sessions      int
	SessionTTL    time.Duration
	CPUWindow     time.Duration
	RegistryBin   string
	Fsync         bool
}

// RegisterFlags adds the benchmark's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	exe, _ := os.Executable()
	fs.IntVar(&c.Registrations, "registrations", 3000, "registrations to time")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "concurrent registering clients")
	fs.IntVar(&c.WatchSamples, "watch-samples", 1000, "writes whose propagation to a watcher is timed")
	fs.IntVar(&c.Sessions, "sessions", 10000, "sessions kept alive for the CPU measurement")
	fs.DurationVar(&c.SessionTTL, "session-ttl", 10*time.Second, "lease TTL of those sessions")
	fs.DurationVar(&c.CPUWindow, "cpu-window", 20*time.Second, "how long the registry's CPU is measured")
	fs.StringVar(&c.RegistryBin, "registry-bin", filepath.Join(filepath.Dir(exe), "registry"), "registry binary to run as its own process (in-process when missing)")
	fs.BoolVar(&c.Fsync, "fsync", true, "run etcd with fsync (as in production); false is faster and less honest")
}

type row struct{ name, value string }

// Run runs every measurement and prints the table to out.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "registry-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	etcd, err := registry.StartEmbeddedEtcd(registry.EmbeddedEtcdConfig{
		// Port 0: etcd binds the ports itself and Endpoints reports them.
		Dir: filepath.Join(dir, "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0", Fast: !cfg.Fsync,
	})
	if err != nil {
		return err
	}
	defer etcd.Close()

	reg, err := startRegistry(ctx, cfg.RegistryBin, etcd.Endpoints())
	if err != nil {
		return err
	}
	defer reg.stop()

	c, err := registryclient.Dial([]string{reg.addr}, registryclient.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitReady(ctx, c); err != nil {
		return err
	}
	var rows []row
	add := func(name, format string, args ...any) { rows = append(rows, row{name, fmt.Sprintf(format, args...)}) }
	add("registry process", "%s", reg.kind)
	add("etcd", "embedded single node, fsync %v", cfg.Fsync)

	rate, err := registrations(ctx, c, cfg.Registrations, cfg.Concurrency)
	if err != nil {
		return fmt.Errorf("registrations: %w", err)
	}
	add(fmt.Sprintf("registrations/s (%d, concurrency %d)", cfg.Registrations, cfg.Concurrency), "%.0f", rate)

	lat, err := watchLatency(ctx, c, etcd.Endpoints(), cfg.WatchSamples)
	if err != nil {
		return fmt.Errorf("watch latency: %w", err)
	}
	add(fmt.Sprintf("write start -> watch event p50 (%d writes)", cfg.WatchSamples), "%s", pct(lat.fromStart, 0.50))
	add("write start -> watch event p99", "%s", pct(lat.fromStart, 0.99))
	add("write ack -> watch event p50", "%s", pct(lat.fromAck, 0.50))
	add("write ack -> watch event p99", "%s", pct(lat.fromAck, 0.99))

	kas, cores, err := keepAliveCPU(ctx, c, reg, cfg)
	if err != nil {
		return fmt.Errorf("keep-alive CPU: %w", err)
	}
	add("sessions kept alive", "%d (TTL %v)", cfg.Sessions, cfg.SessionTTL)
	add("keep-alives/s served", "%.0f", kas)
	add("registry CPU for those sessions", "%.1f%% of one core", cores*100)

	w := 0
	for _, r := range rows {
		w = max(w, len(r.name))
	}
	fmt.Fprintf(out, "%-*s  %s\n%s  %s\n", w, "registry benchmark", "value", strings.Repeat("-", w), strings.Repeat("-", 24))
	for _, r := range rows {
		fmt.Fprintf(out, "%-*s  %s\n", w, r.name, r.value)
	}
	return nil
}

func waitReady(ctx context.Context, c *registryclient.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Raw().ListInstances(cctx, &registryv1.ListInstancesRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("registry not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runningRegistry is the registry under test and a way to read its CPU time.
type runningRegistry struct {
	addr string
	kind string
	cpu  func() time.Duration
	stop func()
}

func startRegistry(ctx context.Context, bin string, endpoints []string) (*runningRegistry, error) {
	if _, err := os.Stat(bin); err == nil {
		addr, release, err := testport.ChildPort()
		if err != nil {
			return nil, fmt.Errorf("hold a port for the registry: %w", err)
		}
		cmd := exec.CommandContext(ctx, bin, "--grpc-addr", addr, "--metrics-addr", "", "--log-level", "error")
		cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS="+strings.Join(endpoints, ","))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			release()
			return nil, err
		}
		pid := cmd.Process.Pid
		return &runningRegistry{
			addr: addr,
			kind: "separate process (" + bin + ")",
			cpu:  func() time.Duration { return procCPU(pid) },
			stop: func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); release() },
		}, nil
	}
	rctx, cancel := context.WithCancel(ctx)
	// In process the registry binds port 0 and reports its address.
	svc, err := registry.Start(rctx, registry.Config{
		Server:  grpcserver.Config{GRPCAddr: "127.0.0.1:0"},
		Backend: registry.BackendKVStore, EtcdEndpoints: strings.Join(endpoints, ","), EtcdDialTimeout: 5 * time.Second,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		return nil, err
	}
	return &runningRegistry{
		addr: svc.Addr().String(),
		kind: "in process (no registry binary; CPU includes etcd and clients)",
		cpu:  selfCPU,
		stop: func() { cancel(); _ = svc.Wait() },
	}, nil
}

// procCPU reads user+system CPU of a process from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func instance(ep string) *registryv1.Instance {
	return &registryv1.Instance{Namespace: "bench", Component: "worker", Endpoint: ep, Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}
}

// registrations times n Register calls, each granting its own lease.
func registrations(ctx context.Context, c *registryclient.Client, n, conc int) (float64, error) {
	var next atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range conc {
		g.Go(func() error {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return nil
				}
				if _, err := c.Raw().Register(gctx, &registryv1.RegisterRequest{Instance: instance("reg"), TtlSeconds: 60}); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// latencies are watch propagation samples, measured from the start of the
// etcd write and from etcd's acknowledgement of it. The event often arrives
// before the acknowledgement: the watch and the reply race.
type latencies struct{ fromStart, fromAck []time.Duration }

// watchLatency writes seed-format keys straight to etcd and times how long
// each takes to reach a client watching through the registry.
func watchLatency(ctx context.Context, c *registryclient.Client, endpoints []string, samples int) (*latencies, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Raw().WatchInstances(wctx, &registryv1.WatchInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "lat"}})
	if err != nil {
		return nil, err
	}
	if _, err := stream.Recv(); err != nil { // the snapshot
		return nil, err
	}
	arrived := make(chan time.Time, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(arrived)
				return
			}
			if len(r.Events) > 0 {
				arrived <- time.Now()
			}
		}
	}()
	lat := &latencies{}
	for i := range samples {
		key := fmt.Sprintf("/services/lat/worker/gen%d/%x", i, int64(lease.ID))
		val := fmt.Sprintf(`{"namespace":"lat","component":"worker","endpoint":"gen%d","instance_id":%d,"transport":{"tcp":"127.0.0.1:1"}}`, i, lease.ID)
		start := time.Now()
		if _, err := cli.Put(ctx, key, val, clientv3.WithLease(lease.ID)); err != nil {
			return nil, err
		}
		acked := time.Now()
		at, ok := <-arrived
		if !ok {
			return nil, errors.New("watch ended early")
		}
		lat.fromStart = append(lat.fromStart, at.Sub(start))
		lat.fromAck = append(lat.fromAck, max(at.Sub(acked), 0))
	}
	return lat, nil
}

// keepAliveCPU opens cfg.Sessions sessions and measures the registry's CPU
// over cfg.CPUWindow while they keep their leases alive.
func keepAliveCPU(ctx context.Context, c *registryclient.Client, reg *runningRegistry, cfg Config) (perSec, cores float64, err error) {
	sessions := make([]*registryclient.Session, cfg.Sessions)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range 64 {
		g.Go(func() error {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(sessions)) {
					return nil
				}
				s, err := registryclient.NewSession(gctx, c, registryclient.SessionOptions{TTL: cfg.SessionTTL})
				if err != nil {
					return err
				}
				sessions[i] = s
			}
		})
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for _, s := range sessions {
			if s == nil {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer wg.Done(); _ = s.Close(cctx); <-sem }()
		}
		wg.Wait()
	}()
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	// Let the keep-alives spread over a TTL before measuring.
	time.Sleep(cfg.SessionTTL / 2)
	cpu0, t0 := reg.cpu(), time.Now()
	time.Sleep(cfg.CPUWindow)
	cpu1, t1 := reg.cpu(), time.Now()
	for _, s := range sessions {
		select {
		case <-s.Done():
			return 0, 0, fmt.Errorf("a session lost its lease during the measurement: %v", s.Err())
		default:
		}
	}
	elapsed := t1.Sub(t0)
	perSec = float64(cfg.Sessions) / (cfg.SessionTTL / 2).Seconds()
	return perSec, float64(cpu1-cpu0) / float64(elapsed), nil
}

func pct(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "n/a"
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return fmt.Sprintf("%.3f ms", float64(s[i])/float64(time.Millisecond))
}
