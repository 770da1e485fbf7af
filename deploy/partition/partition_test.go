package partition_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
)

var cutFor = flag.Duration("cut", 0, "how long each partition lasts (0: 30s, 8s with -short)")

// parallelTests is how many of this package's tests run at once unless
// -parallel says otherwise: at least as many as it has. Each builds its own lab (bridge,
// namespaces, subnet) and spends its time waiting out cuts and timeouts, not
// computing, so they overlap where go test's default (one per core) would
// run them two by two.
const parallelTests = 8

func TestMain(m *testing.M) {
	testwait.AtLeastParallel(parallelTests)
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func cutDuration() time.Duration {
	if *cutFor != 0 {
		return *cutFor
	}
	if testing.Short() {
		return 8 * time.Second
	}
	return 30 * time.Second
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds etcd (from tools/testimages, at go.mod's version),
// nats-server (at go.mod's version), the registry, the eventbus, the router,
// the frontend and the mocker once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "sy-partition-bin-"); buildErr != nil {
			return
		}
		// One go build per module, each building its packages in parallel
		// (the binaries are named after their packages: nats-server,
		// server for etcd's, which is renamed).
		for _, b := range []struct {
			dir  string
			pkgs []string
		}{
			{root, []string{"./services/registry/cmd/registry", "./services/eventbus/cmd/eventbus", "./services/mocker/cmd/mocker",
				"./services/router/cmd/router", "./services/frontend/cmd/frontend", "github.com/nats-io/nats-server/v2"}},
			{filepath.Join(root, "tools", "testimages"), []string{"go.etcd.io/etcd/server/v3"}},
		} {
			cmd := exec.Command("go", append([]string{"build", "-o", binDir + string(filepath.Separator)}, b.pkgs...)...)
			cmd.Dir = b.dir
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %v: %v\n%s", b.pkgs, err, out)
				return
			}
		}
		buildErr = os.Rename(filepath.Join(binDir, "server"), filepath.Join(binDir, "etcd"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// row is one line of the partition table.
type row struct {
	fault                   string
	duration                time.Duration
	tried, succeeded        int
	workersLost, eventsLost int
	converge                time.Duration
}

func printRow(t *testing.T, r row) {
	line := fmt.Sprintf("%-52s %8s %6d %10d %13d %12d %10s",
		r.fault, r.duration.Round(100*time.Millisecond), r.tried, r.succeeded, r.workersLost, r.eventsLost, r.converge.Round(100*time.Millisecond))
	head := fmt.Sprintf("%-52s %8s %6s %10s %13s %12s %10s", "fault", "duration", "tried", "succeeded", "workers lost", "events lost", "converge")
	t.Logf("\n%s\n%s", head, line)
	fmt.Printf("%s\n%s\n", head, line)
}

// cluster is etcd members, an eventbus (embedded NATS) and registry
// replicas, each in a namespace of its own.
type cluster struct {
	l          *lab
	bin        string
	etcd       []*host
	bus        *host
	registries []*host
	regProcs   []*proc
}

func startCluster(t *testing.T, ctx context.Context, l *lab, etcdMembers, registries int) *cluster {
	t.Helper()
	c := &cluster{l: l, bin: binaries(t)}
	var initial []string
	for i := range etcdMembers {
		h := l.host(fmt.Sprintf("etcd%d", i+1))
		c.etcd = append(c.etcd, h)
		initial = append(initial, fmt.Sprintf("%s=http://%s:2380", h.name, h.addr))
	}
	for _, h := range c.etcd {
		l.start(h, h.name, filepath.Join(c.bin, "etcd"),
			"--name", h.name, "--data-dir", filepath.Join(l.dir, h.name),
			"--listen-client-urls", "http://"+h.addr+":2379", "--advertise-client-urls", "http://"+h.addr+":2379",
			"--listen-peer-urls", "http://"+h.addr+":2380", "--initial-advertise-peer-urls", "http://"+h.addr+":2380",
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "sy"+l.id, "--initial-cluster-state", "new")
	}
	c.bus = l.host("eventbus")
	l.start(c.bus, "eventbus", filepath.Join(c.bin, "eventbus"), "--grpc-addr", c.bus.addr+":7002",
		"--data-dir", filepath.Join(l.dir, "eventbus"), "--embedded-nats-port", "-1")
	for i := range registries {
		h := l.host(fmt.Sprintf("registry%d", i+1))
		c.registries = append(c.registries, h)
		c.regProcs = append(c.regProcs, l.start(h, h.name, filepath.Join(c.bin, "registry"), "--grpc-addr", h.addr+":7001",
			"--etcd-endpoints", c.etcdEndpoints()))
	}
	for _, h := range append([]*host{c.bus}, c.registries...) {
		port := "7001"
		if h == c.bus {
			port = "7002"
		}
		if err := waitServing(ctx, h.addr+":"+port); err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
	}
	return c
}

// etcdEndpoints lists the members, the first one first: the member the
// tests cut is etcd1, so the registry's client starts on it.
func (c *cluster) etcdEndpoints() string {
	var eps []string
	for _, h := range c.etcd {
		eps = append(eps, "http://"+h.addr+":2379")
	}
	return strings.Join(eps, ",")
}

func (c *cluster) registryAddrs() []string {
	var a []string
	for _, h := range c.registries {
		a = append(a, h.addr+":7001")
	}
	return a
}

// startWatchedWorkers starts full workers (short under -short: make
// test's form, fewer processes to start on 2 cores), watches the registry
// and waits until it lists them all live, each with its model card.
func (c *cluster) startWatchedWorkers(t *testing.T, ctx context.Context, full, short int) (int, []*proc, *watcher) {
	t.Helper()
	n := full
	if testing.Short() {
		n = short
	}
	workers := c.startWorkers(t, n)
	w := watch(t, ctx, c.registryAddrs())
	if err := w.waitRegistered(ctx, n); err != nil {
		t.Fatal(err)
	}
	return n, workers, w
}

// startWorkers starts n mockers.
func (c *cluster) startWorkers(t *testing.T, n int) []*proc {
	t.Helper()
	var ps []*proc
	for i := range n {
		h := c.l.host(fmt.Sprintf("w%d", i+1))
		p := c.l.start(h, h.name, "/usr/bin/env", "DYN_REQUEST_PLANE=tcp", "DYN_TCP_RPC_HOST="+h.addr,
			filepath.Join(c.bin, "mocker"), "--registry-addr", strings.Join(c.registryAddrs(), ","),
			"--eventbus-addr", c.bus.addr+":7002", "--lease-ttl", "10s")
		ps = append(ps, p)
	}
	return ps
}

// health asks a gRPC server's health service about the whole server.
func health(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	return healthOf(ctx, addr, "")
}

// healthOf asks a gRPC server's health service about one service name.
func healthOf(ctx context.Context, addr, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

func waitServing(ctx context.Context, addr string) error {
	var err error
	for i := 0; i < 600; i++ {
		var st healthpb.HealthCheckResponse_ServingStatus
		if st, err = health(ctx, addr); err == nil && st == healthpb.HealthCheckResponse_SERVING {
			return nil
		} else if err == nil {
			err = fmt.Errorf("health %s", st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (%v)", addr, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not serving: %v", addr, err)
}

// watcher follows a registry's instances and records every id that
// disappeared (a DELETE, or missing from a later snapshot).
type watcher struct {
	cl      *registryclient.Client
	mu      sync.Mutex
	live    map[uint64]bool
	deleted map[uint64]int
	changed chan struct{}
}

func watch(t *testing.T, ctx context.Context, addrs []string) *watcher {
	t.Helper()
	cl, err := registryclient.Dial(addrs, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{cl: cl, live: map[uint64]bool{}, deleted: map[uint64]int{}, changed: make(chan struct{}, 1)}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		var rev int64
		for attempt := 0; attempt < 10000 && wctx.Err() == nil; attempt++ {
			st, err := cl.Raw().WatchInstances(wctx, &registryv1.WatchInstancesRequest{ResumeRevision: rev})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for {
				m, err := st.Recv()
				if err != nil {
					break
				}
				w.apply(m)
				if m.Revision > rev {
					rev = m.Revision
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *watcher) apply(m *registryv1.WatchInstancesResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch m.Kind {
	case registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT:
		now := map[uint64]bool{}
		for _, in := range m.Instances {
			now[in.InstanceId] = true
		}
		for id := range w.live {
			if !now[id] {
				w.deleted[id]++
			}
		}
		w.live = now
	case registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS:
		for _, ev := range m.Events {
			id := ev.GetInstance().GetInstanceId()
			if ev.Type == registryv1.EventType_EVENT_TYPE_DELETE {
				if w.live[id] {
					w.deleted[id]++
				}
				delete(w.live, id)
			} else {
				w.live[id] = true
			}
		}
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watcher) counts() (live, deleted int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.deleted {
		deleted += n
	}
	return len(w.live), deleted
}

// waitLive waits until the watcher sees n instances.
func (w *watcher) waitLive(ctx context.Context, n int) error {
	for i := 0; i < 100000; i++ {
		if live, _ := w.counts(); live == n {
			return nil
		}
		select {
		case <-ctx.Done():
			live, _ := w.counts()
			return fmt.Errorf("%d instances live, want %d: %w", live, n, ctx.Err())
		case <-w.changed:
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("no %d instances", n)
}

// waitRegistered waits until the watcher sees n instances and the registry
// lists a model card of each: every worker has finished registering, so a
// fault injected now meets no registration half done (a worker whose card
// failed after its instance was listed registers again on a new lease, and
// its first instance is deleted).
func (w *watcher) waitRegistered(ctx context.Context, n int) error {
	if err := w.waitLive(ctx, n); err != nil {
		return err
	}
	for i := 0; ; i++ {
		resp, err := w.cl.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
		carded := 0
		if err == nil {
			w.mu.Lock()
			for _, c := range resp.Cards {
				if w.live[c.InstanceId] {
					carded++
				}
			}
			w.mu.Unlock()
			if carded == n {
				return nil
			}
		}
		if i == 600 {
			return fmt.Errorf("%d of %d live instances have a model card (%v)", carded, n, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d live instances have a model card: %w", carded, n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestEtcdMemberCutFromQuorum cuts the etcd member the registry's client
// starts on from the other two (it stays reachable from the registry)
// while 20 workers (5 with -short) keep their sessions through the
// registry: no watcher may see a live worker deleted and no worker may
// exit; after healing the registry serves and lists them all.
func TestEtcdMemberCutFromQuorum(t *testing.T) {
	t.Parallel()
	binaries(t) // before the clock starts: a cold build takes minutes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLab(t)
	c := startCluster(t, ctx, l, 3, 1)
	n, workers, w := c.startWatchedWorkers(t, ctx, 20, 5)
	d := cutDuration()
	r := row{fault: fmt.Sprintf("etcd member cut from the other two, %d workers", n), duration: d}
	l.cut(c.etcd[0], c.etcd[1])
	l.cut(c.etcd[0], c.etcd[2])
	cl, err := registryclient.Dial(c.registryAddrs(), registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	end := time.Now().Add(d)
	for time.Now().Before(end) && r.tried < 10000 {
		r.tried++
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.Raw().ListInstances(lctx, &registryv1.ListInstancesRequest{})
		lcancel()
		if err == nil && len(resp.Instances) == n {
			r.succeeded++
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.heal(c.etcd[0], c.etcd[1])
	l.heal(c.etcd[0], c.etcd[2])
	healed := time.Now()
	if err := w.waitLive(ctx, n); err != nil {
		t.Error(err)
	}
	if err := waitServing(ctx, c.registries[0].addr+":7001"); err != nil {
		t.Error(err)
	}
	r.converge = time.Since(healed)
	_, r.workersLost = w.counts()
	for _, p := range workers {
		if !p.running() {
			r.workersLost++
			t.Errorf("%s exited: %v", p.name, p.err)
		}
	}
	printRow(t, r)
	// Lists during the cut may fail (the registry's etcd client may sit on
	// the member without a leader, and a linearizable read then has no
	// answer): they are counted, not judged. What must hold is that no
	// worker was lost.
	if r.workersLost != 0 {
		t.Errorf("%d live workers deleted or exited during the cut", r.workersLost)
	}
}

// TestRegistryCutFromEtcd cuts one registry replica from every etcd member
// (clients still reach it): it must report NOT_SERVING, and a client given
// both replicas must keep listing through the other, while the workers'
// lease keep-alives move there too (no watcher may see a live worker
// deleted). Clients leave the cut replica because the registry client
// prefers replicas whose health says SERVING (grpcclient.PreferServing).
func TestRegistryCutFromEtcd(t *testing.T) {
	t.Parallel()
	binaries(t) // before the clock starts: a cold build takes minutes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLab(t)
	c := startCluster(t, ctx, l, 3, 2)
	c.startWorkers(t, 2)
	w := watch(t, ctx, c.registryAddrs())
	if err := w.waitRegistered(ctx, 2); err != nil {
		t.Fatal(err)
	}
	cl, err := registryclient.Dial(c.registryAddrs(), registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	d := cutDuration()
	r := row{fault: "registry replica cut from etcd", duration: d}
	cut := c.registries[0]
	for _, e := range c.etcd {
		l.cut(cut, e)
	}
	start := time.Now()
	var notServing time.Duration
	end := start.Add(d)
	for time.Now().Before(end) && r.tried < 10000 {
		if notServing == 0 {
			if st, err := health(ctx, cut.addr+":7001"); err == nil && st == healthpb.HealthCheckResponse_NOT_SERVING {
				notServing = time.Since(start)
			}
		}
		r.tried++
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cl.Raw().ListInstances(lctx, &registryv1.ListInstancesRequest{})
		lcancel()
		if err == nil && len(resp.Instances) == 2 {
			r.succeeded++
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, e := range c.etcd {
		l.heal(cut, e)
	}
	healed := time.Now()
	if err := waitServing(ctx, cut.addr+":7001"); err != nil {
		t.Error(err)
	}
	r.converge = time.Since(healed)
	_, r.workersLost = w.counts()
	printRow(t, r)
	t.Logf("the cut registry reported NOT_SERVING %s after the cut", notServing.Round(100*time.Millisecond))
	if notServing == 0 {
		t.Errorf("the registry cut from etcd never reported NOT_SERVING in %s", d)
	}
	if r.workersLost != 0 {
		t.Errorf("%d live workers deleted", r.workersLost)
	}
	// The requests of the first health interval may land on the cut
	// replica; every one after must not fail.
	if r.tried-r.succeeded > r.tried/2 {
		t.Errorf("%d of %d lists failed with a replica still serving", r.tried-r.succeeded, r.tried)
	}
}
