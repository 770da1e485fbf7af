package registry

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// instrumentedBackend counts what its Backend does for the registry's
// metrics, in one place instead of counters sprinkled through the server
// (as llm-d-router's instrumented index): failures by operation and kind
// (the etcd errors and time-outs an operator looks for) and leases found gone
// on keep-alive.
type instrumentedBackend struct {
	Backend
	errs *prometheus.CounterVec
	lost prometheus.Counter
}

func instrument(b Backend, m *metrics) Backend {
	return &instrumentedBackend{Backend: b, errs: m.backendErrors, lost: m.leasesLost}
}

// count records a failed call. Answers the caller caused (not found,
// exists, conflict, invalid) are not backend failures.
func (b *instrumentedBackend) count(op string, err error) {
	switch {
	case err == nil, errors.Is(err, context.Canceled),
		errors.Is(err, ErrNotFound), errors.Is(err, ErrExists), errors.Is(err, ErrConflict), errors.Is(err, ErrInvalid):
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		b.errs.WithLabelValues(op, "timeout").Inc()
	case errors.Is(err, ErrUnavailable):
		b.errs.WithLabelValues(op, "unavailable").Inc()
	default:
		b.errs.WithLabelValues(op, "other").Inc()
	}
}

func (b *instrumentedBackend) GrantLease(ctx context.Context, ttl time.Duration, pod *registryv1.KubernetesPod, tokenDigest string) (uint64, time.Duration, error) {
	r0, r1, err := b.Backend.GrantLease(ctx, ttl, pod, tokenDigest)
	b.count("GrantLease", err)
	return r0, r1, err
}

func (b *instrumentedBackend) Register(ctx context.Context, in *registryv1.Instance, ttl time.Duration, lease uint64, pod *registryv1.KubernetesPod, tokenDigest string) (*registryv1.RegisterResponse, error) {
	r0, err := b.Backend.Register(ctx, in, ttl, lease, pod, tokenDigest)
	b.count("Register", err)
	return r0, err
}

func (b *instrumentedBackend) LeaseTokenDigest(ctx context.Context, lease uint64) (string, error) {
	r0, err := b.Backend.LeaseTokenDigest(ctx, lease)
	b.count("LeaseTokenDigest", err)
	return r0, err
}

func (b *instrumentedBackend) KeepAlive(ctx context.Context, lease uint64) (ttl time.Duration, found bool, err error) {
	ttl, found, err = b.Backend.KeepAlive(ctx, lease)
	b.count("KeepAlive", err)
	if err == nil && !found {
		b.lost.Inc()
	}
	return ttl, found, err
}

func (b *instrumentedBackend) Deregister(ctx context.Context, lease uint64) (int64, error) {
	r0, err := b.Backend.Deregister(ctx, lease)
	b.count("Deregister", err)
	return r0, err
}

func (b *instrumentedBackend) ListInstances(ctx context.Context, f *registryv1.InstanceFilter) ([]*registryv1.Instance, int64, error) {
	r0, r1, err := b.Backend.ListInstances(ctx, f)
	b.count("ListInstances", err)
	return r0, r1, err
}

func (b *instrumentedBackend) WatchInstances(ctx context.Context, f *registryv1.InstanceFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchInstancesResponse) error) error {
	err := b.Backend.WatchInstances(ctx, f, resume, stop, send)
	b.count("WatchInstances", err)
	return err
}

func (b *instrumentedBackend) RegisterModel(ctx context.Context, c *registryv1.ModelCard, lease uint64) (int64, error) {
	r0, err := b.Backend.RegisterModel(ctx, c, lease)
	b.count("RegisterModel", err)
	return r0, err
}

func (b *instrumentedBackend) ListModels(ctx context.Context, f *registryv1.ModelFilter) ([]*registryv1.ModelCard, int64, error) {
	r0, r1, err := b.Backend.ListModels(ctx, f)
	b.count("ListModels", err)
	return r0, r1, err
}

