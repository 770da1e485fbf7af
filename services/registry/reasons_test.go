package registry_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

// TestReasonsTellRetryFromReRegister checks over gRPC the two answers a
// worker branches on: a lease that is gone is NotFound with reason
// LEASE_NOT_FOUND on every RPC that names it (KeepAlive says found = false),
// while a missing key is NotFound without that reason; and with etcd
// stopped every call is Unavailable with reason BACKEND_UNAVAILABLE (retry,
// the lease may well be alive), never NotFound.
func TestReasonsTellRetryFromReRegister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	want := func(what string, err error, code codes.Code, reason string) {
		t.Helper()
		if !apierr.Is(err, code, reason) || apierr.Reason(err) != reason {
			t.Errorf("%s = %v (reason %q), want %v with reason %q", what, err, apierr.Reason(err), code, reason)
		}
	}
	keepAlive := func(lease uint64) (*registryv1.KeepAliveResponse, error) {
		kctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ka, err := e.rpc.KeepAlive(kctx)
		if err != nil {
			return nil, err
		}
		if err := ka.Send(&registryv1.KeepAliveRequest{LeaseId: lease}); err != nil {
			return nil, err
		}
		return ka.Recv()
	}

	if _, err := e.rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
	gone, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "e", "127.0.0.1:1"), TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: gone.InstanceId}); err != nil {
		t.Fatal(err)
	}
	_, err = e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "e2", "127.0.0.1:1"), LeaseId: gone.InstanceId})
	want("Register on a revoked lease", err, codes.NotFound, apierr.ReasonLeaseNotFound)
	_, err = e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: gone.InstanceId})
	want("Deregister of a revoked lease", err, codes.NotFound, apierr.ReasonLeaseNotFound)
	_, err = e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: "k", Value: []byte("v"), LeaseId: gone.InstanceId})
	want("PutKey on a revoked lease", err, codes.NotFound, apierr.ReasonLeaseNotFound)
	if r, err := keepAlive(gone.InstanceId); err != nil || r.Found {
		t.Errorf("KeepAlive of a revoked lease = %v, %v; want found = false", r, err)
	}
	_, err = e.rpc.GetKey(ctx, &registryv1.GetKeyRequest{Bucket: "b", Key: "missing"})
	want("GetKey of a missing key", err, codes.NotFound, "")

	live, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "e", "127.0.0.1:2"), TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	e.etcd.Stop()
	defer e.etcd.Start()
	// Each call waits out the registry's store timeout: all at once.
	calls := map[string]func() error{
		"ListInstances": func() error {
			_, err := e.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{})
			return err
		},
		"GrantLease": func() error {
			_, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 60})
			return err
		},
		"Register": func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "e3", "127.0.0.1:3"), TtlSeconds: 60})
			return err
		},
		"KeepAlive of a live lease": func() error {
			r, err := keepAlive(live.InstanceId)
			if err == nil {
				return status.Errorf(codes.OK, "answered %v", r)
			}
			return err
		},
	}
	errs := make(map[string]error, len(calls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			err := call()
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for name, err := range errs {
		want(name+" without etcd", err, codes.Unavailable, apierr.ReasonBackendUnavailable)
	}
}
