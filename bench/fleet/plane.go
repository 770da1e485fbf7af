package fleet

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

// proc is one child process of the plane.
type proc struct {
	name    string // etcd-1, nats-2, registry, frontend-1, ...
	service string // what the table groups it under: etcd, nats, registry, ...
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	held    []func() // port holds, released after the child exits
	metrics string   // where its counters are read: etcd's /metrics, NATS's /varz
	// pprof is its /debug/pprof/ base URL with PlaneConfig.Profile.
	pprof string
}

// Plane is the control plane the bench runs: a 3-member etcd cluster, a
// 3-server NATS JetStream cluster, a registry, an eventbus (streams with 3
// replicas), a router and two frontends, each its own process on loopback.
type Plane struct {
	procs     []*proc
	dir       string
	Registry  string   // gRPC address
	Eventbus  string   // gRPC address
	Router    string   // gRPC address
	Frontends []string // base URLs, http://host:port
	EtcdURLs  []string
	NATSURLs  []string
	varz      []string // NATS monitoring URLs
}

// PlaneConfig says how the plane runs.
type PlaneConfig struct {
	// Exe is the binary started for every part (RoleEnv set); empty is
	// this process's own.
	Exe string
	// Dir holds the data and the logs of every part.
	Dir string
	// EtcdFsync runs etcd with fsync (as in production).
	EtcdFsync bool
	// Frontends is how many frontends to start.
	Frontends int
	// Namespace is the namespace the frontends serve.
	Namespace string
	// Profile serves /debug/pprof in every part (see Plane.Profile).
	Profile bool
	// CoalesceGap is the eventbus's --coalesce-gap.
	CoalesceGap time.Duration
	// PublishRateTarget is the eventbus's --publish-rate-target (0: its
	// default).
	PublishRateTarget int
}

