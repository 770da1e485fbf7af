package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// Lease ownership. GrantLease, and Register when it grants the lease, hand
// the caller a secret token; the backend keeps only its SHA-256 beside the
// lease (etcd: a key of the registry's own tied to the lease; Kubernetes: an
// annotation of the pod's resource). KeepAlive, Register on an existing
// lease, Deregister and RegisterModel must present the token in the
// "switchyard-lease-token" metadata: an instance id, which ListInstances
// shows to anyone, is not enough to end or extend a lease.

// newLeaseToken makes a token and the digest the backend stores.
func newLeaseToken() (token, digest string, err error) {
	token, err = authtoken.NewLeaseToken()
	if err != nil {
		return "", "", err
	}
	return token, authtoken.DigestHex(token), nil
}

// leaseTokens are the lease tokens a call presents.
func leaseTokens(ctx context.Context) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md.Get(authtoken.LeaseTokenKey)
}

func errLeasePermission(lease uint64, why string) error {
	return apierr.Errorf(codes.PermissionDenied, apierr.ReasonLeaseTokenRequired, "lease %x: %s; send the token GrantLease returned in the %q metadata", lease, why, authtoken.LeaseTokenKey)
}

// checkLease lets a call on lease through when it presents the lease's
// token. A lease that is gone passes with ErrNotFound, so that the caller
// answers as it would for any ended lease (KeepAlive: found = false).
//
// An admin token (with --auth-token-file) may act on any lease: an operator
// fencing a worker.
func (s *server) checkLease(ctx context.Context, lease uint64) error {
	if c, ok := grpcserver.CallerFrom(ctx); ok && slices.Contains(c.Roles, authtoken.RoleAdmin) {
		return nil
	}
	digest, err := s.store.LeaseTokenDigest(ctx, lease)
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return toStatus(fmt.Errorf("check lease token: %w", err))
	}
	tokens := leaseTokens(ctx)
	switch {
	case digest == "":
		return errLeasePermission(lease, "the lease has no token (it was granted before lease tokens); register again")
	case len(tokens) == 0:
		return errLeasePermission(lease, "no lease token")
	case !authtoken.MatchDigestHex(digest, tokens):
		return errLeasePermission(lease, "the lease token is not this lease's")
	}
	return nil
}

// maxLeasesPerKeepAlive bounds the leases one KeepAlive stream refreshes (a
// worker has one; a process hosting several workers a few).
const maxLeasesPerKeepAlive = 64

// maxStreamsPerLease bounds the KeepAlive streams that refresh one lease at
// once: a worker needs one, and one more while it reconnects.
const maxStreamsPerLease = 4

// leaseStreams counts the KeepAlive streams refreshing each lease.
type leaseStreams struct {
	mu   sync.Mutex
	open map[uint64]int
}

// add counts one more stream on lease; false when it has the most already.
func (l *leaseStreams) add(lease uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[uint64]int{}
	}
	if l.open[lease] >= maxStreamsPerLease {
		return false
	}
	l.open[lease]++
	return true
}

// done uncounts a stream's leases.
func (l *leaseStreams) done(leases map[uint64]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for lease := range leases {
		if l.open[lease]--; l.open[lease] <= 0 {
			delete(l.open, lease)
		}
	}
}
