package registry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// server implements registryv1.RegistryServiceServer over a Backend.
type server struct {
	registryv1.UnimplementedRegistryServiceServer
	store    Backend
	log      *slog.Logger
	metrics  *metrics
	stopping <-chan struct{}
	// keepAliveStreams bounds the KeepAlive streams per lease.
	keepAliveStreams leaseStreams
	// digests caches lease token digests (see checkLease).
	digests leaseDigests
	// watchSlot bounds each client's open watches (grpcserver.WatchSlot).
	watchSlot func(context.Context) (func(), error)
}

// statusCodes maps the domain errors to gRPC codes.
var statusCodes = []grpcserver.Code{
	{Err: ErrInvalid, Code: codes.InvalidArgument},
	{Err: ErrLeaseNotFound, Code: codes.NotFound, Reason: apierr.ReasonLeaseNotFound},
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: ErrExists, Code: codes.AlreadyExists},
	{Err: ErrConflict, Code: codes.FailedPrecondition},
	{Err: ErrTimeout, Code: codes.DeadlineExceeded},
	{Err: ErrUnavailable, Code: codes.Unavailable, Reason: apierr.ReasonBackendUnavailable},
	{Err: ErrUnimplemented, Code: codes.Unimplemented},
}

// toStatus maps domain errors to gRPC status codes, once, for every RPC.
func toStatus(err error) error { return grpcserver.ToStatus(err, statusCodes) }

var errShuttingDown = status.Error(codes.Unavailable, "registry is shutting down; reconnect to another replica")

func (s *server) GrantLease(ctx context.Context, r *registryv1.GrantLeaseRequest) (*registryv1.GrantLeaseResponse, error) {
	ttl, err := ttlOf(r.GetTtlSeconds())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := validatePod(r.GetPod()); err != nil {
		return nil, toStatus(err)
	}
	token, digest, err := newLeaseToken()
	if err != nil {
		return nil, toStatus(err)
	}
	id, granted, err := s.store.GrantLease(ctx, ttl, r.GetPod(), digest)
	if err != nil {
		return nil, toStatus(err)
	}
	s.digests.put(id, digest)
	return &registryv1.GrantLeaseResponse{LeaseId: id, TtlSeconds: int64(granted / time.Second), LeaseToken: token}, nil
}

func (s *server) Register(ctx context.Context, r *registryv1.RegisterRequest) (*registryv1.RegisterResponse, error) {
	ttl, err := validateRegister(r)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := grpcserver.CheckNamespace(ctx, r.Instance.GetNamespace()); err != nil {
		return nil, err
	}
	var token, digest string
	if r.LeaseId != 0 {
		if err := validLease("lease_id", r.LeaseId); err != nil {
			return nil, toStatus(err)
		}
		if err := s.checkLease(ctx, r.LeaseId); err != nil {
			return nil, toStatus(err)
		}
	} else if token, digest, err = newLeaseToken(); err != nil {
		return nil, toStatus(err)
	}
	resp, err := s.store.Register(ctx, r.Instance, ttl, r.LeaseId, r.GetPod(), digest)
	if err != nil {
		return nil, toStatus(err)
	}
	if r.LeaseId == 0 {
		s.digests.put(resp.InstanceId, digest)
	}
	resp.LeaseToken = token
	return resp, nil
}

