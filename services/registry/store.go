package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// Store is the registry's state in etcd: instances, model cards, buckets and
// locks, every one of them optionally tied to a lease.
type Store struct {
	cli       *clientv3.Client
	keepalive *keepaliver
	buckets   sync.Map // bucket name -> struct{}, buckets known to exist
}

// NewStore wraps an etcd client; log receives the store's own events (its
// shared keep-alive stream breaking and opening again). Close stops the
// store's keep-alive stream; the caller closes the client.
func NewStore(cli *clientv3.Client, log *slog.Logger) *Store {
	return &Store{cli: cli, keepalive: newKeepaliver(cli, log)}
}

// Close stops background work.
func (s *Store) Close() { s.keepalive.close() }

// etcdErr maps etcd client errors to the registry's sentinels.
func etcdErr(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound), rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCLeaseNotFound):
		// The client usually hands the first form, a raw stream error the
		// second.
		return fmt.Errorf("%s: %w: lease not found (expired or revoked)", op, ErrLeaseNotFound)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
	}
	if st, ok := status.FromError(err); ok && unavailableCode(st.Code()) {
		return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
	}
	// The etcd client turns the server's own errors into rpctypes.EtcdError,
	// which is no gRPC status: "no leader", "request timed out", "leader
	// changed" and the like, all of a cluster that cannot serve right now
	// (a lost quorum, an election). They are Unavailable with their code.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) && unavailableCode(ee.Code()) {
		return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unavailableCode reports whether an etcd answer's code means that etcd
// cannot serve right now (retry), as opposed to a refusal of the request.
func unavailableCode(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

// GrantLease grants a lease of the given TTL and stores the digest of its
// token under the registry's own key, tied to the lease. etcd leases need no
// pod.
func (s *Store) GrantLease(ctx context.Context, ttl time.Duration, _ *registryv1.KubernetesPod, tokenDigest string) (uint64, time.Duration, error) {
	id, granted, err := s.grant(ctx, ttl)
	if err != nil {
		return 0, 0, err
	}
	if _, err := s.cli.Put(ctx, leaseTokenKey(id), tokenDigest, clientv3.WithLease(clientv3.LeaseID(id))); err != nil {
		s.revokeQuietly(id)
		return 0, 0, etcdErr("grant lease: store token digest", err)
	}
	return id, granted, nil
}

func (s *Store) grant(ctx context.Context, ttl time.Duration) (uint64, time.Duration, error) {
	resp, err := s.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return 0, 0, etcdErr("grant lease", err)
	}
	return uint64(resp.ID), time.Duration(resp.TTL) * time.Second, nil
}

// LeaseTokenDigest reads the digest stored with a lease. The digest is
// written once, with the lease, before its id is handed out: a serializable
// read (this member's own store, no round of the Raft log: a fraction of a
// linearizable read's cost on a loaded etcd) that finds it is the answer. A
// member behind the leader may not have it yet: then the linearizable read.
func (s *Store) LeaseTokenDigest(ctx context.Context, lease uint64) (string, error) {
	if resp, err := s.cli.Get(ctx, leaseTokenKey(lease), clientv3.WithSerializable()); err == nil && len(resp.Kvs) > 0 {
		return string(resp.Kvs[0].Value), nil
	}
	resp, err := s.cli.Get(ctx, leaseTokenKey(lease))
	if err != nil {
		return "", etcdErr("read lease token", err)
	}
	if len(resp.Kvs) > 0 {
		return string(resp.Kvs[0].Value), nil
	}
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return "", etcdErr("read lease token", err)
	}
	if ttl.TTL <= 0 {
		return "", fmt.Errorf("%w: lease %x not found (expired or revoked)", ErrLeaseNotFound, lease)
	}
	return "", nil
}

