package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/backoff"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepaliver refreshes leases on behalf of clients over one shared etcd
// LeaseKeepAlive stream: every client keep-alive becomes one request on that
// stream, answered in order per lease. A lease thus lives exactly as long as
// its client keeps asking, through whichever registry replica it reaches,
// and ten thousand sessions cost one etcd stream instead of a stream per
// refresh. A broken stream fails its waiters (the clients retry), and a new
// one is opened at once in the background, retried until etcd accepts it (as
// etcd's own client does for its keep-alive stream), so that a stream is open
// before the next refresh needs it.
type keepaliver struct {
	cli *clientv3.Client
	log *slog.Logger
	// ctx is the parent of every stream; close cancels it, also a stream
	// being opened.
	ctx  context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	waiters map[int64][]chan kaResult
	closed  bool
	// broke is set when a stream broke and cleared when the next one
	// opens, so an outage logs one line each way, not one per refresh.
	broke bool
	// reopening is set while the background reopen loop runs.
	reopening bool
	wg        sync.WaitGroup
}

type kaResult struct {
	ttl int64
	err error
}

var errKeepaliverClosed = errors.New("keep-alive: registry is closing")

// newKeepaliver opens the shared stream at once, in the background, and
// keeps one open: after a stream breaks, a new one is opened in the
// background, retried with backoff until etcd accepts it. An etcd that stops
// gracefully (for up to its request timeout while watches are open) goes on
// serving the streams it has, delivering watch events and expiring leases,
// while it refuses new streams and connections. A stream opened only when a
// refresh needs it can come too late there: every lease refreshed through it
// expires during the stop, and its DELETE reaches every watcher (model cards
// gone for the whole outage).
func newKeepaliver(cli *clientv3.Client, log *slog.Logger) *keepaliver {
	ctx, stop := context.WithCancel(context.Background())
	k := &keepaliver{cli: cli, log: log, ctx: ctx, stop: stop, waiters: map[int64][]chan kaResult{}, reopening: true}
	k.wg.Add(1)
	go k.reopen() // etcd away: it retries, and a refresh may open it first
	return k
}

// openLocked opens the shared stream; k.mu is held.
func (k *keepaliver) openLocked() error {
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(sctx)
	if err != nil {
		cancel()
		return err
	}
	k.stream, k.cancel = st, cancel
	if k.broke {
		k.broke = false
		k.log.Info("etcd keep-alive stream open again")
	}
	k.wg.Add(1)
	go k.recv(st)
	return nil
}

// once refreshes a lease. found is false when etcd no longer has it.
func (k *keepaliver) once(ctx context.Context, lease uint64) (time.Duration, bool, error) {
	id := int64(lease)
	ch := make(chan kaResult, 1)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return 0, false, errKeepaliverClosed
	}
	if k.stream == nil {
		if err := k.openLocked(); err != nil {
			k.mu.Unlock()
			return 0, false, etcdErr("keep alive", err)
		}
	}
	k.waiters[id] = append(k.waiters[id], ch)
	// Send is not safe for concurrent use; the mutex serialises it. io.EOF
	// says only that the stream has ended: why (etcd stopping: Unavailable)
	// is Recv's to tell, and recv fails the waiters, this one too, with it.
	// Failed with io.EOF itself, the refresh was answered Internal instead
	// of Unavailable (TestReasonsTellRetryFromReRegister, under load: a
	// refresh right after etcd stopped, before recv had seen the end).
	if err := k.stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil && !errors.Is(err, io.EOF) {
		k.failLocked(k.stream, err)
	}
	k.mu.Unlock()

	select {
	case r := <-ch:
		if r.err != nil {
			return 0, false, etcdErr("keep alive", r.err)
		}
		if r.ttl <= 0 {
			return 0, false, nil
		}
		return time.Duration(r.ttl) * time.Second, true, nil
	case <-ctx.Done():
		// The answer, when it comes, lands in ch's buffer and is dropped;
		// answers per lease stay aligned with their waiters.
		return 0, false, ctx.Err()
	}
}

func (k *keepaliver) recv(st pb.Lease_LeaseKeepAliveClient) {
	defer k.wg.Done()
	for {
		resp, err := st.Recv()
		k.mu.Lock()
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Ended without a status: etcd closed it (no client of
				// the registry ends it).
				err = fmt.Errorf("%w: etcd ended the keep-alive stream", ErrUnavailable)
			}
			k.failLocked(st, err)
			k.mu.Unlock()
			return
		}
		var ch chan kaResult
		if q := k.waiters[resp.ID]; len(q) > 0 {
			ch = q[0]
			if len(q) == 1 {
				delete(k.waiters, resp.ID)
			} else {
				k.waiters[resp.ID] = q[1:]
			}
		}
		k.mu.Unlock()
		if ch != nil {
			ch <- kaResult{ttl: resp.TTL}
		}
	}
}

// failLocked retires a broken stream and fails everyone waiting on it.
func (k *keepaliver) failLocked(st pb.Lease_LeaseKeepAliveClient, err error) {
	if k.stream != st {
		return
	}
	k.cancel()
	k.stream, k.cancel = nil, nil
	if !k.closed && !k.broke {
		k.broke = true
		// Leases are refreshed only on this stream: until a new one opens,
		// etcd counts down every lease the registry serves.
		k.log.Warn("etcd keep-alive stream broke; opening a new one", "err", err.Error(), "waiting_refreshes", len(k.waiters))
	}
	if !k.closed && !k.reopening {
		k.reopening = true
		k.wg.Add(1)
		go k.reopen()
	}
	for id, q := range k.waiters {
		for _, ch := range q {
			ch <- kaResult{err: err}
		}
		delete(k.waiters, id)
	}
}

// reopen opens a new stream after one broke, retrying with backoff until
// one opens (or a refresh opened it first) or the keepaliver closes.
func (k *keepaliver) reopen() {
	defer k.wg.Done()
	bo := backoff.New(backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second})
	for {
		k.mu.Lock()
		if k.closed || k.stream != nil {
			k.reopening = false
			k.mu.Unlock()
			return
		}
		err := k.openLocked()
		if err == nil {
			k.reopening = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		if bo.Wait(k.ctx) != nil {
			k.mu.Lock()
			k.reopening = false
			k.mu.Unlock()
			return
		}
	}
}

func (k *keepaliver) close() {
	k.stop() // also a stream being opened in the background
	k.mu.Lock()
	k.closed = true
	if k.stream != nil {
		k.failLocked(k.stream, errKeepaliverClosed)
	}
	k.mu.Unlock()
	k.wg.Wait()
}
