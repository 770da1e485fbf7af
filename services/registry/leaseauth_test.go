package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/testport"
)

// etcdBackend serves a Store on an embedded etcd and returns the registry's
// address and the etcd client, for reading what the store wrote.
func etcdBackend(t *testing.T) (string, *clientv3.Client) {
	t.Helper()
	st, cli := etcdStore(t)
	return serveBackendAddr(t, st), cli
}

// etcdStore is a Store on an embedded etcd, with the etcd client it uses;
// both end with the test.
func etcdStore(t *testing.T) (*Store, *clientv3.Client) {
	t.Helper()
	st, cli, _ := etcdStoreStop(t)
	return st, cli
}

// etcdStoreStop is etcdStore with a stop of its etcd, for a test that takes
// etcd away before its end; the test's cleanup stops it only if the test did
// not. Its ports are the test's for its whole life (testport.Shareable): a
// port freed when etcd stops could become another test's etcd, which the
// client, still dialling, would reach.
func etcdStoreStop(t *testing.T) (*Store, *clientv3.Client, func()) {
	t.Helper()
	e, err := StartEmbeddedEtcd(EmbeddedEtcdConfig{Dir: t.TempDir(), ClientURL: "http://" + testport.Shareable(t), PeerURL: "http://" + testport.Shareable(t), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(e.Close)
	t.Cleanup(stop)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	st := NewStore(cli, slog.New(slog.DiscardHandler))
	t.Cleanup(st.Close)
	return st, cli, stop
}

func withLeaseToken(ctx context.Context, tokens ...string) context.Context {
	for _, tok := range tokens {
		ctx = metadata.AppendToOutgoingContext(ctx, authtoken.LeaseTokenKey, tok)
	}
	return ctx
}

// keepAliveOnce opens a KeepAlive stream with tokens and refreshes lease once.
func keepAliveOnce(ctx context.Context, rpc registryv1.RegistryServiceClient, lease uint64, tokens ...string) (*registryv1.KeepAliveResponse, error) {
	ctx, cancel := context.WithCancel(withLeaseToken(ctx, tokens...))
	defer cancel()
	st, err := rpc.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&registryv1.KeepAliveRequest{LeaseId: lease}); err != nil {
		return nil, err
	}
	return st.Recv()
}

// TestLeaseOwnership: on both backends, only the holder of a lease's token
// may keep it alive, register on it, publish a model card on it or end it;
// anyone else, with no token or their own, is PermissionDenied and changes
// nothing.
func TestLeaseOwnership(t *testing.T) {
	t.Parallel()
	backends := []struct {
		name string
		// start serves a backend and returns its address, two pods for the
		// two workers' grants, and a dump of everything the backend stores.
		start func(t *testing.T) (addr string, a, b *registryv1.KubernetesPod, snapshot func() string)
	}{
		{name: "etcd", start: func(t *testing.T) (string, *registryv1.KubernetesPod, *registryv1.KubernetesPod, func() string) {
			addr, cli := etcdBackend(t)
			return addr, nil, nil, func() string {
				resp, err := cli.Get(context.Background(), "\x00", clientv3.WithFromKey())
				if err != nil {
					t.Fatal(err)
				}
				var b strings.Builder
				for _, kv := range resp.Kvs {
					fmt.Fprintf(&b, "%s=%s lease %x mod %d; ", kv.Key, kv.Value, kv.Lease, kv.ModRevision)
				}
				return b.String()
			}
		}},
		{name: "kubernetes", start: func(t *testing.T) (string, *registryv1.KubernetesPod, *registryv1.KubernetesPod, func() string) {
			f := newFakeKube(t, testPod("worker-a", "uid-a"), testPod("worker-b", "uid-b"))
			emulateApply(t, f)
			addr := serveBackendAddr(t, f.backend)
			return addr, &registryv1.KubernetesPod{Name: "worker-a", Namespace: kubeTestNS, Uid: "uid-a"},
				&registryv1.KubernetesPod{Name: "worker-b", Namespace: kubeTestNS, Uid: "uid-b"},
				func() string {
					list, err := f.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).List(context.Background(), metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					var b strings.Builder
					for _, u := range list.Items {
						j, _ := u.MarshalJSON()
						b.Write(j)
					}
					return b.String()
				}
		}},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			addr, podA, podB, snapshot := be.start(t)
			inClear := func(token string) bool { return strings.Contains(snapshot(), token) }
			rpc := dialBackend(t, addr) // sends no lease token by itself
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			a, err := rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 60, Pod: podA})
			if err != nil {
				t.Fatal(err)
			}
			b, err := rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 60, Pod: podB})
			if err != nil {
				t.Fatal(err)
			}
			if a.LeaseToken == "" || b.LeaseToken == "" || a.LeaseToken == b.LeaseToken {
				t.Fatalf("lease tokens %q and %q: want two different secrets", a.LeaseToken, b.LeaseToken)
			}
			in := &registryv1.Instance{Namespace: "ns", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "127.0.0.1:9000"}}
			if _, err := rpc.Register(withLeaseToken(ctx, a.LeaseToken), &registryv1.RegisterRequest{Instance: in, LeaseId: a.LeaseId}); err != nil {
				t.Fatalf("the owner's Register: %v", err)
			}
			card := &registryv1.ModelCard{Namespace: "ns", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 16}
			if _, err := rpc.RegisterModel(withLeaseToken(ctx, a.LeaseToken), &registryv1.RegisterModelRequest{Card: card, LeaseId: a.LeaseId}); err != nil {
				t.Fatalf("the owner's RegisterModel: %v", err)
			}

			before := snapshot()
			other := &registryv1.Instance{Namespace: "ns", Component: "backend", Endpoint: "other", Transport: in.Transport}
			strangers := []struct {
				name   string
				tokens []string
			}{
				{name: "no token"},
				{name: "another lease's token", tokens: []string{b.LeaseToken}},
				{name: "a guessed token", tokens: []string{"guess"}},
				{name: "the stored digest as token", tokens: []string{authtoken.DigestHex(a.LeaseToken)}},
			}
			for _, st := range strangers {
				t.Run(st.name, func(t *testing.T) {
					sctx := withLeaseToken(ctx, st.tokens...)
					calls := map[string]func() error{
						"Deregister": func() error {
							_, err := rpc.Deregister(sctx, &registryv1.DeregisterRequest{LeaseId: a.LeaseId})
							return err
						},
						"Register": func() error {
							_, err := rpc.Register(sctx, &registryv1.RegisterRequest{Instance: other, LeaseId: a.LeaseId})
							return err
						},
						"RegisterModel": func() error {
							c := &registryv1.ModelCard{Namespace: "ns", Component: "backend", Endpoint: "generate", ModelName: "junk", BlockSize: 1}
							_, err := rpc.RegisterModel(sctx, &registryv1.RegisterModelRequest{Card: c, LeaseId: a.LeaseId})
							return err
						},
						"KeepAlive": func() error {
							_, err := keepAliveOnce(ctx, rpc, a.LeaseId, st.tokens...)
							return err
						},
					}
					for name, call := range calls {
						if err := call(); status.Code(err) != codes.PermissionDenied {
							t.Errorf("%s on someone else's lease: %v, want PermissionDenied", name, err)
						}
					}
				})
			}
			// Nothing changed: the store holds what the owner wrote, byte
			// for byte.
			if after := snapshot(); after != before {
				t.Fatalf("the strangers changed the store:\nbefore %s\nafter  %s", before, after)
			}
			for _, tok := range []string{a.LeaseToken, b.LeaseToken} {
				if inClear(tok) {
					t.Fatal("a lease token is stored in clear")
				}
			}

			// The owner, on a stream that also carries another lease's token,
			// keeps its lease alive and ends it; afterwards its keep-alive says
			// the lease is gone rather than refusing.
			if r, err := keepAliveOnce(ctx, rpc, a.LeaseId, b.LeaseToken, a.LeaseToken); err != nil || !r.Found {
				t.Fatalf("the owner's KeepAlive: %v %v", r, err)
			}
			if _, err := rpc.Deregister(withLeaseToken(ctx, a.LeaseToken), &registryv1.DeregisterRequest{LeaseId: a.LeaseId}); err != nil {
				t.Fatalf("the owner's Deregister: %v", err)
			}
			if be.name == "etcd" {
				if r, err := keepAliveOnce(ctx, rpc, a.LeaseId, a.LeaseToken); err != nil || r.Found {
					t.Fatalf("KeepAlive of the ended lease: %v %v, want found = false", r, err)
				}
			}

			// A registration without a lease grants one and returns its token.
			r, err := rpc.Register(ctx, &registryv1.RegisterRequest{Instance: other, TtlSeconds: 60, Pod: podB})
			if err != nil {
				t.Fatal(err)
			}
			if r.LeaseToken == "" {
				t.Fatal("Register without a lease returned no lease token")
			}
			if _, err := rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: r.InstanceId}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("Deregister without the new token: %v", err)
			}
			if _, err := rpc.Deregister(withLeaseToken(ctx, r.LeaseToken), &registryv1.DeregisterRequest{LeaseId: r.InstanceId}); err != nil {
				t.Fatalf("Deregister with the token Register returned: %v", err)
			}
		})
	}
}