// Register stores an instance under its seed key, tied to lease (granted here
// when lease is 0). It is create-if-not-exists: a duplicate is ErrExists.
func (s *Store) Register(ctx context.Context, in *registryv1.Instance, ttl time.Duration, lease uint64, _ *registryv1.KubernetesPod, tokenDigest string) (*registryv1.RegisterResponse, error) {
	granted := false
	if lease == 0 {
		id, t, err := s.grant(ctx, ttl)
		if err != nil {
			return nil, err
		}
		lease, ttl, granted = id, t, true
	} else {
		resp, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err != nil {
			return nil, etcdErr("register", err)
		}
		// -1 is a lease etcd does not have; 0 is one in its last second,
		// still there.
		if resp.TTL < 0 {
			return nil, fmt.Errorf("register: %w: lease %x not found (expired or revoked)", ErrLeaseNotFound, lease)
		}
		ttl = time.Duration(resp.GrantedTTL) * time.Second
	}
	in.InstanceId = lease
	key := instanceKey(in.Namespace, in.Component, in.Endpoint, lease)
	val, err := encodeInstance(in)
	if err != nil {
		return nil, err
	}
	ops := []clientv3.Op{clientv3.OpPut(key, string(val), clientv3.WithLease(clientv3.LeaseID(lease)))}
	if granted {
		ops = append(ops, clientv3.OpPut(leaseTokenKey(lease), tokenDigest, clientv3.WithLease(clientv3.LeaseID(lease))))
	}
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(ops...).
		Commit()
	if err != nil {
		if granted {
			s.revokeQuietly(lease)
		}
		return nil, etcdErr("register", err)
	}
	if !txn.Succeeded {
		if granted {
			s.revokeQuietly(lease)
		}
		return nil, fmt.Errorf("register: %w: %s is already registered", ErrExists, key)
	}
	return &registryv1.RegisterResponse{InstanceId: lease, TtlSeconds: int64(ttl / time.Second), Revision: txn.Header.Revision}, nil
}

func (s *Store) revokeQuietly(lease uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, clientv3.LeaseID(lease))
}

// KeepAlive refreshes a lease once. found is false when the lease is gone.
func (s *Store) KeepAlive(ctx context.Context, lease uint64) (ttl time.Duration, found bool, err error) {
	return s.keepalive.once(ctx, lease)
}

// Deregister revokes a lease, deleting every key tied to it.
func (s *Store) Deregister(ctx context.Context, lease uint64) (int64, error) {
	resp, err := s.cli.Revoke(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return 0, etcdErr("deregister", err)
	}
	return resp.Header.Revision, nil
}

// ListInstances returns the instances that match f.
func (s *Store) ListInstances(ctx context.Context, f *registryv1.InstanceFilter) ([]*registryv1.Instance, int64, error) {
	resp, err := s.cli.Get(ctx, instancePrefix(f), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, etcdErr("list instances", err)
	}
	out := make([]*registryv1.Instance, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		in, err := decodeInstance(kv.Value)
		if err != nil {
			continue // foreign or corrupt value: not ours to serve
		}
		out = append(out, in)
	}
	return out, resp.Header.Revision, nil
}

// RegisterModel stores a model card tied to lease.
func (s *Store) RegisterModel(ctx context.Context, c *registryv1.ModelCard, lease uint64) (int64, error) {
	c.InstanceId = lease
	val, err := encodeCard(c)
	if err != nil {
		return 0, err
	}
	resp, err := s.cli.Put(ctx, modelKey(c.Namespace, c.Component, c.Endpoint, lease), string(val), clientv3.WithLease(clientv3.LeaseID(lease)))
	if err != nil {
		return 0, etcdErr("register model", err)
	}
	return resp.Header.Revision, nil
}

// ListModels returns the model cards that match f.
func (s *Store) ListModels(ctx context.Context, f *registryv1.ModelFilter) ([]*registryv1.ModelCard, int64, error) {
	modelName := f.GetModelName()
	resp, err := s.cli.Get(ctx, filterPrefix(modelsPrefix, f.GetNamespace()), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, etcdErr("list models", err)
	}
	var out []*registryv1.ModelCard
	for _, kv := range resp.Kvs {
		c, err := decodeCard(kv.Value)
		if err != nil || (modelName != "" && c.ModelName != modelName) {
			continue
		}
		out = append(out, c)
	}
	return out, resp.Header.Revision, nil
}

