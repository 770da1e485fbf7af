package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/registry/etcdcluster"
)

// open reports whether the keepaliver holds a stream.
func (k *keepaliver) open() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur != nil
}

// TestKeepAliveStreamReopensWithoutARefresh restarts etcd under a registry
// store and checks that its shared keep-alive stream is open again before
// any lease is refreshed: a stream opened only by the next refresh could
// meet an etcd that had begun a graceful stop, which refuses new streams
// while it keeps expiring leases. For a stream that broke and one that
// never opened (etcd away when the store started), the keepaliver opens a
// stream by itself once etcd is back, and the lease it refreshes then is
// etcd's, with its TTL.
func TestKeepAliveStreamReopensWithoutARefresh(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// startAway starts the store while etcd is stopped.
		startAway bool
	}{
		{name: "a stream that broke"},
		{name: "etcd away when the store started", startAway: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := EmbeddedEtcdConfig{Dir: t.TempDir(), ClientURL: "http://" + testport.Shareable(t), PeerURL: "http://" + testport.Shareable(t), Fast: true}
			start := func() *EmbeddedEtcd {
				t.Helper()
				var e *EmbeddedEtcd
				var err error
				for range 50 { // the stopped etcd's ports may take a moment to free
					if e, err = StartEmbeddedEtcd(cfg); err == nil {
						return e
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Fatal(err)
				return nil
			}
			e := start()
			cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lease, err := cli.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}

			var k *keepaliver
			if tc.startAway {
				e.Close()
				k = newKeepaliver(cli, slog.New(slog.DiscardHandler))
			} else {
				k = newKeepaliver(cli, slog.New(slog.DiscardHandler))
				testwait.Until(t, 30*time.Second, "the first stream to open", k.open)
				if _, found, err := k.once(ctx, uint64(lease.ID)); err != nil || !found {
					t.Fatalf("refresh with etcd up: found %v, err %v", found, err)
				}
				e.Close()
				testwait.Until(t, 30*time.Second, "the stream to break with etcd stopped", func() bool { return !k.open() })
			}
			defer k.close()

			e = start()
			defer e.Close()
			testwait.Until(t, 30*time.Second, "a stream to open without a refresh", k.open)
			ttl, found, err := k.once(ctx, uint64(lease.ID))
			if err != nil || !found || ttl <= 0 {
				t.Fatalf("refresh after etcd's return: ttl %v, found %v, err %v", ttl, found, err)
			}
		})
	}
}

// endpoint is the member the current stream is on ("" for any member, or
// "none" when no stream is open).
func (k *keepaliver) endpoint() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == nil {
		return "none"
	}
	return k.cur.endpoint
}

// TestKeepAliveStreamFollowsTheLeader runs the shared keep-alive stream on a
// three-member cluster and checks that it is on the member that leads, and
// on the new leader after leadership moves: handed over (every refresh meanwhile
// answered: the old stream answers what was sent on it) or lost with the
// leader's member (refreshes may fail while it is away; clients retry).
func TestKeepAliveStreamFollowsTheLeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// move makes another member lead; it returns that member's index.
		move func(t *testing.T, c *etcdcluster.Cluster, leader int) int
		// lossless: no refresh may fail while leadership moves.
		lossless bool
	}{
		{name: "leader stays", lossless: true, move: func(_ *testing.T, _ *etcdcluster.Cluster, leader int) int { return leader }},
		{name: "leadership handed over", lossless: true, move: func(t *testing.T, c *etcdcluster.Cluster, leader int) int {
			to := (leader + 1) % 3
			lc := newEtcdClient(t, c.Endpoints[leader])
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := lc.Status(ctx, c.Endpoints[to])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lc.MoveLeader(ctx, st.Header.MemberId); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, 30*time.Second, "the new leader", func() bool { return c.Leader() == to })
			return to
		}},
		{name: "leader stopped", move: func(t *testing.T, c *etcdcluster.Cluster, leader int) int {
			c.Stop(leader)
			var to int
			testwait.Until(t, 30*time.Second, "another member to lead", func() bool {
				to = c.Leader()
				return to >= 0 && to != leader
			})
			return to
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := etcdcluster.Start(t, 3)
			var leader int
			testwait.Until(t, 30*time.Second, "a leader", func() bool { leader = c.Leader(); return leader >= 0 })
			cli := newEtcdClient(t, c.Endpoints...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lease, err := cli.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			k := newKeepaliverChecking(cli, slog.New(slog.DiscardHandler), 20*time.Millisecond)
			defer k.close()
			testwait.Until(t, 30*time.Second, "the stream on the leader", func() bool { return k.endpoint() == c.Endpoints[leader] })

			// Refresh without pause while leadership moves, and on until
			// the stream is on the new leader and has answered a few.
			stop := make(chan struct{})
			var refreshed, failed atomic.Int64
			var firstErr atomic.Value
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					_, found, err := k.once(rctx, uint64(lease.ID))
					rcancel()
					if err != nil || !found {
						if failed.Add(1) == 1 {
							firstErr.Store(fmt.Sprintf("found %v, err %v", found, err))
						}
					} else {
						refreshed.Add(1)
					}
				}
			}()
			to := tc.move(t, c, leader)
			testwait.Until(t, 30*time.Second, "the stream on the new leader", func() bool { return k.endpoint() == c.Endpoints[to] })
			after := refreshed.Load()
			testwait.Until(t, 30*time.Second, "refreshes on the new leader", func() bool { return refreshed.Load() >= after+20 })
			close(stop)
			<-done
			if tc.lossless && failed.Load() > 0 {
				t.Errorf("%d of %d refreshes failed while leadership moved, the first: %v", failed.Load(), failed.Load()+refreshed.Load(), firstErr.Load())
			}
			ttl, found, err := k.once(ctx, uint64(lease.ID))
			if err != nil || !found || ttl <= 0 {
				t.Fatalf("refresh on the new leader: ttl %v, found %v, err %v", ttl, found, err)
			}
			t.Logf("%d refreshes answered, %d failed while leadership moved", refreshed.Load(), failed.Load())
		})
	}
}

func newEtcdClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// BenchmarkLeaseRenewal refreshes leases through the keepaliver on a
// three-member cluster: on a client of the leader alone, of one follower
// alone (where every renewal is forwarded to the leader), and of every
// member (the keepaliver puts its stream on the leader). CPU is the whole
// process's, which holds the three members too.
func BenchmarkLeaseRenewal(b *testing.B) {
	c := etcdcluster.Start(b, 3)
	var leader int
	testwait.Until(b, 30*time.Second, "a leader", func() bool { leader = c.Leader(); return leader >= 0 })
	for _, bc := range []struct {
		name      string
		endpoints []string
	}{
		{"leader", []string{c.Endpoints[leader]}},
		{"follower", []string{c.Endpoints[(leader+1)%3]}},
		{"every member", c.Endpoints},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cli := newEtcdClient(b, bc.endpoints...)
			ctx := context.Background()
			var leases []uint64
			for range 64 {
				l, err := cli.Grant(ctx, 600)
				if err != nil {
					b.Fatal(err)
				}
				leases = append(leases, uint64(l.ID))
			}
			k := newKeepaliverChecking(cli, slog.New(slog.DiscardHandler), 20*time.Millisecond)
			defer k.close()
			if len(bc.endpoints) > 1 {
				testwait.Until(b, 30*time.Second, "the stream on the leader", func() bool { return k.endpoint() == c.Endpoints[leader] })
			}
			var next atomic.Uint64
			var cpu0 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
			b.SetParallelism(16) // many sessions refresh at once
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, found, err := k.once(ctx, leases[next.Add(1)%uint64(len(leases))]); err != nil || !found {
						b.Errorf("refresh: found %v, err %v", found, err)
						return
					}
				}
			})
			b.StopTimer()
			var cpu1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu1)
			used := time.Duration(cpu1.Utime.Nano() + cpu1.Stime.Nano() - cpu0.Utime.Nano() - cpu0.Stime.Nano())
			b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// TestKeepAliveJoinsARefreshInFlight refreshes one lease from many callers
// while etcd's answers are held back (a loopback proxy stops forwarding
// them): one renewal goes to etcd, every caller waits for it, and every one
// gets its answer once the proxy forwards again. A refresh of another lease
// sends its own.
func TestKeepAliveJoinsARefreshInFlight(t *testing.T) {
	t.Parallel()
	p, cli := etcdBehindHoldingProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leases []int64
	for range 2 {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, int64(l.ID))
	}
	k := newKeepaliver(cli, slog.New(slog.DiscardHandler))
	defer k.close()
	testwait.Until(t, 30*time.Second, "the stream to open", k.open)
	if _, found, err := k.once(ctx, uint64(leases[0])); err != nil || !found {
		t.Fatalf("first refresh: found %v, err %v", found, err)
	}
	sent0 := k.sentOnStream()

	for _, tc := range []struct {
		name string
		// callers of each lease, in the order of leases.
		callers  []int
		wantSent int
	}{
		{name: "one caller", callers: []int{1}, wantSent: 1},
		{name: "ten callers of one lease", callers: []int{10}, wantSent: 1},
		{name: "callers of two leases", callers: []int{5, 3}, wantSent: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.hold(true)
			total := 0
			errs := make(chan error, 64)
			for i, n := range tc.callers {
				total += n
				for range n {
					go func() {
						_, found, err := k.once(ctx, uint64(leases[i]))
						if err == nil && !found {
							err = errors.New("lease not found")
						}
						errs <- err
					}()
				}
			}
			testwait.Until(t, 30*time.Second, "every caller waiting", func() bool { return k.waiting() == total })
			if got := k.sentOnStream() - sent0; got != tc.wantSent {
				t.Errorf("renewals sent to etcd: %d, want %d", got, tc.wantSent)
			}
			sent0 += tc.wantSent
			p.hold(false)
			for range total {
				if err := <-errs; err != nil {
					t.Errorf("refresh: %v", err)
				}
			}
		})
	}
}

