package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdlease "go.etcd.io/etcd/server/v3/lease"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/backoff"
)

// keepaliver refreshes leases on behalf of clients over one shared etcd
// LeaseKeepAlive stream: a client keep-alive becomes one request on that
// stream, or joins the one in flight for its lease. A lease thus lives exactly as long as
// its client keeps asking, through whichever registry replica it reaches,
// and ten thousand sessions cost one etcd stream instead of a stream per
// refresh. A broken stream fails its waiters (the clients retry), and a new
// one is opened at once in the background, retried until etcd accepts it (as
// etcd's own client does for its keep-alive stream), so that a stream is open
// before the next refresh needs it.
//
// The stream is kept on the cluster's leader when one of the configured
// endpoints leads. etcd renews a lease only on its leader: a follower
// forwards each renewal to the leader as an HTTP request of its own and
// answers its stream's renewals one at a time, so a stream on a follower
// costs the cluster about ten times the CPU per renewal and caps the rate at
// the follower's round trips (see keepalive.md for the measurement). The
// keepaliver checks every leaderCheckInterval which member leads and moves
// the stream when leadership has moved: the new stream takes the next
// refreshes while the old one answers those already sent on it.
type keepaliver struct {
	cli *clientv3.Client
	log *slog.Logger
	// ctx is the parent of every stream; close cancels it, also a stream
	// being opened.
	ctx  context.Context
	stop context.CancelFunc
	// leaderCheck is the time between two checks of which member leads.
	leaderCheck time.Duration
	// kick wakes the tender to open a stream at once (a stream broke).
	kick chan struct{}

	mu  sync.Mutex
	cur *kaStream // the stream refreshes go on; nil while none is open
	// closed is set by close; no stream opens after it.
	closed bool
	// broke is set when a stream broke and cleared when the next one
	// opens, so an outage logs one line each way, not one per refresh.
	broke bool
	wg    sync.WaitGroup

	// conns are connections to single members, by endpoint, dialled by the
	// tender (the only goroutine that uses the map) and closed by close.
	conns map[string]*grpc.ClientConn
}

// kaStream is one LeaseKeepAlive stream and the refreshes waiting for its
// answers, by lease: one request is in flight for each lease listed.
type kaStream struct {
	st     pb.Lease_LeaseKeepAliveClient
	ctx    context.Context
	cancel context.CancelFunc
	// pending are the leases to send, in order; wake tells the stream's
	// sender there are some. Sending blocks while etcd does not read (HTTP/2
	// flow control), so it happens outside the keepaliver's mutex: were a
	// blocked send holding it, the reader of etcd's answers could not
	// deliver them, etcd would stop reading once its answers filled the
	// window, and neither side would move again.
	pending []int64
	wake    chan struct{}
	// endpoint is the member the stream is on; "" for the client's own
	// balanced connection (any member).
	endpoint string
	waiters  map[int64][]chan kaResult
	// sent counts the renewals sent (or pending) on the stream.
	sent int
	// retired is set when a newer stream took over: it takes no new
	// refreshes and ends once the last one sent on it is answered, or when
	// drain fires.
	retired bool
	drain   *time.Timer
}

type kaResult struct {
	ttl int64
	err error
}

var errKeepaliverClosed = errors.New("keep-alive: registry is closing")

const (
	// leaderCheckInterval is how often the keepaliver asks which member
	// leads: a status call to the stream's member, and to every endpoint
	// when that one does not lead.
	leaderCheckInterval = 5 * time.Second
	// statusTimeout bounds one such status call.
	statusTimeout = time.Second
	// retiredDrainTimeout bounds how long a retired stream waits for the
	// answers still due on it; refreshes left then fail and their clients
	// retry.
	retiredDrainTimeout = 10 * time.Second
)

// newKeepaliver starts the tender that keeps a stream open: at once, in the
// background, and again after a stream breaks, retried with backoff until
// etcd accepts it. An etcd that stops gracefully (for up to its request
// timeout while watches are open) goes on serving the streams it has,
// delivering watch events and expiring leases, while it refuses new streams
// and connections. A stream opened only when a refresh needs it can come too
// late there: every lease refreshed through it expires during the stop, and
// its DELETE reaches every watcher (model cards gone for the whole outage).
func newKeepaliver(cli *clientv3.Client, log *slog.Logger) *keepaliver {
	return newKeepaliverChecking(cli, log, leaderCheckInterval)
}

// newKeepaliverChecking is newKeepaliver with the time between two leader
// checks.
func newKeepaliverChecking(cli *clientv3.Client, log *slog.Logger, leaderCheck time.Duration) *keepaliver {
	ctx, stop := context.WithCancel(context.Background())
	k := &keepaliver{
		cli: cli, log: log, ctx: ctx, stop: stop,
		leaderCheck: leaderCheck,
		kick:        make(chan struct{}, 1),
		conns:       map[string]*grpc.ClientConn{},
	}
	k.wg.Add(1)
	go k.tend()
	return k
}

