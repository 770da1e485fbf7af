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
)

// keepaliver refreshes leases on behalf of clients over one shared etcd
// LeaseKeepAlive stream: every client keep-alive becomes one request on that
// stream, answered in order per lease. A lease thus lives exactly as long as
// its client keeps asking, through whichever registry replica it reaches,
// and ten thousand sessions cost one etcd stream instead of a stream per
// refresh. A broken stream fails its waiters (the clients retry) and the
// next refresh opens a new one.
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
	wg    sync.WaitGroup
}

type kaResult struct {
	ttl int64
	err error
}

var errKeepaliverClosed = errors.New("keep-alive: registry is closing")

// newKeepaliver opens the shared stream at once, in the background, so
// that it is there before the first refresh: an etcd that stops gracefully
// (for up to its request timeout while watches are open) goes on serving the
// streams it has, and expiring leases, while it refuses new streams and
// connections. Opened only on the first refresh, the stream came too late
// there: a test stopped etcd within a second of two workers' registrations,
// before their first refresh of a 2 s lease; etcd took seconds to stop,
// expired both leases and sent their DELETEs to the watchers (model cards
// gone during the whole outage). After a broken stream the next refresh
// opens a new one.
func newKeepaliver(cli *clientv3.Client, log *slog.Logger) *keepaliver {
	ctx, stop := context.WithCancel(context.Background())
	k := &keepaliver{cli: cli, log: log, ctx: ctx, stop: stop, waiters: map[int64][]chan kaResult{}}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.closed && k.stream == nil {
			_ = k.openLocked() // etcd away: the first refresh tries again
		}
	}()
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
		// Leases are refreshed only on this stream: until a refresh opens
		// a new one, etcd counts down every lease the registry serves.
		k.log.Warn("etcd keep-alive stream broke; the next lease refresh opens a new one", "err", err.Error(), "waiting_refreshes", len(k.waiters))
	}
	for id, q := range k.waiters {
		for _, ch := range q {
			ch <- kaResult{err: err}
		}
		delete(k.waiters, id)
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