// sentOnStream is the renewals sent on the current stream.
func (k *keepaliver) sentOnStream() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == nil {
		return 0
	}
	return k.cur.sent
}

// waiting is the refreshes waiting for an answer on the current stream.
func (k *keepaliver) waiting() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	if k.cur != nil {
		for _, q := range k.cur.waiters {
			n += len(q)
		}
	}
	return n
}

// etcdBehindHoldingProxy starts an embedded etcd and a client that reaches
// it through a holdingProxy.
func etcdBehindHoldingProxy(t *testing.T) (*holdingProxy, *clientv3.Client) {
	t.Helper()
	e, err := StartEmbeddedEtcd(EmbeddedEtcdConfig{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	p := startHoldingProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	return p, newEtcdClient(t, "http://"+p.addr)
}

// holdingProxy forwards TCP connections to one address on loopback and can
// hold back what the server sends (the client's bytes still go through).
type holdingProxy struct {
	addr string
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func startHoldingProxy(t *testing.T, upstream string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{addr: ln.Addr().String()}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		_ = ln.Close()
		p.hold(false)
		connsMu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, u)
			connsMu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(u, c)
				_ = u.Close()
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						p.mu.Lock()
						for p.held {
							p.cond.Wait()
						}
						p.mu.Unlock()
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_ = c.Close()
			}()
		}
	}()
	return p
}

func (p *holdingProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// TestKeepAliveRefreshesReturnWhileEtcdIsStuck fills the keep-alive stream
// while etcd's side of it is held back (a loopback proxy stops forwarding
// what etcd sends, its flow-control window updates too): renewals of more
// leases than HTTP/2's windows hold, so sending blocks. Every refresh must
// still return when its caller gives up, and once etcd's bytes flow again
// the stream must answer: a send blocked while holding what the answers'
// reader needs would stop both for good.
func TestKeepAliveRefreshesReturnWhileEtcdIsStuck(t *testing.T) {
	t.Parallel()
	p, cli := etcdBehindHoldingProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	k := newKeepaliver(cli, slog.New(slog.DiscardHandler))
	defer k.close()
	testwait.Until(t, 30*time.Second, "the stream to open", k.open)

	p.hold(true)
	// Renewals of leases that do not exist are answered "not found" and
	// are as large on the wire as any: 20,000 are well past the 64 KiB
	// windows of both directions.
	// 64 callers each refresh one lease after another, giving up on each
	// after a millisecond (no answer can come while etcd is held).
	const n, callers = 20000, 64
	var returned atomic.Int64
	for c := range callers {
		go func() {
			for i := c; i < n; i += callers {
				rctx, rcancel := context.WithTimeout(ctx, time.Millisecond)
				_, _, _ = k.once(rctx, uint64(1<<40+i))
				rcancel()
				returned.Add(1)
			}
		}()
	}
	testwait.Until(t, 30*time.Second, "every refresh to return when its caller gave up", func() bool { return returned.Load() == n })
	if w := k.waiting(); w != n {
		t.Errorf("%d refreshes wait for an answer, want %d (one each, none answered while etcd is held)", w, n)
	}
	p.hold(false)
	var ttl time.Duration
	var found bool
	testwait.UntilNil(t, 30*time.Second, "a refresh answered once etcd's bytes flow again", func() error {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		ttl, found, err = k.once(rctx, uint64(lease.ID))
		return err
	})
	if !found || ttl <= 0 {
		t.Fatalf("refresh after the hold: ttl %v, found %v", ttl, found)
	}
}

// TestIsNotPrimary checks which stream errors make a refresh ask again: only
// etcd's answer that the member asked cannot confirm it leads.
func TestIsNotPrimary(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"etcd's answer on the stream", status.Error(codes.Unknown, "not a primary lessor"), true},
		{"another code, the same message", status.Error(codes.Unavailable, "not a primary lessor"), true},
		{"lease not found", status.Error(codes.NotFound, "etcdserver: requested lease not found"), false},
		{"leader changed", status.Error(codes.Unavailable, "etcdserver: leader changed"), false},
		{"stream ended", fmt.Errorf("%w: etcd ended the keep-alive stream", ErrUnavailable), false},
		{"canceled", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isNotPrimary(tc.err); got != tc.want {
				t.Errorf("isNotPrimary(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