// StartPlane starts every part in dependency order and waits until each is
// ready; on failure it stops what it started.
func StartPlane(ctx context.Context, cfg PlaneConfig) (_ *Plane, err error) {
	if cfg.Exe == "" {
		if cfg.Exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	p := &Plane{dir: cfg.Dir}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	hold := func(n int) ([]string, []func(), error) {
		var addrs []string
		var rel []func()
		for range n {
			a, r, err := testport.ChildPort()
			if err != nil {
				for _, f := range rel {
					f()
				}
				return nil, nil, err
			}
			addrs, rel = append(addrs, a), append(rel, r)
		}
		return addrs, rel, nil
	}
	start := func(name, service string, held []func(), metrics string, args ...string) (*proc, error) {
		logf, err := os.Create(filepath.Join(cfg.Dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(cfg.Exe, args...)
		cmd.Env = append(os.Environ(), RoleEnv+"="+service, "SWITCHYARD_LOG_LEVEL=warn", "SWITCHYARD_LOG_FORMAT=text")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		pr := &proc{name: name, service: service, cmd: cmd, done: make(chan struct{}), held: held, metrics: metrics}
		go func() { pr.err = cmd.Wait(); logf.Close(); close(pr.done) }()
		p.procs = append(p.procs, pr)
		return pr, nil
	}

	// etcd: three members, started together (each waits for a quorum).
	const members = 3
	ports, rel, err := hold(2 * members)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("e%d=http://%s", i+1, ports[2*i+1]))
	}
	var etcds []*proc
	for i := range members {
		client, peer := "http://"+ports[2*i], "http://"+ports[2*i+1]
		p.EtcdURLs = append(p.EtcdURLs, client)
		args := []string{"--name", fmt.Sprintf("e%d", i+1), "--dir", filepath.Join(cfg.Dir, fmt.Sprintf("etcd-%d", i+1)),
			"--client-url", client, "--peer-url", peer, "--initial-cluster", strings.Join(initial, ","),
			"--fsync=" + strconv.FormatBool(cfg.EtcdFsync), "--pprof=" + strconv.FormatBool(cfg.Profile)}
		pr, err := start(fmt.Sprintf("etcd-%d", i+1), "etcd", rel[2*i:2*i+2], client+"/metrics", args...)
		if err != nil {
			return nil, err
		}
		if cfg.Profile {
			pr.pprof = client + "/debug/pprof/"
		}
		etcds = append(etcds, pr)
	}
	for i, pr := range etcds {
		if err := p.wait(ctx, pr, httpOK(p.EtcdURLs[i]+"/health")); err != nil {
			return nil, err
		}
	}

	// NATS: three servers with routes to each other.
	ports, rel, err = hold(4 * members)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range members {
		routes = append(routes, "nats://"+ports[4*i+1])
	}
	var natss []*proc
	for i := range members {
		_, cport, _ := net.SplitHostPort(ports[4*i])
		_, rport, _ := net.SplitHostPort(ports[4*i+1])
		_, hport, _ := net.SplitHostPort(ports[4*i+2])
		_, pport, _ := net.SplitHostPort(ports[4*i+3])
		if !cfg.Profile {
			pport = "0"
		}
		p.NATSURLs = append(p.NATSURLs, "nats://"+ports[4*i])
		p.varz = append(p.varz, "http://"+ports[4*i+2]+"/varz")
		pr, err := start(fmt.Sprintf("nats-%d", i+1), "nats", rel[4*i:4*i+4], "http://"+ports[4*i+2]+"/varz",
			"--name", fmt.Sprintf("n%d", i+1), "--port", cport, "--cluster-port", rport, "--http-port", hport, "--prof-port", pport,
			"--store", filepath.Join(cfg.Dir, fmt.Sprintf("nats-%d", i+1)), "--routes", strings.Join(routes, ","))
		if err != nil {
			return nil, err
		}
		if cfg.Profile {
			pr.pprof = "http://" + ports[4*i+3] + "/debug/pprof/"
		}
		natss = append(natss, pr)
	}
	for i, pr := range natss {
		if err := p.wait(ctx, pr, jetStreamReady("http://"+ports[4*i+2], members)); err != nil {
			return nil, err
		}
	}

	// The services.
	// With Profile each service serves pprof on a second held port.
	svc := func(name, service string, extra ...string) (string, error) {
		addrs, rel, err := hold(2)
		if err != nil {
			return "", err
		}
		dbg := ""
		if cfg.Profile {
			dbg = addrs[1]
		}
		pr, err := start(name, service, rel, "", append([]string{"--grpc-addr", addrs[0], "--metrics-addr", "", "--debug-addr", dbg}, extra...)...)
		if err != nil {
			return "", err
		}
		if cfg.Profile {
			pr.pprof = "http://" + dbg + "/debug/pprof/"
		}
		return addrs[0], p.wait(ctx, pr, grpcServing(addrs[0]))
	}
	if p.Registry, err = svc("registry", "registry", "--etcd-endpoints", strings.Join(p.EtcdURLs, ",")); err != nil {
		return nil, err
	}
	if p.Eventbus, err = svc("eventbus", "eventbus", "--nats-server", strings.Join(p.NATSURLs, ","), "--stream-replicas", "3",
		"--coalesce-events", strings.Join(eventbus.FleetCoalesceEvents, ","), "--coalesce-gap", cfg.CoalesceGap.String(),
		"--publish-rate-target", strconv.Itoa(cmp.Or(cfg.PublishRateTarget, eventbus.DefaultPublishRateTarget)),
		"--data-dir", filepath.Join(cfg.Dir, "eventbus")); err != nil {
		return nil, err
	}
	if p.Router, err = svc("router", "router", "--router-mode", "kv", "--registry-addr", p.Registry, "--eventbus-addr", p.Eventbus); err != nil {
		return nil, err
	}
	for i := range cfg.Frontends {
		addrs, rel, err := hold(2)
		if err != nil {
			return nil, err
		}
		dbg := ""
		if cfg.Profile {
			dbg = addrs[1]
		}
		name := fmt.Sprintf("frontend-%d", i+1)
		pr, err := start(name, "frontend", rel, "", "--http-addr", addrs[0], "--router-mode", "kv", "--namespace", cfg.Namespace,
			"--registry-addr", p.Registry, "--eventbus-addr", p.Eventbus, "--router-addr", p.Router, "--debug-addr", dbg)
		if err != nil {
			return nil, err
		}
		if cfg.Profile {
			pr.pprof = "http://" + dbg + "/debug/pprof/"
		}
		url := "http://" + addrs[0]
		// The frontend answers /health 503 until a worker serves a model:
		// /live says it serves.
		if err := p.wait(ctx, pr, httpOK(url+"/live")); err != nil {
			return nil, err
		}
		p.Frontends = append(p.Frontends, url)
	}
	return p, nil
}

// wait polls check until it passes, the process exits, or a minute passes.
func (p *Plane) wait(ctx context.Context, pr *proc, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-pr.done:
			return fmt.Errorf("%s exited during start (%v): %s", pr.name, pr.err, lastLines(filepath.Join(p.dir, pr.name+".log"), 5))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (log %s)", pr.name, err, filepath.Join(p.dir, pr.name+".log"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops every part in reverse start order (SIGTERM, then SIGKILL after
// 10 s) and releases their ports.
func (p *Plane) Close() {
	for i := len(p.procs) - 1; i >= 0; i-- {
		pr := p.procs[i]
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
		for _, r := range pr.held {
			r()
		}
	}
	p.procs = nil
}

// Profile writes a CPU profile of d of every part that serves pprof
// (PlaneConfig.Profile) to dir/<part>.cpu.pprof, all at once, and NATS's
// JetStream report (/jsz with streams and consumers) to dir/<part>.jsz.json.
func (p *Plane) Profile(ctx context.Context, dir string, d time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(p.procs))
	for i, pr := range p.procs {
		if pr.pprof == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fetchTo(ctx, fmt.Sprintf("%sprofile?seconds=%d", pr.pprof, int(d.Seconds())), filepath.Join(dir, pr.name+".cpu.pprof"))
			if errs[i] == nil && pr.service == "nats" {
				errs[i] = fetchTo(ctx, strings.TrimSuffix(pr.metrics, "/varz")+"/jsz?streams=true&consumers=true&config=true", filepath.Join(dir, pr.name+".jsz.json"))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, res.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Exited names the parts that are no longer running.
func (p *Plane) Exited() []string {
	var out []string
	for _, pr := range p.procs {
		select {
		case <-pr.done:
			out = append(out, fmt.Sprintf("%s (%v)", pr.name, pr.err))
		default:
		}
	}
	return out
}

func lastLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", url, res.StatusCode)
		}
		return nil
	}
}

// jetStreamReady is ready once the server knows a meta leader of a group of
// n servers, so that a stream with replicas can be placed.
func jetStreamReady(monitor string, n int) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, monitor+"/jsz", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
				Size   int    `json:"cluster_size"`
			} `json:"meta_cluster"`
		}
		if err := json.NewDecoder(res.Body).Decode(&jsz); err != nil {
			return err
		}
		if jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size != n {
			return errors.New("no JetStream meta leader of the whole cluster yet")
		}
		return nil
	}
}

func grpcServing(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			return errors.New(r.Status.String())
		}
		return nil
	}
}
