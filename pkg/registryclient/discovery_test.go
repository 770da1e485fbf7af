package registryclient_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/registry/etcdcluster"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// A stopped member of an embedded etcd cluster leaves its peers' HTTP
// connections to it (rafthttp's transports, and its own server side) to
// close on their own time: goroutines of etcd's net/http, not of ours.
func TestMain(m *testing.M) {
	// The tests wait out etcd restarts, outages and lease refreshes.
	testwait.AtLeastParallel(6)
	goleak.VerifyTestMain(m, etcdcluster.KnownGoroutines()...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, addrs ...string) *registryclient.Client {
	t.Helper()
	c, err := registryclient.Dial(addrs, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func instance(ep string) *registryv1.Instance {
	return &registryv1.Instance{Namespace: "ns", Component: "worker", Endpoint: ep, Transport: &commonv1.Transport{Tcp: "127.0.0.1:9"}}
}

// openSession opens a session of the given TTL (0: the default) on c. The
// tests close it themselves (some check what Close says, and it goes before
// their cleanups, while what they started is still there).
func openSession(ctx context.Context, t *testing.T, c *registryclient.Client, ttl time.Duration) *registryclient.Session {
	t.Helper()
	s, err := registryclient.NewSession(ctx, c, registryclient.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// register registers instance(ep) on s.
func register(ctx context.Context, t *testing.T, s *registryclient.Session, ep string) *registryv1.Instance {
	t.Helper()
	in, err := s.Register(ctx, instance(ep))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// recorder collects a watcher's changes.
type recorder struct {
	mu      sync.Mutex
	puts    map[string]int
	deletes map[string]int
}

func newRecorder() *recorder { return &recorder{puts: map[string]int{}, deletes: map[string]int{}} }

func (r *recorder) onChange(cs []registryclient.Change[*registryv1.Instance]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		if c.Deleted {
			r.deletes[registryclient.InstanceKey(c.Item)]++
		} else {
			r.puts[registryclient.InstanceKey(c.Item)]++
		}
	}
}

func (r *recorder) counts(key string) (puts, deletes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.puts[key], r.deletes[key]
}

func watch(t *testing.T, c *registryclient.Client, rec *recorder) *registryclient.Watcher[*registryv1.Instance] {
	t.Helper()
	w := registryclient.WatchInstances(c, &registryv1.InstanceFilter{Namespace: "ns"}, registryclient.WatchOptions[*registryv1.Instance]{OnChange: rec.onChange})
	t.Cleanup(w.Close)
	if err := w.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return w
}

// waitProgress waits, woken by each of the session's keep-alive outcomes,
// until cond holds for its progress, and returns that progress. The session
// ending, or ctx, fails the test first.
func waitProgress(ctx context.Context, t *testing.T, s *registryclient.Session, what string, cond func(registryclient.KeepAliveProgress) bool) registryclient.KeepAliveProgress {
	t.Helper()
	for {
		p, changed := s.Progress()
		if cond(p) {
			return p
		}
		select {
		case <-changed:
		case <-s.Done():
			t.Fatalf("session ended waiting for %s (keep-alive progress %+v): %v", what, p, s.Err())
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (keep-alive progress %+v)", what, p)
		}
	}
}

// answered returns a condition for waitProgress: n more keep-alives answered
// than in from.
func answered(from registryclient.KeepAliveProgress, n uint64) func(registryclient.KeepAliveProgress) bool {
	return func(p registryclient.KeepAliveProgress) bool { return p.Answered >= from.Answered+n }
}

func TestSessionRegisterWatchClose(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	rec := newRecorder()
	w := watch(t, c, rec)

	s := openSession(ctx, t, c, 5*time.Second)
	in := register(ctx, t, s, "generate")
	if in.InstanceId != s.ID() {
		t.Fatalf("instance id %x, want the lease id %x", in.InstanceId, s.ID())
	}
	key := registryclient.InstanceKey(in)
	testwait.Until(t, 20*time.Second, "the watcher to see the instance", func() bool { p, _ := rec.counts(key); return p == 1 })
	if items := w.Items(); len(items) != 1 || items[0].Transport.GetTcp() != "127.0.0.1:9" {
		t.Fatalf("watcher items = %v", items)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the watcher to see the DELETE", func() bool { _, d := rec.counts(key); return d == 1 })
	if len(w.Items()) != 0 {
		t.Fatalf("watcher still holds %v", w.Items())
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if s.Err() != nil {
		t.Fatalf("Err after a clean Close = %v, want nil", s.Err())
	}
	// The keep-alive has ended: Progress's channel stays closed, so a
	// waiter cannot hang on a closed session.
	if _, changed := s.Progress(); !isClosed(changed) {
		t.Fatal("Progress's channel open after Close")
	}
}

// TestSessionAbandonLeavesLeaseToExpire: an abandoned session stops its
// keep-alive without revoking the lease, as a crashed worker's would: the
// instance stays until the TTL runs out on the registry, then the watcher
// sees it deleted. Done closes at once with no error, and Close afterwards
// does nothing.
func TestSessionAbandonLeavesLeaseToExpire(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	rec := newRecorder()
	w := watch(t, c, rec)

	s := openSession(ctx, t, c, 5*time.Second)
	key := registryclient.InstanceKey(register(ctx, t, s, "generate"))
	testwait.Until(t, 20*time.Second, "the watcher to see the instance", func() bool { p, _ := rec.counts(key); return p == 1 })
	s.Abandon()
	if !isClosed(s.Done()) || s.Err() != nil {
		t.Fatalf("after Abandon: Done closed %v, Err %v; want closed, nil", isClosed(s.Done()), s.Err())
	}
	if _, changed := s.Progress(); !isClosed(changed) {
		t.Fatal("Progress's channel open after Abandon")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close after Abandon = %v, want nil", err)
	}
	// Not revoked: the lease was refreshed at most half its TTL ago, so
	// the instance is still there now.
	if _, d := rec.counts(key); d != 0 || len(w.Items()) != 1 {
		t.Fatalf("after Abandon and Close: %d deletes, %d items; want the instance kept until its TTL", d, len(w.Items()))
	}
	testwait.Until(t, 20*time.Second, "the lease to expire and the watcher to see the DELETE", func() bool { _, d := rec.counts(key); return d == 1 })
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestSessionProgressCountsRefreshes: every refresh the registry answers is
// counted and wakes Progress's channel, and the channel handed out before it
// is the one closed.
func TestSessionProgressCountsRefreshes(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	ctx := ctxT(t)
	s := openSession(ctx, t, dial(t, reg.Addr), 1*time.Second)
	defer s.Close(ctx)
	from, changed := s.Progress()
	if from != (registryclient.KeepAliveProgress{}) {
		t.Fatalf("progress of a new session = %+v, want zero", from)
	}
	waitProgress(ctx, t, s, "two keep-alives answered", answered(from, 2))
	if !isClosed(changed) {
		t.Fatal("the channel returned before the refreshes was not closed")
	}
}

func TestSessionMovesToAnotherRegistry(t *testing.T) {
	t.Parallel()
	etcd := registrytest.StartEtcd(t)
	r1 := registrytest.StartRegistry(t, etcd.Endpoints)
	r2 := registrytest.StartRegistry(t, etcd.Endpoints)
	ctx := ctxT(t)

	rec := newRecorder()
	w := watch(t, dial(t, r2.Addr), rec)
	c := dial(t, r1.Addr, r2.Addr) // pick-first: the session starts on r1
	s := openSession(ctx, t, c, 2*time.Second)
	defer s.Close(ctx)
	in := register(ctx, t, s, "generate")
	key := registryclient.InstanceKey(in)
	testwait.Until(t, 20*time.Second, "the instance to appear", func() bool { p, _ := rec.counts(key); return p == 1 })

	r1.Stop() // kill the replica the session keeps alive through
	// From here on only r2 can answer (bar one answer r1 sent as it
	// stopped). Three answers, half a TTL apart, renew the lease past the
	// deadline it had on r1: without failover it would have expired.
	from, _ := s.Progress()
	waitProgress(ctx, t, s, "three keep-alives answered through r2", answered(from, 3))
	if _, d := rec.counts(key); d != 0 {
		t.Fatalf("watcher saw %d DELETEs of the instance; the session did not fail over", d)
	}
	select {
	case <-s.Done():
		t.Fatalf("session lost its lease: %v", s.Err())
	default:
	}
	if len(w.Items()) != 1 {
		t.Fatalf("watcher items = %v, want the instance", w.Items())
	}
}

func TestSessionSurvivesEtcdRestart(t *testing.T) {
	t.Parallel()
	etcd, reg := registrytest.Start(t)
	ctx := ctxT(t)
	rec := newRecorder()
	w := watch(t, dial(t, reg.Addr), rec)
	c := dial(t, reg.Addr)
	s := openSession(ctx, t, c, 10*time.Second)
	defer s.Close(ctx)
	in := register(ctx, t, s, "generate")
	key := registryclient.InstanceKey(in)
	testwait.Until(t, 20*time.Second, "the instance to appear", func() bool { p, _ := rec.counts(key); return p == 1 })

	from, _ := s.Progress()
	etcd.Stop()
	// Keep etcd down until a keep-alive has failed on it, so that the outage
	// really falls on a refresh of the lease.
	down := waitProgress(ctx, t, s, "a keep-alive to fail while etcd is down", func(p registryclient.KeepAliveProgress) bool { return p.Failed > from.Failed })
	etcd.Start()

	// After the restart the same instance is still there, under the same
	// lease, without re-registering; a new registration proves the watch
	// resumed too.
	later, err := s.Register(ctx, instance("later"))
	if err != nil {
		t.Fatalf("register after the etcd restart: %v", err)
	}
	testwait.Until(t, 20*time.Second, "the watcher to resume and see the new instance", func() bool {
		p, _ := rec.counts(registryclient.InstanceKey(later))
		return p == 1
	})
	// Keep-alives flow again: an answer after the outage means etcd still
	// had the lease, with the instance on it, after its restart.
	waitProgress(ctx, t, s, "a keep-alive answered after the etcd restart", answered(down, 1))
	select {
	case <-s.Done():
		t.Fatalf("session lost its lease: %v", s.Err())
	default:
	}
	if p, d := rec.counts(key); p != 1 || d != 0 {
		t.Fatalf("instance seen put %d times and deleted %d times; want 1 and 0", p, d)
	}
	if n := len(w.Items()); n != 2 {
		t.Fatalf("watcher holds %d instances, want 2", n)
	}
}

func TestSessionReportsLeaseLoss(t *testing.T) {
	t.Parallel()
	etcd, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	s := openSession(ctx, t, c, 2*time.Second)
	defer s.Close(ctx)
	// Someone else revokes the lease (an operator, a fencing controller):
	// not through the registry, which only lets the lease's holder end it.
	if _, err := c.Raw().Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: s.ID()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Deregister without the session's lease token: %v, want PermissionDenied", err)
	}
	etcd.RevokeLease(ctx, s.ID())
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("Done never closed after the lease was revoked")
	}
	if !errors.Is(s.Err(), registryclient.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", s.Err())
	}
}

// TestSessionOutlivesItsRegistry: a registry that is gone past the lease's
// deadline does not end the session (the lease may have outlived the outage);
// the answer of the registry once it is back does. Here etcd stayed up, so the
// lease expired, and the session reports it lost.
func TestSessionOutlivesItsRegistry(t *testing.T) {
	t.Parallel()
	etcd, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	s := openSession(ctx, t, c, 1*time.Second)
	defer s.Close(ctx)
	reg.Stop()
	testwait.Until(t, 20*time.Second, "the session to notice the deadline passed", s.Expired)
	from, _ := s.Progress()
	waitProgress(ctx, t, s, "three more failed keep-alives past the deadline", func(p registryclient.KeepAliveProgress) bool { return p.Failed >= from.Failed+3 })
	select {
	case <-s.Done():
		t.Fatalf("session ended while the registry was unreachable: %v", s.Err())
	default:
	}
	registrytest.StartRegistryAt(t, etcd.Endpoints, reg.Addr)
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("Done never closed once the registry said the lease is gone")
	}
	if !errors.Is(s.Err(), registryclient.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", s.Err())
	}
}

// TestSessionKeepsLeaseThroughLongEtcdOutage: etcd down for longer than the
// TTL, then back on its data: etcd extends its leases when it restarts, and
// the session, still trying, finds its lease alive with the same id. etcd
// gives the lease only its TTL (3 s) from its return, so the session must
// reach it within that; the registry answers "etcd unavailable" at once (it
// knows the lease's token without etcd), and the outage lasts a dozen failed
// attempts, past which an unbounded backoff would wait longer than the TTL
// between them (it grows to 5 s). The TTL leaves room for the registry's own
// reconnection to etcd (its backoff is up to a second) and for the session's
// attempts a quarter TTL apart; with a 1 s lease the two together sometimes
// took longer than the lease on a loaded machine, and etcd expired it.
func TestSessionKeepsLeaseThroughLongEtcdOutage(t *testing.T) {
	t.Parallel()
	etcd, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	s := openSession(ctx, t, c, 3*time.Second)
	defer s.Close(ctx)
	in := register(ctx, t, s, "generate")
	etcd.Stop()
	testwait.Until(t, 20*time.Second, "the session to notice the deadline passed", s.Expired)
	before, _ := s.Progress()
	waitProgress(ctx, t, s, "a dozen failed keep-alives", func(p registryclient.KeepAliveProgress) bool { return p.Failed >= before.Failed+12 })
	etcd.Start()
	testwait.Until(t, 20*time.Second, "the keep-alive to reach the lease again", func() bool { return !s.Expired() })
	select {
	case <-s.Done():
		t.Fatalf("session lost its lease: %v", s.Err())
	default:
	}
	resp, err := c.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Instances) != 1 || resp.Instances[0].InstanceId != in.InstanceId {
		t.Fatalf("instances after the outage = %v, want instance %x", resp.Instances, in.InstanceId)
	}
}

// TestSessionKeepsLeaseThroughGracefulEtcdStop stops etcd right after a
// session registered, before its first refresh. etcd stops gracefully: while
// a watch is open it takes its request timeout (about 5 s) to stop, serving
// the streams it has and expiring leases, and refusing new streams and
// connections. A 2 s lease lives only if its refresh goes over what the
// registry already has open: its keep-alive stream to etcd, opened when it
// started, and the token check without an etcd read. Opened on the first
// refresh (or a token read first), the refresh could not reach etcd, etcd
// expired the lease, the watcher saw the DELETE and, once etcd was back, the
// lease was gone (seen in the frontend's TestEtcdOutage beside other tests:
// model cards gone during the whole outage).
func TestSessionKeepsLeaseThroughGracefulEtcdStop(t *testing.T) {
	t.Parallel()
	etcd, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	var (
		mu      sync.Mutex
		deletes int
	)
	// The registry watches etcd for it: etcd's stop waits for that stream.
	w := registryclient.WatchInstances(c, &registryv1.InstanceFilter{Namespace: "ns"}, registryclient.WatchOptions[*registryv1.Instance]{
		OnChange: func(chs []registryclient.Change[*registryv1.Instance]) {
			mu.Lock()
			defer mu.Unlock()
			for _, ch := range chs {
				if ch.Deleted {
					deletes++
				}
			}
		},
	})
	defer w.Close()
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	s := openSession(ctx, t, c, 2*time.Second)
	defer s.Close(ctx)
	in := register(ctx, t, s, "generate")
	testwait.Until(t, 20*time.Second, "the watcher to see the instance", func() bool { return len(w.Items()) == 1 })
	etcd.Stop() // returns once etcd has stopped: the lease's first refresh falls in it
	etcd.Start()
	testwait.Until(t, 20*time.Second, "the keep-alive to reach the lease again", func() bool {
		select {
		case <-s.Done():
			t.Fatalf("session lost its lease: %v", s.Err())
		default:
		}
		p, _ := s.Progress()
		return !s.Expired() && p.Answered > 0
	})
	resp, err := c.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Instances) != 1 || resp.Instances[0].InstanceId != in.InstanceId {
		t.Fatalf("instances after etcd's stop = %v, want instance %x", resp.Instances, in.InstanceId)
	}
	mu.Lock()
	defer mu.Unlock()
	if deletes != 0 {
		t.Fatalf("the watcher saw %d DELETEs: etcd expired the lease while it stopped", deletes)
	}
}

func TestModelWatcher(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	w := registryclient.WatchModels(c, &registryv1.ModelFilter{}, registryclient.WatchOptions[*registryv1.ModelCard]{})
	defer w.Close()
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	s := openSession(ctx, t, c, 0)
	card := &registryv1.ModelCard{Namespace: "ns", Component: "worker", Endpoint: "generate", ModelName: "Qwen/Qwen3-0.6B", BlockSize: 16}
	if err := s.RegisterModel(ctx, card); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the card to appear", func() bool { return len(w.Items()) == 1 })
	if got := w.Items()[0]; got.ModelName != "Qwen/Qwen3-0.6B" || got.InstanceId != s.ID() {
		t.Fatalf("card = %v", got)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the card to go", func() bool { return len(w.Items()) == 0 })
}

func TestPodFromEnv(t *testing.T) {
	tests := []struct {
		name         string
		pod, ns, uid string
		want         *registryv1.KubernetesPod
	}{
		{"all set", "worker-0", "dynamo", "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a10", &registryv1.KubernetesPod{Name: "worker-0", Namespace: "dynamo", Uid: "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a10"}},
		{"no uid", "worker-0", "dynamo", "", nil},
		{"no name", "", "dynamo", "6f1b3c1e", nil},
		{"none", "", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("POD_NAME", tt.pod)
			t.Setenv("POD_NAMESPACE", tt.ns)
			t.Setenv("POD_UID", tt.uid)
			if diff := cmp.Diff(tt.want, registryclient.PodFromEnv(), protocmp.Transform()); diff != "" {
				t.Fatalf("PodFromEnv() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadyAfterOnChange: WaitReady returns only once OnChange has taken
// the first snapshot, so that a caller acting on readiness (the router
// drops restored workers the registry does not list) sees the instances
// OnChange recorded. It once returned before, and a restarted router
// dropped the worker its snapshot had just restored.
func TestReadyAfterOnChange(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	c := dial(t, reg.Addr)
	ctx := ctxT(t)
	s := openSession(ctx, t, c, 0)
	defer s.Close(ctx)
	register(ctx, t, s, "generate")
	entered, release := make(chan struct{}), make(chan struct{})
	var seen atomic.Int32
	w := registryclient.WatchInstances(c, &registryv1.InstanceFilter{Namespace: "ns"}, registryclient.WatchOptions[*registryv1.Instance]{
		OnChange: func(cs []registryclient.Change[*registryv1.Instance]) {
			if seen.Load() == 0 {
				close(entered)
				<-release
			}
			seen.Add(int32(len(cs)))
		}})
	defer w.Close()
	go func() {
		<-entered
		close(release)
	}()
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n := seen.Load(); n != 1 {
		t.Fatalf("ready with %d instances seen by OnChange, want the registered one", n)
	}
}