func (s *server) KeepAlive(stream registryv1.RegistryService_KeepAliveServer) error {
	ctx := stream.Context()
	// The leases this stream proved it holds: the token of a lease never
	// changes on etcd, so it is checked once per stream, not per refresh.
	owned := map[uint64]bool{}
	defer s.keepAliveStreams.done(owned)
	reqs := make(chan *registryv1.KeepAliveRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-s.stopping:
			return errShuttingDown
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case r := <-reqs:
			if err := validLease("lease_id", r.GetLeaseId()); err != nil {
				return toStatus(err)
			}
			if !owned[r.LeaseId] {
				err := s.checkLease(ctx, r.LeaseId)
				if errors.Is(err, ErrNotFound) {
					s.metrics.keepAlives.WithLabelValues("not_found").Inc()
					if err := stream.Send(&registryv1.KeepAliveResponse{LeaseId: r.LeaseId}); err != nil {
						return err
					}
					continue
				}
				if err != nil {
					s.metrics.keepAlives.WithLabelValues("denied").Inc()
					return err
				}
				if len(owned) >= maxLeasesPerKeepAlive {
					return status.Errorf(codes.ResourceExhausted, "one KeepAlive stream refreshes at most %d leases", maxLeasesPerKeepAlive)
				}
				if !s.keepAliveStreams.add(r.LeaseId) {
					return status.Errorf(codes.ResourceExhausted, "lease %x has %d KeepAlive streams open already", r.LeaseId, maxStreamsPerLease)
				}
				owned[r.LeaseId] = true
			}
			ttl, found, err := s.store.KeepAlive(ctx, r.LeaseId)
			if err != nil {
				s.metrics.keepAlives.WithLabelValues("error").Inc()
				return toStatus(err)
			}
			if found {
				s.metrics.keepAlives.WithLabelValues("ok").Inc()
			} else {
				s.digests.drop(r.LeaseId)
				s.metrics.keepAlives.WithLabelValues("not_found").Inc()
			}
			if err := stream.Send(&registryv1.KeepAliveResponse{LeaseId: r.LeaseId, Found: found, TtlSeconds: int64(ttl / time.Second)}); err != nil {
				return err
			}
		}
	}
}

