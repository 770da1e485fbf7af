package registry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/registry"
	"github.com/switchyard-llm/switchyard/services/registry/etcdcluster"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest/leasekeep"
)

func TestMain(m *testing.M) {
	// The tests wait out etcd outages, store timeouts and leases.
	testwait.AtLeastParallel(6)
	goleak.VerifyTestMain(m, etcdcluster.KnownGoroutines()...)
}

// env is one etcd, one registry and a raw client of each.
type env struct {
	etcd *registrytest.Etcd
	reg  *registrytest.Registry
	rpc  registryv1.RegistryServiceClient
	kv   *clientv3.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e, r := registrytest.Start(t)
	return &env{etcd: e, reg: r, rpc: dialRPC(t, r.Addr), kv: etcdClient(t, e.Endpoints)}
}

func dialRPC(t *testing.T, addr string) registryv1.RegistryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, leasekeep.New().DialOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return registryv1.NewRegistryServiceClient(cc)
}

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tcpInstance(ns, comp, ep, addr string) *registryv1.Instance {
	return &registryv1.Instance{Namespace: ns, Component: comp, Endpoint: ep, Transport: &commonv1.Transport{Tcp: addr}}
}

func TestSeedKeyAndJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name      string
		transport *commonv1.Transport
		wantT     string
	}{
		{"tcp", &commonv1.Transport{Tcp: "10.0.0.7:9345"}, `{"tcp":"10.0.0.7:9345"}`},
		{"http", &commonv1.Transport{Http: "http://10.0.0.7:8888/v1/rpc"}, `{"http":"http://10.0.0.7:8888/v1/rpc"}`},
		{"nats", &commonv1.Transport{Nats: "vllm-agg.backend.generate.1"}, `{"nats":"vllm-agg.backend.generate.1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &registryv1.Instance{Namespace: "vllm-agg", Component: "backend", Endpoint: "generate", Transport: tt.transport}
			resp, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in, TtlSeconds: 30})
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("/services/vllm-agg/backend/generate/%x", resp.InstanceId)
			got, err := e.kv.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) != 1 {
				t.Fatalf("etcd has no key %s", key)
			}
			want := fmt.Sprintf(`{"namespace":"vllm-agg","component":"backend","endpoint":"generate","instance_id":%d,"transport":%s}`, resp.InstanceId, tt.wantT)
			if string(got.Kvs[0].Value) != want {
				t.Fatalf("value\n got %s\nwant %s", got.Kvs[0].Value, want)
			}
			if got.Kvs[0].Lease != int64(resp.InstanceId) {
				t.Fatalf("key lease = %x, want the instance id %x", got.Kvs[0].Lease, resp.InstanceId)
			}
			if strings.ToLower(key) != key {
				t.Fatalf("key %s is not lower-case", key)
			}
		})
	}
}

func TestForeignSeedValueIsListed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	// A value written by another implementation of the seed layout (Dynamo).
	lease, err := e.kv.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("/services/dynamo/backend/generate/%x", int64(lease.ID))
	val := fmt.Sprintf(`{"namespace":"dynamo","component":"backend","endpoint":"generate","instance_id":%d,"transport":{"tcp":"127.0.0.1:1"}}`, lease.ID)
	if _, err := e.kv.Put(ctx, key, val, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	resp, err := e.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "dynamo"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []*registryv1.Instance{{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: uint64(lease.ID), Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}}
	if d := cmp.Diff(want, resp.Instances, protocmp.Transform()); d != "" {
		t.Fatalf("ListInstances (-want +got):\n%s", d)
	}
}

func TestDuplicateRegistrationIsAlreadyExists(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	lease, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	in := tcpInstance("ns", "comp", "gen", "127.0.0.1:1")
	if _, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in, LeaseId: lease.LeaseId}); err != nil {
		t.Fatal(err)
	}
	in.Transport = &commonv1.Transport{Tcp: "127.0.0.1:2"}
	_, err = e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in, LeaseId: lease.LeaseId})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second Register = %v, want AlreadyExists", err)
	}
	list, err := e.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Instances) != 1 || list.Instances[0].Transport.GetTcp() != "127.0.0.1:1" {
		t.Fatalf("the duplicate overwrote the original: %v", list.Instances)
	}
	// A second endpoint on the same lease is fine and shares the instance id.
	in2 := tcpInstance("ns", "comp", "clear", "127.0.0.1:1")
	r2, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in2, LeaseId: lease.LeaseId})
	if err != nil || r2.InstanceId != lease.LeaseId {
		t.Fatalf("second endpoint: %v, id %x want %x", err, r2.GetInstanceId(), lease.LeaseId)
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	big := map[string]string{"blob": strings.Repeat("x", 64<<10)}
	good := func() *registryv1.Instance { return tcpInstance("ns", "comp", "gen", "127.0.0.1:1") }
	with := func(f func(*registryv1.Instance)) *registryv1.Instance { in := good(); f(in); return in }
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"missing instance", func() error { _, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{}); return err }, "instance is missing"},
		{"empty namespace", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) { i.Namespace = "" })})
			return err
		}, "namespace is empty"},
		{"upper-case component", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) { i.Component = "Backend" })})
			return err
		}, `component "Backend" does not match`},
		{"slash in endpoint", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) { i.Endpoint = "a/b" })})
			return err
		}, "does not match"},
		{"leading dash", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) { i.Namespace = "-ns" })})
			return err
		}, "does not match"},
		{"undialable tcp address", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) {
				i.Transport = &commonv1.Transport{Tcp: "not a host:port \x00"}
			})})
			return err
		}, "instance.transport.tcp"},
		{"no transport", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) { i.Transport = nil })})
			return err
		}, "transport is missing"},
		{"empty address", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) {
				i.Transport = &commonv1.Transport{}
			})})
			return err
		}, "address is empty"},
		{"ttl 301", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: good(), TtlSeconds: 301})
			return err
		}, "ttl_seconds 301 is outside 1..300"},
		{"ttl negative", func() error {
			_, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: -1})
			return err
		}, "outside 1..300"},
		{"metadata over 64 KiB", func() error {
			_, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: with(func(i *registryv1.Instance) { i.Metadata = big })})
			return err
		}, "over the limit of 65536"},
		{"unknown bucket", func() error {
			_, err := e.rpc.GetKey(ctx, &registryv1.GetKeyRequest{Bucket: "never-made", Key: "k"})
			return err
		}, `unknown bucket "never-made"`},
		{"bad bucket name", func() error {
			_, err := e.rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "Bad Bucket"})
			return err
		}, "does not match"},
		{"empty key", func() error {
			_, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: ""})
			return err
		}, "key is empty"},
		{"value over 1 MiB", func() error {
			_, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: "k", Value: make([]byte, 1<<20+1)})
			return err
		}, "over the limit of 1048576"},
		{"filter gap", func() error {
			_, err := e.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Component: "c"}})
			return err
		}, "filter sets component without namespace"},
		{"keep-alive of lease 0", func() error {
			s, err := e.rpc.KeepAlive(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&registryv1.KeepAliveRequest{}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, "lease_id is required"},
		{"lock without lease", func() error {
			_, err := e.rpc.AcquireWriteLock(ctx, &registryv1.AcquireWriteLockRequest{Name: "l"})
			return err
		}, "lease_id is required"},
		{"read lock wait too long", func() error {
			_, err := e.rpc.AcquireReadLock(ctx, &registryv1.AcquireReadLockRequest{Name: "l", LeaseId: 1, TimeoutMs: 300001})
			return err
		}, "timeout_ms 300001 is outside"},
		{"bad lock token", func() error {
			_, err := e.rpc.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Token: "../../services"})
			return err
		}, "is not a lock token"},
		{"model card without name", func() error {
			_, err := e.rpc.RegisterModel(ctx, &registryv1.RegisterModelRequest{LeaseId: 1, Card: &registryv1.ModelCard{Namespace: "ns", Component: "c", Endpoint: "e", BlockSize: 16}})
			return err
		}, "model_name is empty"},
		{"model card bad sha256", func() error {
			_, err := e.rpc.RegisterModel(ctx, &registryv1.RegisterModelRequest{LeaseId: 1, Card: &registryv1.ModelCard{
				Namespace: "ns", Component: "c", Endpoint: "e", ModelName: "m", BlockSize: 16,
				Tokenizer: []*registryv1.TokenizerArtifact{{Name: "tokenizer.json", Sha256: "ABC"}},
			}})
			return err
		}, "sha256 must be 64 lower-case hex digits"},
		{"negative resume revision", func() error {
			s, err := e.rpc.WatchInstances(ctx, &registryv1.WatchInstancesRequest{ResumeRevision: -5})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, "resume_revision -5 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want InvalidArgument mentioning %q", err, tt.want)
			}
		})
	}
}

// watchRecv reads one watch message or fails the test.
func watchRecv(t *testing.T, s registryv1.RegistryService_WatchInstancesClient) *registryv1.WatchInstancesResponse {
	t.Helper()
	for {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("watch Recv: %v", err)
		}
		if r.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_PROGRESS {
			return r
		}
	}
}

func TestExpiredLeaseDeletesAndWatcherSeesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	w, err := e.rpc.WatchInstances(ctx, &registryv1.WatchInstancesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r := watchRecv(t, w); r.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT || r.SnapshotReason != registryv1.SnapshotReason_SNAPSHOT_REASON_INITIAL {
		t.Fatalf("first message = %v, want the initial snapshot", r)
	}
	reg, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "e", "127.0.0.1:1"), TtlSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	put := watchRecv(t, w)
	if len(put.Events) != 1 || put.Events[0].Type != registryv1.EventType_EVENT_TYPE_PUT || put.Events[0].Instance.InstanceId != reg.InstanceId {
		t.Fatalf("want one PUT of %x, got %v", reg.InstanceId, put)
	}
	// No keep-alive: the lease expires after its TTL and etcd deletes the key.
	del := watchRecv(t, w)
	want := &registryv1.InstanceEvent{Type: registryv1.EventType_EVENT_TYPE_DELETE, Revision: del.Revision,
		Instance: &registryv1.Instance{Namespace: "ns", Component: "c", Endpoint: "e", InstanceId: reg.InstanceId}}
	if len(del.Events) != 1 {
		t.Fatalf("want one DELETE, got %v", del)
	}
	if d := cmp.Diff(want, del.Events[0], protocmp.Transform()); d != "" {
		t.Fatalf("DELETE event (-want +got):\n%s", d)
	}
}

func TestDeregisterDeletesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	reg, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "e", "127.0.0.1:1"), TtlSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.rpc.WatchInstances(ctx, &registryv1.WatchInstancesRequest{ResumeRevision: reg.Revision})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: reg.InstanceId}); err != nil {
		t.Fatal(err)
	}
	// The TTL is 300 s: a DELETE before the test's 30 s deadline proves revocation.
	r := watchRecv(t, w)
	if len(r.Events) != 1 || r.Events[0].Type != registryv1.EventType_EVENT_TYPE_DELETE {
		t.Fatalf("want a DELETE, got %v", r)
	}
	_, err = e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: reg.InstanceId})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("second Deregister = %v, want NotFound", err)
	}
}

func TestWatchResumesWithoutLossOrDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	lease, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	register := func(i int) {
		t.Helper()
		if _, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", fmt.Sprintf("ep%d", i), "127.0.0.1:1"), LeaseId: lease.LeaseId}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := e.rpc.WatchInstances(wctx, &registryv1.WatchInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	last := watchRecv(t, w).Revision
	for i := range 5 {
		register(i)
		r := watchRecv(t, w)
		for _, ev := range r.Events {
			seen[ev.Instance.Endpoint]++
		}
		last = r.Revision
	}
	cancel() // the watch breaks mid-way
	for i := 5; i < 10; i++ {
		register(i)
	}
	w2, err := e.rpc.WatchInstances(ctx, &registryv1.WatchInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "ns"}, ResumeRevision: last})
	if err != nil {
		t.Fatal(err)
	}
	for len(seen) < 10 {
		r := watchRecv(t, w2)
		if r.Kind == registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT {
			t.Fatalf("resume sent a snapshot: %v", r)
		}
		for _, ev := range r.Events {
			seen[ev.Instance.Endpoint]++
		}
	}
	for ep, n := range seen {
		if n != 1 {
			t.Fatalf("%s seen %d times, want exactly once", ep, n)
		}
	}
}

func TestCompactedRevisionYieldsFreshSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	first, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "a", "127.0.0.1:1"), TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: first.InstanceId}); err != nil {
		t.Fatal(err)
	}
	second, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstance("ns", "c", "b", "127.0.0.1:2"), TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Compact(ctx, second.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	w, err := e.rpc.WatchInstances(ctx, &registryv1.WatchInstancesRequest{ResumeRevision: first.Revision})
	if err != nil {
		t.Fatal(err)
	}
	r := watchRecv(t, w)
	if r.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT || r.SnapshotReason != registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED {
		t.Fatalf("resume from a compacted revision gave %v, want a COMPACTED snapshot", r)
	}
	if len(r.Instances) != 1 || r.Instances[0].Endpoint != "b" {
		t.Fatalf("snapshot = %v, want only endpoint b", r.Instances)
	}
	// The watch carries on from the snapshot.
	if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: second.InstanceId}); err != nil {
		t.Fatal(err)
	}
	if r := watchRecv(t, w); len(r.Events) != 1 || r.Events[0].Type != registryv1.EventType_EVENT_TYPE_DELETE {
		t.Fatalf("after the snapshot got %v, want the DELETE of b", r)
	}
}

func TestModelCards(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	lease, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.rpc.WatchModels(ctx, &registryv1.WatchModelsRequest{Filter: &registryv1.ModelFilter{ModelName: "Qwen/Qwen3-0.6B"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT || len(r.Cards) != 0 {
		t.Fatalf("first watch message = %v, %v; want an empty snapshot", r, err)
	}
	card := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "Qwen/Qwen3-0.6B", BlockSize: 16, ContextLength: 40960,
		Tokenizer: []*registryv1.TokenizerArtifact{{Name: "tokenizer.json", Sha256: strings.Repeat("ab", 32), Size: 11, ObjectKey: "tokenizers/ab"}}}
	other := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate2", ModelName: "other", BlockSize: 32}
	for _, c := range []*registryv1.ModelCard{card, other} {
		if _, err := e.rpc.RegisterModel(ctx, &registryv1.RegisterModelRequest{Card: c, LeaseId: lease.LeaseId}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := e.rpc.ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{ModelName: "Qwen/Qwen3-0.6B"}})
	if err != nil {
		t.Fatal(err)
	}
	want := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: lease.LeaseId, ModelName: "Qwen/Qwen3-0.6B", BlockSize: 16, ContextLength: 40960, Tokenizer: card.Tokenizer}
	if d := cmp.Diff([]*registryv1.ModelCard{want}, list.Cards, protocmp.Transform()); d != "" {
		t.Fatalf("ListModels (-want +got):\n%s", d)
	}
	r, err := w.Recv()
	if err != nil || len(r.Events) != 1 || r.Events[0].Card.ModelName != "Qwen/Qwen3-0.6B" {
		t.Fatalf("watch = %v, %v; want the PUT of the Qwen card only", r, err)
	}
	if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: lease.LeaseId}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err = w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Events) > 0 {
			break
		}
	}
	if r.Events[0].Type != registryv1.EventType_EVENT_TYPE_DELETE || r.Events[0].Card.ModelName != "Qwen/Qwen3-0.6B" {
		t.Fatalf("after deregister got %v, want the DELETE of the card", r)
	}
}

func TestBuckets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	created, err := e.rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "routers"})
	if err != nil || !created.Created {
		t.Fatalf("CreateBucket = %v, %v", created, err)
	}
	again, err := e.rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "routers"})
	if err != nil || again.Created {
		t.Fatalf("second CreateBucket = %v, %v; want created=false", again, err)
	}
	w, err := e.rpc.WatchKeys(ctx, &registryv1.WatchKeysRequest{Bucket: "routers", Prefix: "r/"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT {
		t.Fatalf("first watch message = %v, %v", r, err)
	}

	put, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "routers", Key: "r/1", Value: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.rpc.GetKey(ctx, &registryv1.GetKeyRequest{Bucket: "routers", Key: "r/1"})
	if err != nil || string(got.Kv.Value) != "one" || got.Kv.ModRevision != put.Revision {
		t.Fatalf("GetKey = %v, %v", got, err)
	}
	if _, err := e.rpc.CreateKey(ctx, &registryv1.CreateKeyRequest{Bucket: "routers", Key: "r/1", Value: []byte("x")}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("CreateKey of an existing key = %v, want AlreadyExists", err)
	}
	stale := put.Revision - 1
	if _, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "routers", Key: "r/1", Value: []byte("two"), ExpectedRevision: &stale}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("PutKey at a stale revision = %v, want FailedPrecondition", err)
	}
	if _, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "routers", Key: "r/1", Value: []byte("two"), ExpectedRevision: &put.Revision}); err != nil {
		t.Fatalf("PutKey at the current revision: %v", err)
	}
	if _, err := e.rpc.CreateKey(ctx, &registryv1.CreateKeyRequest{Bucket: "routers", Key: "r/2", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.CreateKey(ctx, &registryv1.CreateKeyRequest{Bucket: "routers", Key: "other", Value: []byte("o")}); err != nil {
		t.Fatal(err)
	}
	list, err := e.rpc.ListKeys(ctx, &registryv1.ListKeysRequest{Bucket: "routers", Prefix: "r/"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range list.Kvs {
		keys = append(keys, kv.Key+"="+string(kv.Value))
	}
	if d := cmp.Diff([]string{"r/1=two", "r/2=2"}, keys); d != "" {
		t.Fatalf("ListKeys (-want +got):\n%s", d)
	}
	del, err := e.rpc.DeleteKey(ctx, &registryv1.DeleteKeyRequest{Bucket: "routers", Key: "r/2"})
	if err != nil || !del.Deleted {
		t.Fatalf("DeleteKey = %v, %v", del, err)
	}
	if _, err := e.rpc.GetKey(ctx, &registryv1.GetKeyRequest{Bucket: "routers", Key: "r/2"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetKey of a deleted key = %v, want NotFound", err)
	}
	var events []string
	for len(events) < 4 {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Events {
			events = append(events, ev.Type.String()+" "+ev.Kv.Key+" "+string(ev.Kv.Value))
		}
	}
	want := []string{"EVENT_TYPE_PUT r/1 one", "EVENT_TYPE_PUT r/1 two", "EVENT_TYPE_PUT r/2 2", "EVENT_TYPE_DELETE r/2 "}
	if d := cmp.Diff(want, events); d != "" {
		t.Fatalf("bucket watch events (-want +got):\n%s", d)
	}
}

func TestKeyTiedToLeaseGoesWithIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
	lease, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: "k", Value: []byte("v"), LeaseId: lease.LeaseId}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: lease.LeaseId}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rpc.GetKey(ctx, &registryv1.GetKeyRequest{Bucket: "b", Key: "k"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetKey after the lease ended = %v, want NotFound", err)
	}
	if _, err := e.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: "k", LeaseId: lease.LeaseId}); status.Code(err) != codes.NotFound {
		t.Fatalf("PutKey on a revoked lease = %v, want NotFound", err)
	}
}

func TestLocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	grant := func(ttl int64) uint64 {
		t.Helper()
		r, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return r.LeaseId
	}
	a, b := grant(60), grant(60)

	w1, err := e.rpc.AcquireWriteLock(ctx, &registryv1.AcquireWriteLockRequest{Name: "index", LeaseId: a})
	if err != nil || !w1.Acquired {
		t.Fatalf("first write lock = %v, %v", w1, err)
	}
	t.Run("writer excludes writers", func(t *testing.T) {
		w2, err := e.rpc.AcquireWriteLock(ctx, &registryv1.AcquireWriteLockRequest{Name: "index", LeaseId: b})
		if err != nil || w2.Acquired {
			t.Fatalf("second write lock = %v, %v; want acquired=false", w2, err)
		}
	})
	t.Run("writer excludes readers until timeout", func(t *testing.T) {
		_, err := e.rpc.AcquireReadLock(ctx, &registryv1.AcquireReadLockRequest{Name: "index", LeaseId: b, TimeoutMs: 300})
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "still held by a writer") {
			t.Fatalf("read lock under a writer = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("reader waits for the writer", func(t *testing.T) {
		got := make(chan error, 1)
		go func() {
			_, err := e.rpc.AcquireReadLock(ctx, &registryv1.AcquireReadLockRequest{Name: "index", LeaseId: b, TimeoutMs: 20000})
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("read lock returned %v while the writer holds it", err)
		case <-time.After(300 * time.Millisecond):
		}
		rel, err := e.rpc.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Token: w1.Token})
		if err != nil || !rel.Released {
			t.Fatalf("ReleaseLock = %v, %v", rel, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("read lock after release: %v", err)
		}
	})
	t.Run("readers share and exclude writers", func(t *testing.T) {
		r2, err := e.rpc.AcquireReadLock(ctx, &registryv1.AcquireReadLockRequest{Name: "index", LeaseId: a, TimeoutMs: 1000})
		if err != nil {
			t.Fatalf("second reader: %v", err)
		}
		w, err := e.rpc.AcquireWriteLock(ctx, &registryv1.AcquireWriteLockRequest{Name: "index", LeaseId: a})
		if err != nil || w.Acquired {
			t.Fatalf("write lock under readers = %v, %v; want acquired=false", w, err)
		}
		if _, err := e.rpc.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Token: r2.Token}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("crashed holder frees with its lease", func(t *testing.T) {
		// b still holds a read lock from the wait subtest; b "crashes".
		if _, err := e.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: b}); err != nil {
			t.Fatal(err)
		}
		crashed := grant(1)
		w, err := e.rpc.AcquireWriteLock(ctx, &registryv1.AcquireWriteLockRequest{Name: "index", LeaseId: crashed})
		if err != nil || !w.Acquired {
			t.Fatalf("write lock after the readers' lease ended = %v, %v", w, err)
		}
		// crashed never keeps its 1 s lease alive: a reader gets in once it expires.
		if _, err := e.rpc.AcquireReadLock(ctx, &registryv1.AcquireReadLockRequest{Name: "index", LeaseId: a, TimeoutMs: 10000}); err != nil {
			t.Fatalf("read lock after the writer's lease expired: %v", err)
		}
		rel, err := e.rpc.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Token: w.Token})
		if err != nil || rel.Released {
			t.Fatalf("releasing an expired hold = %v, %v; want released=false", rel, err)
		}
	})
}

func TestShutdownEndsWatchesWithUnavailable(t *testing.T) {
	t.Parallel()
	e, r := registrytest.Start(t)
	_ = e
	rpc := dialRPC(t, r.Addr)
	w, err := rpc.WatchInstances(ctxT(t), &registryv1.WatchInstancesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	watchRecv(t, w)
	r.Stop()
	for {
		_, err = w.Recv()
		if err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable || err == io.EOF {
		t.Fatalf("watch after shutdown = %v, want Unavailable", err)
	}
}

func TestMetadataIsStoredBesideTheSeedFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	in := tcpInstance("a", "b", "c", "h:1")
	in.Metadata = map[string]string{"dp_rank": "0"}
	resp, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in, TtlSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.kv.Get(ctx, fmt.Sprintf("/services/a/b/c/%x", resp.InstanceId))
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get: %v", err)
	}
	want := fmt.Sprintf(`{"namespace":"a","component":"b","endpoint":"c","instance_id":%d,"transport":{"tcp":"h:1"},"metadata":{"dp_rank":"0"}}`, resp.InstanceId)
	if string(got.Kvs[0].Value) != want {
		t.Fatalf("value\n got %s\nwant %s", got.Kvs[0].Value, want)
	}
}

// TestHealthAndDeadlinesWithoutEtcd: with etcd stopped, health says
// NOT_SERVING, and a call whose client set no deadline gets Unavailable
// within the store timeout instead of hanging; with etcd back, SERVING.
func TestHealthAndDeadlinesWithoutEtcd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	cc, err := grpc.NewClient(e.reg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: registryv1.RegistryService_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for check() != want {
			if ctx.Err() != nil {
				t.Fatalf("health never became %v", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	e.etcd.Stop()
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	// No client deadline: the registry's own bounds the call.
	_, err = e.rpc.ListInstances(context.Background(), &registryv1.ListInstancesRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("ListInstances without etcd = %v, want Unavailable", err)
	}
	e.etcd.Start()
	waitFor(healthpb.HealthCheckResponse_SERVING)
}

// TestRegistryStartsWithoutEtcd starts a registry while its etcd is down: it
// comes up (no exit), says NOT_SERVING from its first health answer, fails
// calls with Unavailable within its store timeout, and once etcd starts it
// says SERVING and registers.
func TestRegistryStartsWithoutEtcd(t *testing.T) {
	t.Parallel()
	etcd := registrytest.StartEtcd(t)
	etcd.Stop()
	ctx := ctxT(t)
	cfg := registry.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second},
		Backend: registry.BackendKVStore, EtcdEndpoints: strings.Join(etcd.Endpoints, ","),
		EtcdDialTimeout: 200 * time.Millisecond, StoreTimeout: time.Second}
	sctx, stop := context.WithCancel(context.Background())
	svc, err := registry.Start(sctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		stop()
		t.Fatalf("registry.Start without etcd = %v; want it to come up", err)
	}
	defer func() {
		stop()
		if err := svc.Wait(); err != nil {
			t.Errorf("registry stopped with %v", err)
		}
	}()
	cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// The first answer already tells the truth.
	hc := healthpb.NewHealthClient(cc)
	req := &healthpb.HealthCheckRequest{Service: registryv1.RegistryService_ServiceDesc.ServiceName}
	if r, err := hc.Check(ctx, req, grpc.WaitForReady(true)); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("first health check without etcd = %v, %v; want NOT_SERVING", r, err)
	}
	rpc := registryv1.NewRegistryServiceClient(cc)
	if _, err := rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("GrantLease without etcd = %v; want Unavailable", err)
	}
	etcd.Start()
	watch, err := hc.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := watch.Recv()
		if err != nil {
			t.Fatalf("health watch: %v; want SERVING once etcd is up", err)
		}
		if r.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	if _, err := rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{}); err != nil {
		t.Fatalf("GrantLease with etcd up = %v", err)
	}
}
