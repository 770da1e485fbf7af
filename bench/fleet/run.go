package fleet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

// Config says what the bench runs.
type Config struct {
	// Workers are the fleet sizes, one plane each.
	Workers []int
	// Concurrency is how many workers start or stop at once.
	Concurrency int
	// KVRate, LoadInterval and LeaseTTL are every worker's (see SimConfig).
	KVRate       float64
	LoadInterval time.Duration
	// LoadHeartbeat is every worker's (see SimConfig); 0 is none (every
	// interval publishes).
	LoadHeartbeat time.Duration
	LeaseTTL      time.Duration
	// KVPublishInterval is every worker's (see SimConfig).
	KVPublishInterval time.Duration
	// CoalesceGap is the eventbus's (eventbus.Config.CoalesceGap).
	CoalesceGap time.Duration
	// PublishRateTarget is the eventbus's
	// (eventbus.Config.PublishRateTarget).
	PublishRateTarget int
	// Settle is the wait after the fleet is up, before Window, the steady
	// state in which CPU, memory and rates are measured.
	Settle, Window time.Duration
	// Probes is how many workers are added and removed one at a time for
	// the latency figures; Routes and TTFTs how many route decisions and
	// completions are timed.
	Probes, Routes, TTFTs int
	// Kills is how many workers are added and then killed one at a time
	// (keep-alive stopped, lease not revoked) for the time until every
	// frontend and the router drop them, which the lease's TTL bounds.
	Kills int
	// CheckEach sends a request for every worker's signature through the
	// frontends once the fleet is up, and again after it deregistered:
	// every worker must be routed to, then away from.
	CheckEach bool
	// Out is the directory of the CSV and the parts' logs ("" : a
	// temporary directory, removed).
	Out string
	// EtcdFsync runs etcd with fsync.
	EtcdFsync bool
	// Exe is the binary run for every part of the plane ("": this one).
	Exe string
	// Profile writes a CPU profile of the window of every part, and NATS's
	// JetStream report, to the fleet size's directory under Out.
	Profile bool
}

// RegisterFlags adds the bench's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Workers = []int{100, 1000, 3000}
	fs.Func("workers", "fleet sizes, comma-separated (default 100,1000,3000)", func(s string) error {
		c.Workers = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("bad fleet size %q", f)
			}
			c.Workers = append(c.Workers, n)
		}
		return nil
	})
	fs.IntVar(&c.Concurrency, "concurrency", 16, "workers started or stopped at once")
	fs.Float64Var(&c.KVRate, "kv-rate", 5, "KV event batches per second per worker")
	fs.DurationVar(&c.LoadInterval, "load-interval", time.Second, "load report interval per worker (0: none)")
	fs.DurationVar(&c.LoadHeartbeat, "load-heartbeat", worker.DefaultLoadHeartbeat, "a worker's load report unchanged since the last one published waits until this long after it, as the Go SDK's (0: every interval publishes)")
	fs.DurationVar(&c.KVPublishInterval, "kv-publish-interval", 0, "least time between two KV publishes of a worker, the batches rolled meanwhile sent as one, as the Go SDK's worker.Config.KVPublishInterval (0: each batch at once)")
	fs.IntVar(&c.PublishRateTarget, "publish-rate-target", eventbus.DefaultPublishRateTarget, "the eventbus's --publish-rate-target: batches a second its publishers together may send before it asks each for an interval to hold and merge its KV batches (-1: never)")
	fs.DurationVar(&c.CoalesceGap, "coalesce-gap", 0, "the eventbus's --coalesce-gap: least time between two stream messages of a coalesced subject (0: none)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 10*time.Second, "lease TTL of every worker")
	fs.DurationVar(&c.Settle, "settle", 5*time.Second, "wait after the fleet is up before measuring")
	fs.DurationVar(&c.Window, "window", 20*time.Second, "steady-state window for CPU, memory and rates")
	fs.IntVar(&c.Probes, "probes", 5, "workers added and removed one at a time for the latency figures")
	fs.IntVar(&c.Kills, "kills", 2, "workers added and then killed one at a time (lease left to expire) for the kill-to-unrouted figure")
	fs.IntVar(&c.Routes, "routes", 200, "route decisions timed at the router")
	fs.IntVar(&c.TTFTs, "ttfts", 100, "streamed completions timed through the frontends")
	fs.BoolVar(&c.CheckEach, "check-each", false, "route a request to every worker through the frontends, and away after it deregistered")
	fs.StringVar(&c.Out, "out", "", "directory for fleet.csv and the logs of every part (empty: a temporary one, removed)")
	fs.BoolVar(&c.EtcdFsync, "etcd-fsync", false, "run etcd with fsync (as in production; slower on a shared disk)")
	fs.BoolVar(&c.Profile, "profile", false, "write a CPU profile of the steady-state window of every part (and /jsz of every NATS server) to --out/n<N>/")
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if len(c.Workers) == 0 || c.Concurrency < 1 || c.KVRate < 0 || c.Window <= 0 || c.Probes < 0 || c.Kills < 0 || c.Routes < 0 || c.TTFTs < 0 {
		return errors.New("fleet-bench: --workers, --concurrency and --window must be positive, the rest not negative")
	}
	if c.Profile && (c.Out == "" || c.Window < time.Second) {
		return errors.New("fleet-bench: --profile needs --out and a --window of at least 1s")
	}
	return nil
}