// openLocked opens a stream on conn (the member at endpoint, or any member
// for "") and makes it the current one; k.mu is held. A current stream is
// retired: it ends once its answers are in.
func (k *keepaliver) openLocked(conn *grpc.ClientConn, endpoint string) error {
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := pb.NewLeaseClient(conn).LeaseKeepAlive(sctx)
	if err != nil {
		cancel()
		return err
	}
	s := &kaStream{st: st, ctx: sctx, cancel: cancel, endpoint: endpoint, waiters: map[int64][]chan kaResult{}, wake: make(chan struct{}, 1)}
	if old := k.cur; old != nil {
		k.retireLocked(old)
	}
	k.cur = s
	if k.broke {
		k.broke = false
		k.log.Info("etcd keep-alive stream open again", "endpoint", endpoint)
	}
	k.wg.Add(2)
	go k.recv(s)
	go k.send(s)
	return nil
}

// send sends the stream's pending renewals until the stream ends.
func (k *keepaliver) send(s *kaStream) {
	defer k.wg.Done()
	var batch []int64
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		k.mu.Lock()
		batch, s.pending = s.pending, batch[:0]
		k.mu.Unlock()
		for _, id := range batch {
			// io.EOF says only that the stream has ended: why (etcd
			// stopping: Unavailable) is Recv's to tell, and recv fails the
			// waiters with it. Failed with io.EOF itself, a refresh was
			// answered Internal instead of Unavailable (under load: a
			// refresh right after etcd stopped, before recv had seen the
			// end).
			if err := s.st.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
				if !errors.Is(err, io.EOF) {
					k.mu.Lock()
					k.failLocked(s, err)
					k.mu.Unlock()
				}
				return
			}
		}
	}
}

// retireLocked stops s from taking refreshes and ends it once the refreshes
// sent on it are answered, or after retiredDrainTimeout.
func (k *keepaliver) retireLocked(s *kaStream) {
	s.retired = true
	if len(s.waiters) == 0 {
		s.cancel()
		return
	}
	s.drain = time.AfterFunc(retiredDrainTimeout, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.failLocked(s, fmt.Errorf("%w: the etcd keep-alive stream was replaced before it answered", ErrUnavailable))
	})
}

// once refreshes a lease. found is false when etcd no longer has it.
//
// A member that cannot confirm it still leads (leadership moving away from
// it, or the member cut off from the others) answers a renewal with "not a
// primary lessor" and ends the stream, so that the client renews elsewhere.
// The refreshes waiting on that stream are asked again on the next stream
// (the tender opens it at once, on the member that leads when one answers
// as such), up to notPrimaryAttempts times in all: a planned handover of
// leadership (an etcd rolling upgrade moves the leader) then costs a client
// no failed refresh. Any other error is the client's to retry.
func (k *keepaliver) once(ctx context.Context, lease uint64) (time.Duration, bool, error) {
	for attempt := 1; ; attempt++ {
		r, err := k.ask(ctx, int64(lease))
		if err != nil {
			return 0, false, err
		}
		if r.err != nil {
			if isNotPrimary(r.err) && attempt < notPrimaryAttempts {
				continue
			}
			return 0, false, etcdErr("keep alive", r.err)
		}
		if r.ttl <= 0 {
			return 0, false, nil
		}
		return time.Duration(r.ttl) * time.Second, true, nil
	}
}

// notPrimaryAttempts bounds how often one refresh is asked when members
// answer that they do not lead: a member cut off from the others may answer
// so on every stream opened on it until the cluster elects another leader.
const notPrimaryAttempts = 3

// isNotPrimary reports whether etcd refused a renewal because the member
// asked could not confirm it leads (etcd's lease.ErrNotPrimary, sent as a
// status with that message and code Unknown).
func isNotPrimary(err error) bool {
	return status.Convert(err).Message() == etcdlease.ErrNotPrimary.Error()
}

// ask sends one renewal of a lease on the current stream (opening one when
// none is), or joins the one in flight, and waits for its answer.
func (k *keepaliver) ask(ctx context.Context, id int64) (kaResult, error) {
	ch := make(chan kaResult, 1)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return kaResult{}, errKeepaliverClosed
	}
	if k.cur == nil {
		// The tender is opening one; a refresh does not wait for it. On
		// the client's balanced connection: the tender moves it to the
		// leader at its next check.
		if err := k.openLocked(k.cli.ActiveConnection(), ""); err != nil {
			k.mu.Unlock()
			return kaResult{}, etcdErr("keep alive", err)
		}
	}
	s := k.cur
	// A refresh of a lease already sent on this stream and not yet
	// answered waits for that answer instead of sending another: it renews
	// the lease as of one round trip ago at most, as any answer does. So a
	// lease has at most one renewal queued at etcd however often its
	// client retries (a client whose refresh timed out on a slow etcd asks
	// again, and each ask queued would make etcd slower still).
	q := s.waiters[id]
	s.waiters[id] = append(q, ch)
	if len(q) == 0 {
		s.sent++
		s.pending = append(s.pending, id)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	k.mu.Unlock()

	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		// The answer, when it comes, lands in ch's buffer and is dropped.
		return kaResult{}, ctx.Err()
	}
}

