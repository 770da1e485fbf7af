package registryclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
)

// ErrLeaseLost means the session's lease ended without Close: the registry
// answered that it no longer has it (it expired while the session could not
// reach the registry, or it was revoked). Everything registered on it is
// gone; a worker registers again on a new session.
var ErrLeaseLost = errors.New("discovery: lease lost")

// Backoff bounds for reaching the registry again after a failure, and the
// bounds of how long one keep-alive waits for its answer.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
	minAttempt = 500 * time.Millisecond
	maxAttempt = 5 * time.Second
)

// SessionOptions tune NewSession.
type SessionOptions struct {
	// TTL of the lease; 0 means the registry's default (10 s).
	TTL time.Duration
	// Logger receives the session's reconnects; nil discards.
	Logger *slog.Logger
	// Pod names the worker's pod for a registry on the kubernetes discovery
	// backend, which ties the session to a custom resource owned by the pod.
	// Nil takes it from POD_NAME, POD_NAMESPACE and POD_UID (which the
	// operator injects) when all three are set. The etcd backend ignores it.
	Pod *registryv1.KubernetesPod
}

// PodFromEnv returns the pod named by POD_NAME, POD_NAMESPACE and POD_UID, or
// nil unless all three are set.
func PodFromEnv() *registryv1.KubernetesPod {
	name, ns, uid := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE"), os.Getenv("POD_UID")
	if name == "" || ns == "" || uid == "" {
		return nil
	}
	return &registryv1.KubernetesPod{Name: name, Namespace: ns, Uid: uid}
}

// Session is a lease kept alive on the registry: instances, model cards,
// keys and locks registered through it live as long as it does. It refreshes
// the lease at half of the remaining TTL, and after a failure retries with
// jittered exponential backoff (50 ms to 5 s), through any registry replica
// the Client reaches, for as long as the session runs: past the lease's
// deadline too, since only the registry knows whether the lease outlived an
// outage. Expired reports that time without an answer; Progress counts the
// answered and failed refreshes; Done is closed when the registry says the
// lease is truly lost; Close revokes it.
type Session struct {
	c     *Client
	id    uint64
	token string // the lease's secret, sent on every call that uses the lease
	ttl   time.Duration
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
	exit  chan struct{}
	mu    sync.Mutex
	err   error
	close sync.Once
	// expired is set while the lease's deadline has passed without an
	// answer from the registry.
	expired atomic.Bool
	// progress and progressed are guarded by mu: progressed is closed, and
	// replaced, at every keep-alive outcome, and closed for good when the
	// keep-alive ends.
	progress   KeepAliveProgress
	progressed chan struct{}
}

// KeepAliveProgress counts a session's keep-alive attempts.
type KeepAliveProgress struct {
	// Answered counts refreshes the registry confirmed: each proves the
	// lease was alive, with everything registered on it, when it answered.
	Answered uint64
	// Failed counts attempts without an answer: no registry replica could be
	// reached, or none answered in time.
	Failed uint64
}

// Progress returns the session's keep-alive counts so far and a channel that
// is closed at the next attempt's outcome, or once the keep-alive has ended
// (after Close or a lost lease; select on Done too). It lets a caller wait
// for the lease to be renewed, or for an attempt to fail, instead of sleeping
// for a guessed number of TTLs.
func (s *Session) Progress() (KeepAliveProgress, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress, s.progressed
}

// record counts one keep-alive outcome and wakes Progress's waiters.
func (s *Session) record(answered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if answered {
		s.progress.Answered++
	} else {
		s.progress.Failed++
	}
	close(s.progressed)
	s.progressed = make(chan struct{})
}

