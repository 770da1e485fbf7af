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
	digest, ok := s.digests.get(lease)
	if !ok {
		var err error
		digest, err = s.store.LeaseTokenDigest(ctx, lease)
		if errors.Is(err, ErrNotFound) {
			s.digests.drop(lease)
			return err
		}
		if err != nil {
			return toStatus(fmt.Errorf("check lease token: %w", err))
		}
		s.digests.put(lease, digest)
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

// maxCachedDigests bounds leaseDigests: past it the cache starts over (a
// replica serving that many leases reads a digest from the store again per
// lease).
const maxCachedDigests = 1 << 16

// leaseDigests holds the token digests of the leases this replica granted
// or checked. A lease's token never changes, so once known its digest needs
// no store read: a KeepAlive stream that a worker opens again (after an
// attempt that timed out on a loaded machine) is checked at once, and the
// refresh costs one etcd round trip instead of two, which is what fits in
// half a short TTL. (Seen: beside other tests, each stream's token read took
// about a second, the worker's first refresh of a 2 s lease timed out at its
// deadline, and etcd expired the lease.) A cached digest grants nothing the
// store would not: a call on a lease that is gone still fails or answers not
// found there, and then the entry goes.
type leaseDigests struct {
	mu sync.Mutex
	m  map[uint64]string
}

func (c *leaseDigests) get(lease uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[lease]
	return d, ok
}

// put caches a lease's digest; "" (a lease granted before tokens) is not
// cached.
func (c *leaseDigests) put(lease uint64, digest string) {
	if digest == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedDigests {
		c.m = map[uint64]string{}
	}
	c.m[lease] = digest
}

// drop forgets a lease that ended.
func (c *leaseDigests) drop(lease uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, lease)
}