// emulateApply makes the fake dynamic client answer server-side apply
// patches, which its tracker does not: an absent object is created from the
// patch, a present one gets the patch deep-merged (lists gain the items
// they lack). It is enough for one worker's claim and entries.
func emulateApply(t *testing.T, f *fakeKube) {
	t.Helper()
	tracker := f.dyn.Tracker()
	f.dyn.PrependReactor("patch", kubeResource, func(action k8stesting.Action) (bool, runtime.Object, error) {
		pa, ok := action.(k8stesting.PatchAction)
		if !ok || pa.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		var patch map[string]any
		if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		gvr, ns, name := pa.GetResource(), pa.GetNamespace(), pa.GetName()
		cur, err := tracker.Get(gvr, ns, name)
		if apierrors.IsNotFound(err) {
			u := &unstructured.Unstructured{Object: patch}
			u.SetResourceVersion("")
			return true, u, tracker.Create(gvr, u, ns)
		}
		if err != nil {
			return true, nil, err
		}
		u := cur.(*unstructured.Unstructured).DeepCopy()
		if meta, ok := patch["metadata"].(map[string]any); ok {
			for k, v := range meta {
				if k == "annotations" || k == "labels" {
					u.Object["metadata"].(map[string]any)[k] = v
				}
			}
		}
		delete(patch, "metadata")
		mergeInto(u.Object, patch)
		return true, u, tracker.Update(gvr, u, ns)
	})
}