func (k *keepaliver) recv(s *kaStream) {
	defer k.wg.Done()
	for {
		resp, err := s.st.Recv()
		k.mu.Lock()
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Ended without a status: etcd closed it (no client of
				// the registry ends it).
				err = fmt.Errorf("%w: etcd ended the keep-alive stream", ErrUnavailable)
			}
			k.failLocked(s, err)
			k.mu.Unlock()
			return
		}
		// Every refresh of the lease waiting on this stream joined the one
		// request sent: the answer is theirs.
		q := s.waiters[resp.ID]
		delete(s.waiters, resp.ID)
		if s.retired && len(s.waiters) == 0 {
			s.cancel() // its last answer is in; Recv ends with Canceled
		}
		k.mu.Unlock()
		for _, ch := range q {
			ch <- kaResult{ttl: resp.TTL}
		}
	}
}

// failLocked ends a stream and fails everyone waiting on it; when it was
// the current one, the tender opens another at once.
func (k *keepaliver) failLocked(s *kaStream, err error) {
	s.cancel()
	if s.drain != nil {
		s.drain.Stop()
	}
	for id, q := range s.waiters {
		for _, ch := range q {
			ch <- kaResult{err: err}
		}
		delete(s.waiters, id)
	}
	if k.cur != s {
		return // retired, or failed before
	}
	k.cur = nil
	if !k.closed && !k.broke {
		k.broke = true
		// Leases are refreshed only on this stream: until a new one opens,
		// etcd counts down every lease the registry serves.
		k.log.Warn("etcd keep-alive stream broke; opening a new one", "err", err.Error())
	}
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// tend keeps a stream open on the leader until close: it opens one when
// none is (retried with backoff while etcd refuses), and every leaderCheck
// moves it to the member that leads when that is another.
func (k *keepaliver) tend() {
	defer k.wg.Done()
	defer func() {
		for _, c := range k.conns {
			_ = c.Close()
		}
	}()
	bo := backoff.New(backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second})
	check := time.NewTimer(k.leaderCheck)
	defer check.Stop()
	for {
		k.mu.Lock()
		closed, open := k.closed, k.cur != nil
		k.mu.Unlock()
		if closed {
			return
		}
		if !open {
			if err := k.place(); err != nil {
				if bo.Wait(k.ctx) != nil {
					return
				}
				continue
			}
			bo.Reset()
			check.Reset(k.leaderCheck)
		}
		select {
		case <-k.ctx.Done():
			return
		case <-k.kick:
		case <-check.C:
			if err := k.place(); err != nil {
				k.log.Debug("etcd keep-alive stream: leader check failed", "err", err.Error())
			}
			check.Reset(k.leaderCheck)
		}
	}
}

// place opens a stream on the leader's member when the current stream is on
// another member or none is open; with no leader among the endpoints (one
// endpoint, or a leader not listed) a missing stream opens on the client's
// balanced connection, as a refresh would open it.
func (k *keepaliver) place() error {
	k.mu.Lock()
	at, open := "", k.cur != nil
	if open {
		at = k.cur.endpoint
	}
	k.mu.Unlock()
	leader, conn := k.leader(at)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errKeepaliverClosed
	}
	switch {
	case leader == "" && k.cur != nil:
		return nil
	case leader == "":
		return k.openLocked(k.cli.ActiveConnection(), "")
	case k.cur != nil && k.cur.endpoint == leader:
		return nil
	}
	from := "none"
	if k.cur != nil {
		from = k.cur.endpoint
		if from == "" {
			from = "any member"
		}
	}
	if err := k.openLocked(conn, leader); err != nil {
		return err
	}
	k.log.Info("etcd keep-alive stream on the leader", "endpoint", leader, "from", from)
	return nil
}

// leader is the configured endpoint whose member leads the cluster, and a
// connection to it; "" when there is one endpoint only (the balanced
// connection is on it) or no endpoint answers as the leader. The member at
// endpoint at is asked first: it usually still leads.
func (k *keepaliver) leader(at string) (string, *grpc.ClientConn) {
	eps := k.cli.Endpoints()
	if len(eps) < 2 {
		return "", nil
	}
	order := make([]string, 0, len(eps)+1)
	if at != "" {
		order = append(order, at)
	}
	for _, ep := range eps {
		if ep != at {
			order = append(order, ep)
		}
	}
	for _, ep := range order {
		conn := k.conns[ep]
		if conn == nil {
			c, err := k.cli.Dial(ep)
			if err != nil {
				continue
			}
			conn, k.conns[ep] = c, c
		}
		ctx, cancel := context.WithTimeout(k.ctx, statusTimeout)
		st, err := pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{})
		cancel()
		if err == nil && st.Leader != 0 && st.GetHeader().GetMemberId() == st.Leader {
			return ep, conn
		}
	}
	return "", nil
}

func (k *keepaliver) close() {
	k.stop() // also a stream being opened, and the tender
	k.mu.Lock()
	k.closed = true
	if k.cur != nil {
		k.failLocked(k.cur, errKeepaliverClosed)
	}
	k.mu.Unlock()
	k.wg.Wait()
}