// Result is what one fleet size measured.
type Result struct {
	N     int
	Load1 float64 // the machine's 1-minute load average at the window's end
	// Services is the CPU and memory of each part in the window.
	Services []Usage
	// Plane-wide rates and sizes in the window.
	EtcdRequests, EtcdDBBytes, NATSMsgs float64
	KVEventsPerSec, LoadsPerSec         float64
	// KVSendsPerSec is the messages sent to the eventbus holding KV
	// events, MsgsPerSec every message (load reports sent alone too).
	KVSendsPerSec, MsgsPerSec float64
	StartRate                 float64 // workers started per second
	// Latency samples.
	Routable, WorkerStart, FirstRequest, Unrouted, FanOutAdd, FanOutDel, Indexed, Route, TTFT []time.Duration
	// Killed is, for each killed probe worker, the time from the kill
	// until every frontend and the router had dropped it.
	Killed []time.Duration
	// Correctness counts. Reregistered is leases lost (their workers
	// registered again, as the SDK's do) and KVOfLost the KV events of the
	// lost instances, which the router indexes only up to the loss.
	Published, Applied, KVFailed, LoadFailed, Reregistered, KVOfLost uint64
	Lost                                                             []string
}

// Usage is one service's CPU (cores) and resident memory (bytes).
type Usage struct {
	Service string
	Cores   float64
	RSS     float64
}