func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		switch sv := v.(type) {
		case map[string]any:
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			mergeInto(dm, sv)
		case []any:
			dl, _ := dst[k].([]any)
			dst[k] = append(dl, sv...)
		default:
			dst[k] = v
		}
	}
}

// countingBackend counts the token reads a server makes of its Backend.
type countingBackend struct {
	Backend
	mu    sync.Mutex
	reads int
}

func (c *countingBackend) LeaseTokenDigest(ctx context.Context, lease uint64) (string, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Backend.LeaseTokenDigest(ctx, lease)
}

func (c *countingBackend) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// TestLeaseTokenCheckedWithoutStoreRead: the replica that granted a lease,
// or checked its token once, checks it again without reading the store, so
// that a worker's refresh on a KeepAlive stream it opens again (after an
// attempt that timed out) costs one etcd round trip, not two. Beside other
// tests each such token read took about a second, and the first refresh of a
// 2 s lease (sent after 1 s) timed out at the lease's deadline: etcd expired
// the lease of every worker (TestEtcdOutage, model cards gone). A wrong
// token is still refused, and a lease that ended is read (and found gone)
// again.
func TestLeaseTokenCheckedWithoutStoreRead(t *testing.T) {
	t.Parallel()
	st, _ := etcdStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	granting, other := &countingBackend{Backend: st}, &countingBackend{Backend: st}
	a, b := &server{store: granting}, &server{store: other} // two replicas
	resp, err := a.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 10})
	if err != nil {
		t.Fatal(err)
	}
	lease := resp.GetLeaseId()
	asCaller := func(tokens ...string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs(authtoken.LeaseTokenKey, strings.Join(tokens, "")))
	}
	for _, tc := range []struct {
		name      string
		s         *server
		c         *countingBackend
		token     string
		wantCode  codes.Code
		wantReads int
	}{
		{"granting replica", a, granting, resp.GetLeaseToken(), codes.OK, 0},
		{"granting replica, again", a, granting, resp.GetLeaseToken(), codes.OK, 0},
		{"granting replica, wrong token", a, granting, "wrong", codes.PermissionDenied, 0},
		{"other replica, first check", b, other, resp.GetLeaseToken(), codes.OK, 1},
		{"other replica, again", b, other, resp.GetLeaseToken(), codes.OK, 1},
		{"other replica, wrong token", b, other, "wrong", codes.PermissionDenied, 1},
	} {
		err := tc.s.checkLease(asCaller(tc.token), lease)
		if status.Code(err) != tc.wantCode {
			t.Errorf("%s: checkLease = %v, want %v", tc.name, err, tc.wantCode)
		}
		if got := tc.c.count(); got != tc.wantReads {
			t.Errorf("%s: %d token reads of the store so far, want %d", tc.name, got, tc.wantReads)
		}
	}
	if _, err := a.Deregister(asCaller(resp.GetLeaseToken()), &registryv1.DeregisterRequest{LeaseId: lease}); err != nil {
		t.Fatal(err)
	}
	if err := a.checkLease(asCaller(resp.GetLeaseToken()), lease); !errors.Is(err, ErrNotFound) || granting.count() != 1 {
		t.Errorf("after the lease ended: checkLease = %v with %d store reads, want not found from one read", err, granting.count())
	}
}
