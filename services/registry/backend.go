package registry

import (
	"context"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// Backend is where the registry keeps its state. The gRPC server validates
// every request before calling it, so a Backend sees only well-formed names,
// TTLs and filters, and it reports failures with the package's sentinels
// (ErrNotFound, ErrExists, ErrConflict, ErrTimeout, ErrUnavailable, ErrInvalid),
// which server.go maps to gRPC codes. Store (etcd) is the default Backend.
//
// Watch methods send a snapshot (unless resume > 0 and the backend can serve
// that revision), then every change, and return when ctx ends, stop closes or
// send fails. A resume revision the backend cannot serve is answered with a
// snapshot marked SNAPSHOT_REASON_COMPACTED.
type Backend interface {
	// GrantLease grants a lease of ttl for the worker in pod (nil outside
	// Kubernetes) and returns its id and granted TTL. tokenDigest (the hex
	// SHA-256 of the lease's secret token) is stored with the lease, in the
	// same write or undone with it, never the token itself.
	GrantLease(ctx context.Context, ttl time.Duration, pod *registryv1.KubernetesPod, tokenDigest string) (uint64, time.Duration, error)
	// Register stores an instance tied to lease (a new lease of ttl for pod
	// when 0, which gets tokenDigest as GrantLease's). A duplicate is
	// ErrExists; an unknown lease is ErrNotFound.
	Register(ctx context.Context, in *registryv1.Instance, ttl time.Duration, lease uint64, pod *registryv1.KubernetesPod, tokenDigest string) (*registryv1.RegisterResponse, error)
	// LeaseTokenDigest returns the token digest stored with a lease: ""
	// for a live lease without one (granted before lease tokens existed),
	// ErrNotFound when the lease is gone.
	LeaseTokenDigest(ctx context.Context, lease uint64) (string, error)
	// KeepAlive refreshes a lease once; found is false when it is gone.
	KeepAlive(ctx context.Context, lease uint64) (ttl time.Duration, found bool, err error)
	// Deregister ends a lease and everything tied to it; an unknown lease is
	// ErrNotFound.
	Deregister(ctx context.Context, lease uint64) (int64, error)
	// ListInstances returns the instances that match f, in key order.
	ListInstances(ctx context.Context, f *registryv1.InstanceFilter) ([]*registryv1.Instance, int64, error)
	// WatchInstances streams the instances that match f.
	WatchInstances(ctx context.Context, f *registryv1.InstanceFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchInstancesResponse) error) error
	// RegisterModel stores a model card tied to lease; an unknown lease is
	// ErrNotFound.
	RegisterModel(ctx context.Context, c *registryv1.ModelCard, lease uint64) (int64, error)
	// ListModels returns the model cards that match f.
	ListModels(ctx context.Context, f *registryv1.ModelFilter) ([]*registryv1.ModelCard, int64, error)
	// WatchModels streams the model cards that match f.
	WatchModels(ctx context.Context, f *registryv1.ModelFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchModelsResponse) error) error

	// CreateBucket declares a bucket; created is false when it existed.
	CreateBucket(ctx context.Context, bucket string) (bool, error)
	// GetKey reads a key: ErrNotFound when absent, ErrInvalid for an
	// undeclared bucket.
	GetKey(ctx context.Context, bucket, key string) (*registryv1.KeyValue, error)
	// PutKey writes a key; with expected set only at that mod revision, else
	// ErrConflict.
	PutKey(ctx context.Context, bucket, key string, value []byte, lease uint64, expected *int64) (int64, error)
	// CreateKey writes a key only if absent, else ErrExists.
	CreateKey(ctx context.Context, bucket, key string, value []byte, lease uint64) (int64, error)
	// DeleteKey deletes a key; deleted is false when it was absent.
	DeleteKey(ctx context.Context, bucket, key string) (bool, int64, error)
	// ListKeys lists a bucket's keys under prefix.
	ListKeys(ctx context.Context, bucket, prefix string) ([]*registryv1.KeyValue, int64, error)
	// WatchKeys streams a bucket's keys under prefix; ErrInvalid for an
	// undeclared bucket.
	WatchKeys(ctx context.Context, bucket, prefix string, resume int64, stop <-chan struct{}, send func(*registryv1.WatchKeysResponse) error) error

	// AcquireWriteLock takes an exclusive lock without waiting.
	AcquireWriteLock(ctx context.Context, name string, lease uint64) (token string, acquired bool, err error)
	// AcquireReadLock takes a shared lock, waiting up to wait (ErrTimeout).
	AcquireReadLock(ctx context.Context, name string, lease uint64, wait time.Duration) (string, error)
	// ReleaseLock releases a hold; released is false when it was gone.
	ReleaseLock(ctx context.Context, token string) (bool, error)

	// Close stops the backend's background work.
	Close()
}

var _ Backend = (*Store)(nil)