// NewSession grants a lease and starts keeping it alive.
func NewSession(ctx context.Context, c *Client, opts SessionOptions) (*Session, error) {
	pod := opts.Pod
	if pod == nil {
		pod = PodFromEnv()
	}
	// WaitForReady: while no registry replica serves (each reports
	// NOT_SERVING while its store is unreachable), the grant waits within
	// ctx for one that does rather than failing at once; nothing is sent
	// before then, so waiting loses nothing.
	resp, err := c.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: int64(opts.TTL / time.Second), Pod: pod}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("discovery: grant lease: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Session{
		c:     c,
		id:    resp.LeaseId,
		token: resp.LeaseToken,
		ttl:   time.Duration(resp.TtlSeconds) * time.Second,
		log:   log.With("lease", fmt.Sprintf("%x", resp.LeaseId)),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		exit:  make(chan struct{}),

		progressed: make(chan struct{}),
	}
	go s.keepAlive(time.Now().Add(s.ttl))
	return s, nil
}

// withLease adds the lease token to an outgoing call's metadata.
func withLease(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, authtoken.LeaseTokenKey, token)
}

// ID is the lease id, which is the instance id of everything registered here.
func (s *Session) ID() uint64 { return s.id }

// TTL is the lease's TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the lease is lost or the session is closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Expired reports whether the lease's deadline passed without the registry
// confirming a refresh: the lease, and what is registered on it, may be gone
// (Done closes once the registry says so) or may have outlived the outage
// (Expired turns false again at the next answer).
func (s *Session) Expired() bool { return s.expired.Load() }

// Err is ErrLeaseLost (wrapped with the cause) after the lease was lost, nil
// otherwise.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Register registers an instance on the session's lease and returns it with
// its instance id set. A duplicate is codes.AlreadyExists.
func (s *Session) Register(ctx context.Context, in *registryv1.Instance) (*registryv1.Instance, error) {
	resp, err := s.c.rpc.Register(withLease(ctx, s.token), &registryv1.RegisterRequest{Instance: in, LeaseId: s.id})
	if err != nil {
		return nil, err
	}
	out := cloneInstance(in)
	out.InstanceId = resp.InstanceId
	return out, nil
}

// RegisterModel publishes a model card on the session's lease.
func (s *Session) RegisterModel(ctx context.Context, card *registryv1.ModelCard) error {
	_, err := s.c.rpc.RegisterModel(withLease(ctx, s.token), &registryv1.RegisterModelRequest{Card: card, LeaseId: s.id})
	return err
}

// Close stops the keep-alive and revokes the lease, so everything registered
// on it disappears at once. It is idempotent.
func (s *Session) Close(ctx context.Context) error {
	var err error
	s.close.Do(func() {
		close(s.stop)
		<-s.exit
		select {
		case <-s.done:
			if s.Err() != nil {
				return // already lost: nothing to revoke
			}
		default:
		}
		_, err = s.c.rpc.Deregister(withLease(ctx, s.token), &registryv1.DeregisterRequest{LeaseId: s.id})
		if status.Code(err) == codes.NotFound {
			err = nil
		}
		s.finish(nil)
	})
	return err
}

// Abandon stops keeping the lease alive without revoking it, as a process
// that crashed would: everything registered on it stays until the lease's
// TTL runs out on the registry, which then drops it. Done closes, Err stays
// nil, and a later Close does nothing. Fault tests and benchmarks use it to
// measure how a fleet notices a worker that vanished without a word.
func (s *Session) Abandon() {
	s.close.Do(func() {
		close(s.stop)
		<-s.exit
		s.finish(nil)
	})
}

func (s *Session) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return
	default:
	}
	s.err = err
	close(s.done)
}