// CreateBucket declares a bucket; created is false when it existed.
func (s *Store) CreateBucket(ctx context.Context, bucket string) (bool, error) {
	key := bucketsPrefix + bucket
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "")).
		Commit()
	if err != nil {
		return false, etcdErr("create bucket", err)
	}
	s.buckets.Store(bucket, struct{}{})
	return txn.Succeeded, nil
}

// checkBucket fails with ErrInvalid for a bucket nobody created. Known
// buckets are cached: buckets are never deleted.
func (s *Store) checkBucket(ctx context.Context, bucket string) error {
	if _, ok := s.buckets.Load(bucket); ok {
		return nil
	}
	resp, err := s.cli.Get(ctx, bucketsPrefix+bucket, clientv3.WithCountOnly())
	if err != nil {
		return etcdErr("check bucket", err)
	}
	if resp.Count == 0 {
		return fmt.Errorf("%w: unknown bucket %q: create it with CreateBucket first", ErrInvalid, bucket)
	}
	s.buckets.Store(bucket, struct{}{})
	return nil
}

func bucketKey(bucket, key string) string { return kvPrefix + bucket + "/" + key }

func toKV(bucket string, kv *mvccpb.KeyValue) *registryv1.KeyValue {
	return &registryv1.KeyValue{
		Key:            strings.TrimPrefix(string(kv.Key), kvPrefix+bucket+"/"),
		Value:          kv.Value,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		LeaseId:        uint64(kv.Lease),
	}
}

// GetKey reads one key of a bucket.
func (s *Store) GetKey(ctx context.Context, bucket, key string) (*registryv1.KeyValue, error) {
	if err := s.checkBucket(ctx, bucket); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, bucketKey(bucket, key))
	if err != nil {
		return nil, etcdErr("get key", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("get key: %w: %q in bucket %q", ErrNotFound, key, bucket)
	}
	return toKV(bucket, resp.Kvs[0]), nil
}

// PutKey writes a key; with expected set, only when its mod revision matches
// (0 meaning absent), else ErrConflict.
func (s *Store) PutKey(ctx context.Context, bucket, key string, value []byte, lease uint64, expected *int64) (int64, error) {
	if err := s.checkBucket(ctx, bucket); err != nil {
		return 0, err
	}
	k := bucketKey(bucket, key)
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	if expected == nil {
		resp, err := s.cli.Put(ctx, k, string(value), opts...)
		if err != nil {
			return 0, etcdErr("put key", err)
		}
		return resp.Header.Revision, nil
	}
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", *expected)).
		Then(clientv3.OpPut(k, string(value), opts...)).
		Commit()
	if err != nil {
		return 0, etcdErr("put key", err)
	}
	if !txn.Succeeded {
		return 0, fmt.Errorf("put key: %w: %q in bucket %q is not at revision %d", ErrConflict, key, bucket, *expected)
	}
	return txn.Header.Revision, nil
}

// CreateKey writes a key only if it is absent, else ErrExists.
func (s *Store) CreateKey(ctx context.Context, bucket, key string, value []byte, lease uint64) (int64, error) {
	if err := s.checkBucket(ctx, bucket); err != nil {
		return 0, err
	}
	k := bucketKey(bucket, key)
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(value), opts...)).
		Commit()
	if err != nil {
		return 0, etcdErr("create key", err)
	}
	if !txn.Succeeded {
		return 0, fmt.Errorf("create key: %w: %q in bucket %q", ErrExists, key, bucket)
	}
	return txn.Header.Revision, nil
}

// DeleteKey deletes a key; deleted is false when it was absent.
func (s *Store) DeleteKey(ctx context.Context, bucket, key string) (bool, int64, error) {
	if err := s.checkBucket(ctx, bucket); err != nil {
		return false, 0, err
	}
	resp, err := s.cli.Delete(ctx, bucketKey(bucket, key))
	if err != nil {
		return false, 0, etcdErr("delete key", err)
	}
	return resp.Deleted > 0, resp.Header.Revision, nil
}