func (b *instrumentedBackend) WatchModels(ctx context.Context, f *registryv1.ModelFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchModelsResponse) error) error {
	err := b.Backend.WatchModels(ctx, f, resume, stop, send)
	b.count("WatchModels", err)
	return err
}

func (b *instrumentedBackend) CreateBucket(ctx context.Context, bucket string) (bool, error) {
	r0, err := b.Backend.CreateBucket(ctx, bucket)
	b.count("CreateBucket", err)
	return r0, err
}

func (b *instrumentedBackend) GetKey(ctx context.Context, bucket, key string) (*registryv1.KeyValue, error) {
	r0, err := b.Backend.GetKey(ctx, bucket, key)
	b.count("GetKey", err)
	return r0, err
}

func (b *instrumentedBackend) PutKey(ctx context.Context, bucket, key string, value []byte, lease uint64, expected *int64) (int64, error) {
	r0, err := b.Backend.PutKey(ctx, bucket, key, value, lease, expected)
	b.count("PutKey", err)
	return r0, err
}

func (b *instrumentedBackend) CreateKey(ctx context.Context, bucket, key string, value []byte, lease uint64) (int64, error) {
	r0, err := b.Backend.CreateKey(ctx, bucket, key, value, lease)
	b.count("CreateKey", err)
	return r0, err
}

func (b *instrumentedBackend) DeleteKey(ctx context.Context, bucket, key string) (bool, int64, error) {
	r0, r1, err := b.Backend.DeleteKey(ctx, bucket, key)
	b.count("DeleteKey", err)
	return r0, r1, err
}

func (b *instrumentedBackend) ListKeys(ctx context.Context, bucket, prefix string) ([]*registryv1.KeyValue, int64, error) {
	r0, r1, err := b.Backend.ListKeys(ctx, bucket, prefix)
	b.count("ListKeys", err)
	return r0, r1, err
}

func (b *instrumentedBackend) WatchKeys(ctx context.Context, bucket, prefix string, resume int64, stop <-chan struct{}, send func(*registryv1.WatchKeysResponse) error) error {
	err := b.Backend.WatchKeys(ctx, bucket, prefix, resume, stop, send)
	b.count("WatchKeys", err)
	return err
}

func (b *instrumentedBackend) AcquireWriteLock(ctx context.Context, name string, lease uint64) (token string, acquired bool, err error) {
	token, acquired, err = b.Backend.AcquireWriteLock(ctx, name, lease)
	b.count("AcquireWriteLock", err)
	return token, acquired, err
}

func (b *instrumentedBackend) AcquireReadLock(ctx context.Context, name string, lease uint64, wait time.Duration) (string, error) {
	r0, err := b.Backend.AcquireReadLock(ctx, name, lease, wait)
	b.count("AcquireReadLock", err)
	return r0, err
}

func (b *instrumentedBackend) ReleaseLock(ctx context.Context, token string) (bool, error) {
	r0, err := b.Backend.ReleaseLock(ctx, token)
	b.count("ReleaseLock", err)
	return r0, err
}

// instancesCollector counts the live instances per namespace and component
// at each scrape, from the backend itself, so the gauge is never out of step
// with what watchers see.
type instancesCollector struct {
	b    Backend
	desc *prometheus.Desc
}

func newInstancesCollector(b Backend) *instancesCollector {
	return &instancesCollector{b: b, desc: prometheus.NewDesc("switchyard_registry_live_instances",
		"Registered (live) instances, by namespace and component.", []string{"namespace", "component"}, nil)}
}

func (c *instancesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *instancesCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ins, _, err := c.b.ListInstances(ctx, &registryv1.InstanceFilter{})
	if err != nil {
		return // counted in backend_errors_total
	}
	type key struct{ ns, comp string }
	n := map[key]int{}
	for _, in := range ins {
		n[key{in.Namespace, in.Component}]++
	}
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), k.ns, k.comp)
	}
}