// keepAlive runs until stop or the registry says the lease is gone.
// deadline is when the lease expires unless refreshed. A registry (or etcd)
// that cannot be reached is never a reason to give up: the lease may well
// outlive the outage (etcd extends every lease when it comes back), and only
// the registry can tell that it did not. So the loop retries with jittered
// backoff for as long as the session runs, and only a "not found" answer ends
// it with ErrLeaseLost.
func (s *Session) keepAlive(deadline time.Time) {
	defer close(s.exit)
	defer func() {
		s.mu.Lock()
		close(s.progressed) // never replaced again: Progress's waiters wake for good
		s.mu.Unlock()
	}()
	next := time.Now().Add(s.ttl / 2)
	bo := backoff.New(backoff.Policy{Min: minBackoff, Max: maxBackoff})
	var ka *keepAliveStream
	defer func() {
		if ka != nil {
			ka.close()
		}
	}()
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		if ka == nil {
			ka = openKeepAlive(s.c, s.token)
		}
		// Before the deadline, leave time to try another replica; after it,
		// give a slow registry a fair chance to answer.
		attempt := maxAttempt
		if left := time.Until(deadline); left > 0 {
			attempt = max(min(left, maxAttempt), minAttempt)
		}
		ttl, found, err := ka.refresh(s.id, attempt, s.stop)
		now := time.Now()
		switch {
		case errors.Is(err, errStopped):
			return
		case (err == nil && !found) || apierr.Is(err, codes.NotFound, apierr.ReasonLeaseNotFound):
			s.log.Error("lease revoked or expired on the registry")
			s.finish(fmt.Errorf("%w: the registry no longer has lease %x", ErrLeaseLost, s.id))
			return
		case err == nil:
			deadline = now.Add(ttl)
			next = now.Add(ttl / 2)
			if s.expired.Swap(false) {
				s.log.Warn("lease keep-alive reached the registry after the lease's deadline; the registry still had the lease")
			} else if bo.Failed() {
				s.log.Info("lease keep-alive recovered")
			}
			bo.Reset()
			s.record(true) // after Expired is cleared: a waiter sees both
		default:
			ka.close()
			ka = nil
			// Never more than a quarter of the TTL between attempts, past
			// the deadline too: etcd, back from an outage, gives every
			// lease its TTL again from its return, and a keep-alive must
			// reach it within that. The backoff alone grows to 5 s while
			// the registry answers "etcd unavailable" at once, and a 1 or
			// 2 s lease was lost that way after every outage. A registry
			// that answers is not loaded by this: the answer is cheap.
			wait := min(bo.Next(), max(s.ttl/4, minBackoff))
			if left := time.Until(deadline); left > 0 {
				wait = min(wait, left)
				s.log.Warn("lease keep-alive failed; retrying", "err", err.Error(), "backoff", wait.String(), "deadline_in", left.String())
			} else if !s.expired.Swap(true) {
				s.log.Error("lease deadline passed without reaching the registry; still trying (the lease may outlive the outage)", "err", err.Error())
			} else {
				s.log.Debug("lease keep-alive failed past the deadline; retrying", "err", err.Error(), "backoff", wait.String())
			}
			next = now.Add(wait)
			s.record(false)
		}
		timer.Reset(time.Until(next))
	}
}

var errStopped = errors.New("session stopped")

// keepAliveStream is one KeepAlive stream and the goroutine reading it.
type keepAliveStream struct {
	cancel context.CancelFunc
	stream registryv1.RegistryService_KeepAliveClient
	resps  chan *registryv1.KeepAliveResponse
	errc   chan error
	err    error
}

func openKeepAlive(c *Client, token string) *keepAliveStream {
	ctx, cancel := context.WithCancel(withLease(context.Background(), token))
	k := &keepAliveStream{cancel: cancel, resps: make(chan *registryv1.KeepAliveResponse, 1), errc: make(chan error, 1)}
	stream, err := c.rpc.KeepAlive(ctx)
	if err != nil {
		k.err = err
		return k
	}
	k.stream = stream
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				k.errc <- err
				return
			}
			select {
			case k.resps <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return k
}

// refresh sends one keep-alive and waits up to timeout for its answer.
func (k *keepAliveStream) refresh(id uint64, timeout time.Duration, stop <-chan struct{}) (time.Duration, bool, error) {
	if k.err != nil {
		return 0, false, k.err
	}
	if err := k.stream.Send(&registryv1.KeepAliveRequest{LeaseId: id}); err != nil {
		return 0, false, err
	}
	t := time.NewTimer(max(timeout, minBackoff))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return 0, false, errStopped
		case err := <-k.errc:
			k.err = err
			return 0, false, err
		case <-t.C:
			k.err = errors.New("keep-alive answer timed out")
			return 0, false, k.err
		case r := <-k.resps:
			if r.LeaseId != id {
				continue
			}
			return time.Duration(r.TtlSeconds) * time.Second, r.Found, nil
		}
	}
}

func (k *keepAliveStream) close() {
	k.cancel()
}