// ListKeys lists a bucket's keys under prefix.
func (s *Store) ListKeys(ctx context.Context, bucket, prefix string) ([]*registryv1.KeyValue, int64, error) {
	if err := s.checkBucket(ctx, bucket); err != nil {
		return nil, 0, err
	}
	resp, err := s.cli.Get(ctx, bucketKey(bucket, prefix), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, etcdErr("list keys", err)
	}
	out := make([]*registryv1.KeyValue, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = toKV(bucket, kv)
	}
	return out, resp.Header.Revision, nil
}

// Lock keys: one writer key and a reader key per read hold, each tied to the
// holder's lease. Tokens name the key and carry a random nonce so that only
// the holder can release.
func writerKey(name string) string     { return locksPrefix + name + "/writer" }
func readersPrefix(name string) string { return locksPrefix + name + "/readers/" }

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AcquireWriteLock takes the exclusive lock if no writer and no reader holds
// it. It never waits.
func (s *Store) AcquireWriteLock(ctx context.Context, name string, lease uint64) (string, bool, error) {
	n := nonce()
	wk := writerKey(name)
	txn, err := s.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(wk), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(readersPrefix(name)), "=", 0).WithPrefix(),
		).
		Then(clientv3.OpPut(wk, n, clientv3.WithLease(clientv3.LeaseID(lease)))).
		Commit()
	if err != nil {
		return "", false, etcdErr("acquire write lock", err)
	}
	if !txn.Succeeded {
		return "", false, nil
	}
	return name + "/writer/" + n, true, nil
}

// lockPollInterval is how often a waiting reader looks again.
const lockPollInterval = 100 * time.Millisecond

// AcquireReadLock takes a shared lock, polling every 100 ms while a writer
// holds it, for at most wait (ErrTimeout after).
func (s *Store) AcquireReadLock(ctx context.Context, name string, lease uint64, wait time.Duration) (string, error) {
	n := nonce()
	rk := readersPrefix(name) + n
	wk := writerKey(name)
	deadline := time.Now().Add(wait)
	for {
		txn, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(wk), "=", 0)).
			Then(clientv3.OpPut(rk, "", clientv3.WithLease(clientv3.LeaseID(lease)))).
			Commit()
		if err != nil {
			return "", etcdErr("acquire read lock", err)
		}
		if txn.Succeeded {
			return name + "/readers/" + n, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", fmt.Errorf("acquire read lock: %w: lock %q still held by a writer after %v", ErrTimeout, name, wait)
		}
		t := time.NewTimer(min(lockPollInterval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// ReleaseLock releases the hold a token names; released is false when the
// hold is already gone (released, or its lease ended).
func (s *Store) ReleaseLock(ctx context.Context, token string) (bool, error) {
	name, kind, n, err := parseToken(token)
	if err != nil {
		return false, err
	}
	var cmp clientv3.Cmp
	var key string
	if kind == "writer" {
		key = writerKey(name)
		cmp = clientv3.Compare(clientv3.Value(key), "=", n)
	} else {
		key = readersPrefix(name) + n
		cmp = clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	}
	txn, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, etcdErr("release lock", err)
	}
	return txn.Succeeded, nil
}

func parseToken(token string) (name, kind, n string, err error) {
	parts := strings.Split(token, "/")
	if len(parts) != 3 || (parts[1] != "writer" && parts[1] != "readers") || len(parts[2]) != 16 {
		return "", "", "", fmt.Errorf("%w: %q is not a lock token", ErrInvalid, token)
	}
	if err := validName("lock name in token", parts[0]); err != nil {
		return "", "", "", err
	}
	if _, err := hex.DecodeString(parts[2]); err != nil {
		return "", "", "", fmt.Errorf("%w: %q is not a lock token", ErrInvalid, token)
	}
	return parts[0], parts[1], parts[2], nil
}
