package registry

import (
	"context"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// DefaultStoreTimeout bounds one backend call when --store-timeout is unset.
const DefaultStoreTimeout = 5 * time.Second

// deadlineBackend gives every call to the backend a deadline, so that a
// caller gets Unavailable within seconds when etcd does not answer, instead
// of hanging on a client that set no deadline of its own (seen: ListInstances
// hung for over ten minutes while etcd was stopped). Watches are long-lived
// and pass through; their snapshots and re-opens are bounded inside the
// store. A read lock may wait its own wait time on top.
type deadlineBackend struct {
	Backend
	timeout time.Duration
}

func withDeadline(b Backend, timeout time.Duration) Backend {
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	return &deadlineBackend{Backend: b, timeout: timeout}
}

func (d *deadlineBackend) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

func (d *deadlineBackend) GrantLease(ctx context.Context, ttl time.Duration, pod *registryv1.KubernetesPod, tokenDigest string) (uint64, time.Duration, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.GrantLease(ctx, ttl, pod, tokenDigest)
}

func (d *deadlineBackend) Register(ctx context.Context, in *registryv1.Instance, ttl time.Duration, lease uint64, pod *registryv1.KubernetesPod, tokenDigest string) (*registryv1.RegisterResponse, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.Register(ctx, in, ttl, lease, pod, tokenDigest)
}

func (d *deadlineBackend) LeaseTokenDigest(ctx context.Context, lease uint64) (string, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.LeaseTokenDigest(ctx, lease)
}

func (d *deadlineBackend) KeepAlive(ctx context.Context, lease uint64) (time.Duration, bool, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.KeepAlive(ctx, lease)
}

func (d *deadlineBackend) Deregister(ctx context.Context, lease uint64) (int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.Deregister(ctx, lease)
}

func (d *deadlineBackend) ListInstances(ctx context.Context, f *registryv1.InstanceFilter) ([]*registryv1.Instance, int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.ListInstances(ctx, f)
}

func (d *deadlineBackend) RegisterModel(ctx context.Context, c *registryv1.ModelCard, lease uint64) (int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.RegisterModel(ctx, c, lease)
}

func (d *deadlineBackend) ListModels(ctx context.Context, f *registryv1.ModelFilter) ([]*registryv1.ModelCard, int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.ListModels(ctx, f)
}

func (d *deadlineBackend) CreateBucket(ctx context.Context, bucket string) (bool, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.CreateBucket(ctx, bucket)
}

func (d *deadlineBackend) GetKey(ctx context.Context, bucket, key string) (*registryv1.KeyValue, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.GetKey(ctx, bucket, key)
}

func (d *deadlineBackend) PutKey(ctx context.Context, bucket, key string, value []byte, lease uint64, expected *int64) (int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.PutKey(ctx, bucket, key, value, lease, expected)
}

func (d *deadlineBackend) CreateKey(ctx context.Context, bucket, key string, value []byte, lease uint64) (int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.CreateKey(ctx, bucket, key, value, lease)
}

func (d *deadlineBackend) DeleteKey(ctx context.Context, bucket, key string) (bool, int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.DeleteKey(ctx, bucket, key)
}

func (d *deadlineBackend) ListKeys(ctx context.Context, bucket, prefix string) ([]*registryv1.KeyValue, int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.ListKeys(ctx, bucket, prefix)
}

func (d *deadlineBackend) AcquireWriteLock(ctx context.Context, name string, lease uint64) (string, bool, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.AcquireWriteLock(ctx, name, lease)
}

func (d *deadlineBackend) AcquireReadLock(ctx context.Context, name string, lease uint64, wait time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+d.timeout)
	defer cancel()
	return d.Backend.AcquireReadLock(ctx, name, lease, wait)
}

func (d *deadlineBackend) ReleaseLock(ctx context.Context, token string) (bool, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.Backend.ReleaseLock(ctx, token)
}