func (s *server) Deregister(ctx context.Context, r *registryv1.DeregisterRequest) (*registryv1.DeregisterResponse, error) {
	if err := validLease("lease_id", r.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkLease(ctx, r.LeaseId); err != nil {
		return nil, toStatus(err)
	}
	rev, err := s.store.Deregister(ctx, r.LeaseId)
	if err != nil {
		return nil, toStatus(err)
	}
	s.digests.drop(r.LeaseId)
	return &registryv1.DeregisterResponse{Revision: rev}, nil
}

func (s *server) ListInstances(ctx context.Context, r *registryv1.ListInstancesRequest) (*registryv1.ListInstancesResponse, error) {
	if err := validateInstanceFilter(r.GetFilter()); err != nil {
		return nil, toStatus(err)
	}
	ins, rev, err := s.store.ListInstances(ctx, r.GetFilter())
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.ListInstancesResponse{Instances: ins, Revision: rev}, nil
}

func (s *server) WatchInstances(r *registryv1.WatchInstancesRequest, stream registryv1.RegistryService_WatchInstancesServer) error {
	if err := validateInstanceFilter(r.GetFilter()); err != nil {
		return toStatus(err)
	}
	if r.GetResumeRevision() < 0 {
		return toStatus(errInvalidf("resume_revision %d is negative", r.GetResumeRevision()))
	}
	done, err := s.watchStarted(stream.Context(), "instances")
	if err != nil {
		return err
	}
	defer done()
	err = s.store.WatchInstances(stream.Context(), r.GetFilter(), r.GetResumeRevision(), s.stopping, func(out *registryv1.WatchInstancesResponse) error {
		s.countSnapshot(out.SnapshotReason)
		return stream.Send(out)
	})
	return s.watchEnd(stream.Context(), err)
}

// watchStarted takes one of the client's watch slots (ResourceExhausted over
// --max-watches-per-client) and counts the open watch in the metrics until
// the returned func runs.
func (s *server) watchStarted(ctx context.Context, kind string) (func(), error) {
	release := func() {}
	if s.watchSlot != nil {
		var err error
		if release, err = s.watchSlot(ctx); err != nil {
			return nil, err
		}
	}
	g := s.metrics.watches.WithLabelValues(kind)
	g.Inc()
	return func() { g.Dec(); release() }, nil
}

// countSnapshot counts a snapshot sent on a watch, by reason.
func (s *server) countSnapshot(reason registryv1.SnapshotReason) {
	switch reason {
	case registryv1.SnapshotReason_SNAPSHOT_REASON_INITIAL:
		s.metrics.snapshots.WithLabelValues("initial").Inc()
	case registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED:
		s.metrics.snapshots.WithLabelValues("compacted").Inc()
	}
}

// watchEnd turns the end of a watch into the stream's status: shutdown is
// Unavailable (reconnect elsewhere), the client leaving is no error.
func (s *server) watchEnd(ctx context.Context, err error) error {
	select {
	case <-s.stopping:
		return errShuttingDown
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	return toStatus(err)
}

func (s *server) RegisterModel(ctx context.Context, r *registryv1.RegisterModelRequest) (*registryv1.RegisterModelResponse, error) {
	if err := validateCard(r.GetCard()); err != nil {
		return nil, toStatus(err)
	}
	if err := grpcserver.CheckNamespace(ctx, r.Card.GetNamespace()); err != nil {
		return nil, err
	}
	if err := validLease("lease_id", r.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkLease(ctx, r.LeaseId); err != nil {
		return nil, toStatus(err)
	}
	rev, err := s.store.RegisterModel(ctx, r.Card, r.LeaseId)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.RegisterModelResponse{Revision: rev}, nil
}

func (s *server) ListModels(ctx context.Context, r *registryv1.ListModelsRequest) (*registryv1.ListModelsResponse, error) {
	if err := validateModelFilter(r.GetFilter()); err != nil {
		return nil, toStatus(err)
	}
	cards, rev, err := s.store.ListModels(ctx, r.GetFilter())
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.ListModelsResponse{Cards: cards, Revision: rev}, nil
}

func (s *server) WatchModels(r *registryv1.WatchModelsRequest, stream registryv1.RegistryService_WatchModelsServer) error {
	if err := validateModelFilter(r.GetFilter()); err != nil {
		return toStatus(err)
	}
	if r.GetResumeRevision() < 0 {
		return toStatus(errInvalidf("resume_revision %d is negative", r.GetResumeRevision()))
	}
	done, err := s.watchStarted(stream.Context(), "models")
	if err != nil {
		return err
	}
	defer done()
	err = s.store.WatchModels(stream.Context(), r.GetFilter(), r.GetResumeRevision(), s.stopping, func(out *registryv1.WatchModelsResponse) error {
		s.countSnapshot(out.SnapshotReason)
		return stream.Send(out)
	})
	return s.watchEnd(stream.Context(), err)
}

func (s *server) CreateBucket(ctx context.Context, r *registryv1.CreateBucketRequest) (*registryv1.CreateBucketResponse, error) {
	if err := validName("bucket", r.GetBucket()); err != nil {
		return nil, toStatus(err)
	}
	created, err := s.store.CreateBucket(ctx, r.Bucket)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.CreateBucketResponse{Created: created}, nil
}

func validBucketKey(bucket, key string) error {
	if err := validName("bucket", bucket); err != nil {
		return err
	}
	return validKey(key)
}

func (s *server) GetKey(ctx context.Context, r *registryv1.GetKeyRequest) (*registryv1.GetKeyResponse, error) {
	if err := validBucketKey(r.GetBucket(), r.GetKey()); err != nil {
		return nil, toStatus(err)
	}
	kv, err := s.store.GetKey(ctx, r.Bucket, r.Key)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.GetKeyResponse{Kv: kv}, nil
}

func (s *server) PutKey(ctx context.Context, r *registryv1.PutKeyRequest) (*registryv1.PutKeyResponse, error) {
	if err := validBucketKey(r.GetBucket(), r.GetKey()); err != nil {
		return nil, toStatus(err)
	}
	if err := validValue(r.GetValue()); err != nil {
		return nil, toStatus(err)
	}
	if r.ExpectedRevision != nil && *r.ExpectedRevision < 0 {
		return nil, toStatus(errInvalidf("expected_revision %d is negative", *r.ExpectedRevision))
	}
	if r.LeaseId != 0 {
		if err := validLease("lease_id", r.LeaseId); err != nil {
			return nil, toStatus(err)
		}
	}
	rev, err := s.store.PutKey(ctx, r.Bucket, r.Key, r.Value, r.LeaseId, r.ExpectedRevision)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.PutKeyResponse{Revision: rev}, nil
}

func (s *server) CreateKey(ctx context.Context, r *registryv1.CreateKeyRequest) (*registryv1.CreateKeyResponse, error) {
	if err := validBucketKey(r.GetBucket(), r.GetKey()); err != nil {
		return nil, toStatus(err)
	}
	if err := validValue(r.GetValue()); err != nil {
		return nil, toStatus(err)
	}
	if r.LeaseId != 0 {
		if err := validLease("lease_id", r.LeaseId); err != nil {
			return nil, toStatus(err)
		}
	}
	rev, err := s.store.CreateKey(ctx, r.Bucket, r.Key, r.Value, r.LeaseId)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.CreateKeyResponse{Revision: rev}, nil
}

func (s *server) DeleteKey(ctx context.Context, r *registryv1.DeleteKeyRequest) (*registryv1.DeleteKeyResponse, error) {
	if err := validBucketKey(r.GetBucket(), r.GetKey()); err != nil {
		return nil, toStatus(err)
	}
	deleted, rev, err := s.store.DeleteKey(ctx, r.Bucket, r.Key)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.DeleteKeyResponse{Deleted: deleted, Revision: rev}, nil
}

func (s *server) ListKeys(ctx context.Context, r *registryv1.ListKeysRequest) (*registryv1.ListKeysResponse, error) {
	if err := validName("bucket", r.GetBucket()); err != nil {
		return nil, toStatus(err)
	}
	if err := validPrefix(r.GetPrefix()); err != nil {
		return nil, toStatus(err)
	}
	kvs, rev, err := s.store.ListKeys(ctx, r.Bucket, r.Prefix)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.ListKeysResponse{Kvs: kvs, Revision: rev}, nil
}

func (s *server) WatchKeys(r *registryv1.WatchKeysRequest, stream registryv1.RegistryService_WatchKeysServer) error {
	if err := validName("bucket", r.GetBucket()); err != nil {
		return toStatus(err)
	}
	if err := validPrefix(r.GetPrefix()); err != nil {
		return toStatus(err)
	}
	if r.GetResumeRevision() < 0 {
		return toStatus(errInvalidf("resume_revision %d is negative", r.GetResumeRevision()))
	}
	done, err := s.watchStarted(stream.Context(), "keys")
	if err != nil {
		return err
	}
	defer done()
	err = s.store.WatchKeys(stream.Context(), r.Bucket, r.Prefix, r.GetResumeRevision(), s.stopping, func(out *registryv1.WatchKeysResponse) error {
		s.countSnapshot(out.SnapshotReason)
		return stream.Send(out)
	})
	return s.watchEnd(stream.Context(), err)
}

func (s *server) AcquireWriteLock(ctx context.Context, r *registryv1.AcquireWriteLockRequest) (*registryv1.AcquireWriteLockResponse, error) {
	if err := validName("lock name", r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := validLease("lease_id", r.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	token, ok, err := s.store.AcquireWriteLock(ctx, r.Name, r.LeaseId)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.AcquireWriteLockResponse{Acquired: ok, Token: token}, nil
}

func (s *server) AcquireReadLock(ctx context.Context, r *registryv1.AcquireReadLockRequest) (*registryv1.AcquireReadLockResponse, error) {
	if err := validName("lock name", r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := validLease("lease_id", r.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	wait, err := lockWait(r.GetTimeoutMs())
	if err != nil {
		return nil, toStatus(err)
	}
	token, err := s.store.AcquireReadLock(ctx, r.Name, r.LeaseId, wait)
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.AcquireReadLockResponse{Token: token}, nil
}

func (s *server) ReleaseLock(ctx context.Context, r *registryv1.ReleaseLockRequest) (*registryv1.ReleaseLockResponse, error) {
	released, err := s.store.ReleaseLock(ctx, r.GetToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &registryv1.ReleaseLockResponse{Released: released}, nil
}