// Run runs every fleet size and prints the tables; it fails when something
// was lost (see Result.Lost).
func Run(ctx context.Context, cfg Config, out io.Writer, log *slog.Logger) ([]*Result, error) {
	dir := cfg.Out
	if dir == "" {
		d, err := os.MkdirTemp("", "fleet-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	var results []*Result
	var lost []string
	for _, n := range cfg.Workers {
		pdir := filepath.Join(dir, fmt.Sprintf("n%d", n))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return results, err
		}
		r, err := runOne(ctx, cfg, n, pdir, out, log)
		if r != nil {
			results = append(results, r)
			printResult(out, r)
			lost = append(lost, r.Lost...)
		}
		if err != nil {
			return results, fmt.Errorf("%d workers: %w", n, err)
		}
	}
	printGrowth(out, results)
	if cfg.Out != "" {
		if err := writeCSV(filepath.Join(cfg.Out, "fleet.csv"), results); err != nil {
			return results, err
		}
	}
	if len(lost) > 0 {
		return results, fmt.Errorf("lost: %s", strings.Join(lost, "; "))
	}
	return results, nil
}

func runOne(ctx context.Context, cfg Config, n int, dir string, out io.Writer, log *slog.Logger) (*Result, error) {
	const namespace, component = "fleet", "backend"
	fmt.Fprintf(out, "== %d workers: starting the plane (logs in %s)\n", n, dir)
	plane, err := StartPlane(ctx, PlaneConfig{Exe: cfg.Exe, Dir: dir, EtcdFsync: cfg.EtcdFsync, Frontends: 2, Namespace: namespace, Profile: cfg.Profile, CoalesceGap: cfg.CoalesceGap, PublishRateTarget: cfg.PublishRateTarget})
	if err != nil {
		return nil, err
	}
	defer func() {
		plane.Close()
		removeData(dir)
	}()
	artifacts, err := uploadTokenizer(ctx, plane.Eventbus, dir)
	if err != nil {
		return nil, err
	}
	fleet, err := NewFleet(plane.Registry, plane.Eventbus, SimConfig{Namespace: namespace, Component: component, Model: qwen3.ModelName,
		Artifacts: artifacts, KVRate: cfg.KVRate, LoadInterval: cfg.LoadInterval, LoadHeartbeat: cfg.LoadHeartbeat, KVPublishInterval: cfg.KVPublishInterval, LeaseTTL: cfg.LeaseTTL, Log: log})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	cc, err := grpc.NewClient(plane.Router, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	c := &client{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, frontends: plane.Frontends, model: qwen3.ModelName,
		router: routerv1.NewRouterServiceClient(cc)}
	r := &Result{N: n}

	// Start the fleet.
	start := time.Now()
	sims, err := startAll(ctx, fleet, n, cfg.Concurrency, 2)
	defer func() {
		if sims != nil {
			// After a failure: bounded, the plane may be what failed.
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = stopAll(sctx, sims, cfg.Concurrency)
			cancel()
		}
	}()
	if err != nil {
		return r, err
	}
	r.StartRate = float64(n) / time.Since(start).Seconds()
	fmt.Fprintf(out, "   %d workers registered in %s\n", n, time.Since(start).Round(time.Millisecond))
	if _, err := c.waitInstances(ctx, n, 2*time.Minute); err != nil {
		r.Lost = append(r.Lost, fmt.Sprintf("registrations not seen by every frontend: %v", err))
		return r, err
	}
	if cfg.CheckEach {
		for i, s := range sims {
			next := 0
			if _, err := c.untilRouted(ctx, s, true, &next, 30*time.Second); err != nil {
				r.Lost = append(r.Lost, fmt.Sprintf("worker %d not routable: %v", i, err))
			}
		}
	}

	// The steady state.
	sleep(ctx, cfg.Settle)
	before, err := sample(plane)
	if err != nil {
		return r, err
	}
	kv0, load0, sends0, loadSends0 := fleet.KVEvents.Load(), fleet.LoadSent.Load(), fleet.KVSends.Load(), fleet.LoadSends.Load()
	if cfg.Profile {
		if err := profileWindow(ctx, plane, dir, cfg.Window); err != nil {
			return r, fmt.Errorf("profile: %w", err)
		}
	} else {
		sleep(ctx, cfg.Window)
	}
	after, err := sample(plane)
	if err != nil {
		return r, err
	}
	secs := after.at.Sub(before.at).Seconds()
	r.KVEventsPerSec = float64(fleet.KVEvents.Load()-kv0) / secs
	r.LoadsPerSec = float64(fleet.LoadSent.Load()-load0) / secs
	r.KVSendsPerSec = float64(fleet.KVSends.Load()-sends0) / secs
	r.MsgsPerSec = r.KVSendsPerSec + float64(fleet.LoadSends.Load()-loadSends0)/secs
	r.Services = usage(before, after)
	r.EtcdRequests = (after.etcdRequests - before.etcdRequests) / secs
	r.EtcdDBBytes = after.etcdDB
	r.NATSMsgs = (after.natsMsgs - before.natsMsgs) / secs
	r.Load1 = loadAverage()
	if gone := plane.Exited(); len(gone) > 0 {
		return r, fmt.Errorf("parts of the plane exited: %s", strings.Join(gone, ", "))
	}

	rng := rand.New(rand.NewPCG(uint64(n), 1))
	prompt := func() []uint32 {
		p := make([]uint32, 4*BlockSize)
		for i := range p {
			p[i] = 1000 + rng.Uint32N(100000)
		}
		return p
	}
	// A frontend loads a model's tokenizer and template at its first
	// request for it (seconds on a loaded machine): that is timed apart,
	// so that it does not count as the first probe's registration.
	for i := range c.frontends {
		d, err := c.complete(ctx, i, prompt(), false)
		if err != nil {
			return r, fmt.Errorf("first completion: %w", err)
		}
		r.FirstRequest = append(r.FirstRequest, d)
	}

	// Probes: a worker added, its block indexed, then removed.
	for range cfg.Probes {
		if err := probe(ctx, c, fleet, n, r); err != nil {
			r.Lost = append(r.Lost, err.Error())
			break
		}
	}
	for range cfg.Kills {
		if err := killProbe(ctx, c, fleet, n, r); err != nil {
			r.Lost = append(r.Lost, err.Error())
			break
		}
	}
	for i := range cfg.Routes {
		id := fmt.Sprintf("fleet-bench-%d", i)
		t0 := time.Now()
		_, err := c.router.Route(ctx, &routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: c.model}}, TokenIds: prompt()})
		if err != nil {
			return r, fmt.Errorf("route: %w", err)
		}
		r.Route = append(r.Route, time.Since(t0))
		_, _ = c.router.Free(ctx, &routerv1.FreeRequest{RequestId: id})
	}
	for i := range cfg.TTFTs {
		d, err := c.complete(ctx, i%len(c.frontends), prompt(), true)
		if err != nil {
			return r, fmt.Errorf("completion: %w", err)
		}
		r.TTFT = append(r.TTFT, d)
	}

	// Every KV event must have been indexed: the workers stop publishing
	// them first, and are counted while they are all registered (a router
	// skips a batch that reaches it after it dropped the worker, rightly,
	// as the worker's blocks went with it).
	if err := fleet.PauseKV(ctx); err != nil {
		return r, err
	}
	r.Published, r.KVFailed = fleet.KVEvents.Load(), fleet.KVFailed.Load()
	r.Reregistered, r.KVOfLost = fleet.Reregistered.Load(), fleet.KVOfLost.Load()
	if r.KVFailed > 0 {
		r.Lost = append(r.Lost, fmt.Sprintf("%d KV events not acknowledged by the eventbus", r.KVFailed))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := c.router.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err == nil {
			r.Applied = st.EventsApplied
			if r.Applied >= r.Published-r.KVOfLost {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.Lost = append(r.Lost, fmt.Sprintf("%d of %d KV events indexed by the router (%d of them of lost leases)", r.Applied, r.Published, r.KVOfLost))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Stop the fleet: every frontend must see it go, and each worker be
	// routed away from.
	if err := stopAll(ctx, sims, cfg.Concurrency); err != nil {
		r.Lost = append(r.Lost, fmt.Sprintf("deregistration: %v", err))
	}
	stopped := sims
	sims = nil
	if _, err := c.waitInstances(ctx, 0, 2*time.Minute); err != nil {
		r.Lost = append(r.Lost, fmt.Sprintf("deregistrations not seen by every frontend: %v", err))
	}
	if cfg.CheckEach {
		// With no worker left a request finds none: a worker is unrouted
		// when its signature is answered 503 (no instance) or by no one.
		for i, s := range stopped {
			before := s.Served()
			_, err := c.complete(ctx, i%len(c.frontends), s.Prompt(1), false)
			if s.Served() != before || err == nil {
				r.Lost = append(r.Lost, fmt.Sprintf("worker %d still routed to after it deregistered", i))
			}
		}
	}
	r.LoadFailed = fleet.LoadFailed.Load()
	return r, nil
}

// probe adds one worker with signatures and times it becoming routable
// through every frontend and visible to each, then one new block of it
// being indexed, then it being removed.
func probe(ctx context.Context, c *client, fleet *Fleet, n int, r *Result) error {
	type fan struct {
		d   time.Duration
		err error
	}
	t0 := time.Now()
	fanc := make(chan fan, 1)
	go func() { d, err := c.waitInstances(ctx, n+1, time.Minute); fanc <- fan{d, err} }()
	s, err := fleet.Start(ctx, Signatures)
	if err != nil {
		return fmt.Errorf("probe worker: %w", err)
	}
	next := 0
	started := time.Now()
	r.WorkerStart = append(r.WorkerStart, started.Sub(t0))
	d, err := c.untilRouted(ctx, s, true, &next, time.Minute)
	if err != nil {
		_ = s.Stop(ctx)
		return err
	}
	// From the worker's registration call to the slowest frontend routing
	// a request to it (its first KV batch, which makes it the only worker
	// caching the requests' blocks, is stored in between).
	r.Routable = append(r.Routable, started.Add(d).Sub(s.registeredAt()))
	f := <-fanc
	if f.err != nil {
		_ = s.Stop(ctx)
		return f.err
	}
	r.FanOutAdd = append(r.FanOutAdd, f.d)
	d, err = c.indexed(ctx, s, rand.Uint64(), time.Minute)
	if err != nil {
		_ = s.Stop(ctx)
		return err
	}
	r.Indexed = append(r.Indexed, d)

	go func() { d, err := c.waitInstances(ctx, n, time.Minute); fanc <- fan{d, err} }()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	d, err = c.untilRouted(ctx, s, false, &next, time.Minute)
	serr := <-stopped
	f = <-fanc
	if err = errors.Join(err, serr, f.err); err != nil {
		return err
	}
	r.Unrouted = append(r.Unrouted, d)
	r.FanOutDel = append(r.FanOutDel, f.d)
	return nil
}

// killProbe adds one worker, waits until every frontend routes to it, then
// kills it (its lease left to expire, as a crashed worker's) and times until
// every frontend's catalog and the router have dropped it. A lease refreshed
// at half its TTL expires between half a TTL and a TTL after the kill.
func killProbe(ctx context.Context, c *client, fleet *Fleet, n int, r *Result) error {
	s, err := fleet.Start(ctx, Signatures)
	if err != nil {
		return fmt.Errorf("killed probe worker: %w", err)
	}
	next := 0
	if _, err := c.untilRouted(ctx, s, true, &next, time.Minute); err != nil {
		_ = s.Stop(ctx)
		return err
	}
	if _, err := c.waitInstances(ctx, n+1, time.Minute); err != nil {
		_ = s.Stop(ctx)
		return err
	}
	id, block := s.InstanceID(), s.signatureHash(0)
	killed := time.Now()
	if err := s.Kill(ctx); err != nil {
		return fmt.Errorf("kill probe worker %x: %w", id, err)
	}
	timeout := fleet.cfg.LeaseTTL + time.Minute
	if _, err := c.waitInstances(ctx, n, timeout); err != nil {
		return fmt.Errorf("killed worker %x: %w", id, err)
	}
	if err := c.dropped(ctx, id, block, time.Until(killed.Add(timeout))); err != nil {
		return err
	}
	r.Killed = append(r.Killed, time.Since(killed))
	return nil
}

func startAll(ctx context.Context, f *Fleet, n, conc, signatures int) ([]*Sim, error) {
	sims := make([]*Sim, n)
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				s, err := f.Start(sctx, signatures)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				sims[i] = s
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return slices.DeleteFunc(sims, func(s *Sim) bool { return s == nil }), err
	}
	return sims, ctx.Err()
}

func stopAll(ctx context.Context, sims []*Sim, conc int) error {
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(sims) {
					return
				}
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				err := sims[i].Stop(sctx)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// uploadTokenizer stores the model's tokenizer files once, as a worker of
// the SDK stores them, and returns the model card's references to them.
func uploadTokenizer(ctx context.Context, addr, dir string) ([]*registryv1.TokenizerArtifact, error) {
	bus, err := eventbusclient.Dial([]string{addr}, eventbusclient.Options{})
	if err != nil {
		return nil, err
	}
	defer bus.Close()
	files, err := qwen3.WriteTo(filepath.Join(dir, "tokenizer"))
	if err != nil {
		return nil, err
	}
	var out []*registryv1.TokenizerArtifact
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(path)
		info, err := putRetrying(ctx, bus, wire.TokenizerObject(qwen3.ModelName, name), f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("upload %s: %w", name, err)
		}
		out = append(out, &registryv1.TokenizerArtifact{Name: name, Sha256: info.GetSha256(), Size: int64(info.GetSize()),
			ObjectKey: wire.TokenizerBucket + "/" + wire.TokenizerObject(qwen3.ModelName, name)})
	}
	return out, nil
}

// putRetrying stores one tokenizer object, retrying as a worker does while
// the eventbus answers Unavailable: a JetStream cluster that has just
// elected its meta leader can still answer "no responders" for a moment
// while the object store's stream is placed. It gives up after a minute.
func putRetrying(ctx context.Context, bus *eventbusclient.Client, name string, f *os.File) (*eventbusv1.ObjectInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second})
	for {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		info, err := bus.PutObject(ctx, wire.TokenizerBucket, name, f, eventbusclient.PutObjectOptions{})
		if err == nil || status.Code(err) != codes.Unavailable {
			return info, err
		}
		if backoff.Sleep(ctx, bo.Next()) != nil {
			return nil, err
		}
	}
}

// removeData removes the data of every part (etcd, NATS, eventbus, the
// tokenizer) and keeps their logs.
func removeData(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// profileWindow profiles every part of the plane and this process (the
// simulated workers) for d.
func profileWindow(ctx context.Context, plane *Plane, dir string, d time.Duration) error {
	f, err := os.Create(filepath.Join(dir, self+".cpu.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	err = plane.Profile(ctx, dir, d)
	pprof.StopCPUProfile()
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
