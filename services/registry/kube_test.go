package registry

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest/leasekeep"
)

const kubeTestNS = "dynamo"

func kubeCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeKube is a KubeBackend on client-go fakes, served over gRPC. The fakes
// ignore label selectors and do not implement server-side apply, so these
// tests write the worker resources directly, as the registry's applies would
// leave them; envtest_test.go covers the applies and selectors against a
// real API server.
type fakeKube struct {
	backend *KubeBackend
	dyn     *dynamicfake.FakeDynamicClient
	kube    *kubefake.Clientset
	rpc     registryv1.RegistryServiceClient
}

func newFakeKube(t *testing.T, objs ...runtime.Object) *fakeKube {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{WorkerMetadataGVR: kubeKind + "List"})
	kube := kubefake.NewClientset(objs...)
	b, err := NewKubeBackend(kubeCtx(t), dyn, kube, KubeOptions{Namespace: kubeTestNS, Debounce: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return &fakeKube{backend: b, dyn: dyn, kube: kube, rpc: serveBackend(t, b)}
}

// serveBackend serves b over gRPC on a loopback port until the test ends.
func serveBackend(t *testing.T, b Backend) registryv1.RegistryServiceClient {
	t.Helper()
	return dialBackend(t, serveBackendAddr(t, b), leasekeep.New().DialOptions()...)
}

// dialBackend dials a served backend with opts (none: a raw client that
// sends no lease token by itself).
func dialBackend(t *testing.T, addr string, opts ...grpc.DialOption) registryv1.RegistryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return registryv1.NewRegistryServiceClient(cc)
}

// serveBackendAddr serves b's registry API until the test ends.
func serveBackendAddr(t *testing.T, b Backend) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	stopping := make(chan struct{})
	registryv1.RegisterRegistryServiceServer(gs, &server{store: b, log: slog.New(slog.DiscardHandler), metrics: newMetrics(prometheus.NewRegistry()), stopping: stopping})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		close(stopping)
		gs.Stop()
		<-served
	})
	return lis.Addr().String()
}

func testPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubeTestNS, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "switchyard/mocker"}}},
	}
}

// workerResource is a DynamoWorkerMetadata as GrantLease and Register leave
// it for a pod.
func workerResource(pod, uid string, eps ...endpointEntry) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(kubeGroup + "/" + kubeVersion)
	u.SetKind(kubeKind)
	u.SetName(pod)
	u.SetNamespace(kubeTestNS)
	id := kubeInstanceID(uid)
	u.SetLabels(map[string]string{labelManagedBy: kubeFieldManager, labelInstanceID: idLabel(id)})
	spec := map[string]any{"podName": pod, "podUID": uid, "instanceID": idLabel(id), "ttlSeconds": int64(15)}
	var items []any
	for _, e := range eps {
		v, err := toUnstructuredValue(e)
		if err != nil {
			panic(err)
		}
		items = append(items, v)
	}
	if items != nil {
		spec["endpoints"] = items
	}
	u.Object["spec"] = spec
	return u
}

func tcpEntry(ep, addr string) endpointEntry {
	return endpointEntry{Namespace: "vllm-agg", Component: "backend", Endpoint: ep, Transport: transportEntry{"tcp": addr}}
}

// endpointSlice lists pods (name -> uid) with one ready condition.
func endpointSlice(name string, ready bool, lbls map[string]string, pods map[string]string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: kubeTestNS, Labels: lbls},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	i := 0
	for pod, uid := range pods {
		i++
		r := ready
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{"10.0.0." + string(rune('0'+i))},
			Conditions: discoveryv1.EndpointConditions{Ready: &r},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: kubeTestNS, Name: pod, UID: types.UID(uid)},
		})
	}
	return s
}

func (f *fakeKube) createResource(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := f.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).Create(kubeCtx(t), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func applySlice(t *testing.T, kube kubernetes.Interface, s *discoveryv1.EndpointSlice) {
	t.Helper()
	c := kube.DiscoveryV1().EndpointSlices(s.Namespace)
	if _, err := c.Get(kubeCtx(t), s.Name, metav1.GetOptions{}); err == nil {
		if _, err := c.Update(kubeCtx(t), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := c.Create(kubeCtx(t), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// instanceStream follows a WatchInstances stream into a map keyed like the
// etcd layout, and records every event it applied.
type instanceStream struct {
	stream registryv1.RegistryService_WatchInstancesClient
	items  map[string]*registryv1.Instance
	rev    int64
	events []*registryv1.InstanceEvent
	first  *registryv1.WatchInstancesResponse
}

func watchInstancesOf(t *testing.T, rpc registryv1.RegistryServiceClient, req *registryv1.WatchInstancesRequest) *instanceStream {
	t.Helper()
	s, err := rpc.WatchInstances(kubeCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	w := &instanceStream{stream: s, items: map[string]*registryv1.Instance{}}
	if req.ResumeRevision == 0 {
		w.next(t)
	}
	return w
}

func (w *instanceStream) next(t *testing.T) {
	t.Helper()
	r, err := w.stream.Recv()
	if err != nil {
		t.Fatalf("watch ended: %v", err)
	}
	if w.first == nil {
		w.first = r
	}
	if r.Revision < w.rev {
		t.Fatalf("revision went back from %d to %d", w.rev, r.Revision)
	}
	w.rev = r.Revision
	switch r.Kind {
	case registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT:
		w.items = map[string]*registryv1.Instance{}
		for _, in := range r.Instances {
			w.items[instanceKey(in.Namespace, in.Component, in.Endpoint, in.InstanceId)] = in
		}
	case registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS:
		for _, e := range r.Events {
			w.events = append(w.events, e)
			k := instanceKey(e.Instance.Namespace, e.Instance.Component, e.Instance.Endpoint, e.Instance.InstanceId)
			if e.Type == registryv1.EventType_EVENT_TYPE_DELETE {
				delete(w.items, k)
			} else {
				w.items[k] = e.Instance
			}
		}
	}
}

// until reads the stream until the followed set has exactly the keys want
// (the test's context bounds the wait).
func (w *instanceStream) until(t *testing.T, want ...string) {
	t.Helper()
	for {
		got := make([]string, 0, len(w.items))
		for k := range w.items {
			got = append(got, k)
		}
		if cmp.Diff(want, got, cmpSorted) == "" {
			return
		}
		w.next(t)
	}
}

var cmpSorted = cmp.Transformer("sorted", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func TestKubeInstanceID(t *testing.T) {
	t.Parallel()
	uids := []string{"", "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a10", "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a11", strings.Repeat("f", 36)}
	seen := map[uint64]string{}
	for _, uid := range uids {
		id := kubeInstanceID(uid)
		if id == 0 || id > 1<<63-1 {
			t.Errorf("kubeInstanceID(%q) = %x, want 1..2^63-1", uid, id)
		}
		if id != kubeInstanceID(uid) {
			t.Errorf("kubeInstanceID(%q) is not stable", uid)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("uids %q and %q share id %x", uid, other, id)
		}
		seen[id] = uid
		if err := validLease("lease_id", id); err != nil {
			t.Errorf("id %x is not a valid lease id: %v", id, err)
		}
	}
}

func TestKubeJoinAndDiff(t *testing.T) {
	t.Parallel()
	const uidA, uidB = "uid-a", "uid-b"
	idA := kubeInstanceID(uidA)
	keyA := instanceKey("vllm-agg", "backend", "generate", idA)
	ready := func(uids ...string) readyPods {
		r := readyPods{uids: map[string]bool{}, names: map[string]bool{}}
		for _, u := range uids {
			r.uids[u] = true
		}
		return r
	}
	tests := []struct {
		name      string
		old       []*unstructured.Unstructured
		oldReady  readyPods
		cur       []*unstructured.Unstructured
		curReady  readyPods
		wantTypes []registryv1.EventType
	}{
		{"not ready is invisible", nil, ready(), []*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("generate", "10.0.0.1:9000"))}, ready(), nil},
		{"ready is a PUT", nil, ready(), []*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("generate", "10.0.0.1:9000"))}, ready(uidA),
			[]registryv1.EventType{registryv1.EventType_EVENT_TYPE_PUT}},
		{"not ready any more is a DELETE", []*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("generate", "10.0.0.1:9000"))}, ready(uidA),
			[]*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("generate", "10.0.0.1:9000"))}, ready(uidB),
			[]registryv1.EventType{registryv1.EventType_EVENT_TYPE_DELETE}},
		{"new address is a DELETE then a PUT", []*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("generate", "10.0.0.1:9000"))}, ready(uidA),
			[]*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("generate", "10.0.0.1:9001"))}, ready(uidA),
			[]registryv1.EventType{registryv1.EventType_EVENT_TYPE_DELETE, registryv1.EventType_EVENT_TYPE_PUT}},
		{"invalid entry is skipped", nil, ready(), []*unstructured.Unstructured{workerResource("a", uidA, tcpEntry("Not-Valid", "10.0.0.1:9000"))}, ready(uidA), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, cur := join(tt.old, tt.oldReady), join(tt.cur, tt.curReady)
			evs := diffInstances(old.instances, cur.instances, 7)
			var got []registryv1.EventType
			for _, e := range evs {
				got = append(got, e.Type)
				if e.Revision != 7 || e.Instance.InstanceId != idA {
					t.Errorf("event %v: want revision 7 and instance %x", e, idA)
				}
				if instanceKey(e.Instance.Namespace, e.Instance.Component, e.Instance.Endpoint, e.Instance.InstanceId) != keyA {
					t.Errorf("event %v is not for %s", e, keyA)
				}
			}
			if diff := cmp.Diff(tt.wantTypes, got); diff != "" {
				t.Fatalf("event types (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKubeFeedResume(t *testing.T) {
	t.Parallel()
	f := newKubeFeed()
	st := func(addrs ...string) joinState {
		s := joinState{instances: map[string]*registryv1.Instance{}, models: map[string]*registryv1.ModelCard{}}
		for i, a := range addrs {
			in, err := tcpEntry("generate", a).instance(uint64(i + 1))
			if err != nil {
				t.Fatal(err)
			}
			s.instances[instanceKey(in.Namespace, in.Component, in.Endpoint, in.InstanceId)] = in
		}
		return s
	}
	f.publish(st("10.0.0.1:1"))
	r1 := f.revision()
	f.publish(st("10.0.0.1:1")) // no change: no new revision
	if f.revision() != r1 {
		t.Fatalf("an unchanged state moved the revision from %d to %d", r1, f.revision())
	}
	f.publish(st("10.0.0.1:1", "10.0.0.2:1"))
	r2 := f.revision()
	tests := []struct {
		name    string
		from    int64
		ok      bool
		batches int
	}{
		{"current", r2, true, 0},
		{"one behind", r1, true, 1},
		{"the start", f.base, true, 2},
		{"before this process", f.base - 1, false, 0},
		{"from the future or another replica", r2 + 1, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			b, ok := f.since(tt.from)
			f.mu.Unlock()
			if ok != tt.ok || len(b) != tt.batches {
				t.Fatalf("since(%d) = %d batches, %v; want %d, %v", tt.from, len(b), ok, tt.batches, tt.ok)
			}
		})
	}
}

func TestKubeWatchFollowsResourcesAndReadiness(t *testing.T) {
	t.Parallel()
	const uid = "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a10"
	f := newFakeKube(t, testPod("worker-0", uid))
	ctx := kubeCtx(t)
	w := watchInstancesOf(t, f.rpc, &registryv1.WatchInstancesRequest{})
	if w.first.SnapshotReason != registryv1.SnapshotReason_SNAPSHOT_REASON_INITIAL || len(w.items) != 0 {
		t.Fatalf("first response = %v, want an empty INITIAL snapshot", w.first)
	}
	f.createResource(t, workerResource("worker-0", uid, tcpEntry("generate", "10.0.0.1:9000"), tcpEntry("prefill", "10.0.0.1:9001")))
	id := kubeInstanceID(uid)
	gen, pre := instanceKey("vllm-agg", "backend", "generate", id), instanceKey("vllm-agg", "backend", "prefill", id)

	steps := []struct {
		name  string
		do    func(t *testing.T)
		want  []string
		final registryv1.EventType
	}{
		{"ready slice shows both endpoints", func(t *testing.T) {
			applySlice(t, f.kube, endpointSlice("backend-abc", true, nil, map[string]string{"worker-0": uid}))
		}, []string{gen, pre}, registryv1.EventType_EVENT_TYPE_PUT},
		{"not ready hides them", func(t *testing.T) {
			applySlice(t, f.kube, endpointSlice("backend-abc", false, nil, map[string]string{"worker-0": uid}))
		}, nil, registryv1.EventType_EVENT_TYPE_DELETE},
		{"ready again shows them", func(t *testing.T) {
			applySlice(t, f.kube, endpointSlice("backend-abc", true, nil, map[string]string{"worker-0": uid}))
		}, []string{gen, pre}, registryv1.EventType_EVENT_TYPE_PUT},
		{"deleting the resource deletes them", func(t *testing.T) {
			if err := f.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).Delete(ctx, "worker-0", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, nil, registryv1.EventType_EVENT_TYPE_DELETE},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do(t)
			w.until(t, st.want...)
			if last := w.events[len(w.events)-1]; last.Type != st.final {
				t.Fatalf("last event %v, want %v", last, st.final)
			}
		})
	}
	list, err := f.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{})
	if err != nil || len(list.Instances) != 0 || list.Revision != w.rev {
		t.Fatalf("ListInstances = %v, %v; want none at the watch's revision %d", list, err, w.rev)
	}
}

func TestKubeWatchResume(t *testing.T) {
	t.Parallel()
	const uid = "uid-resume"
	f := newFakeKube(t, testPod("worker-0", uid))
	applySlice(t, f.kube, endpointSlice("backend", true, nil, map[string]string{"worker-0": uid}))
	w := watchInstancesOf(t, f.rpc, &registryv1.WatchInstancesRequest{})
	f.createResource(t, workerResource("worker-0", uid, tcpEntry("generate", "10.0.0.1:9000")))
	key := instanceKey("vllm-agg", "backend", "generate", kubeInstanceID(uid))
	w.until(t, key)
	seen := w.rev

	tests := []struct {
		name       string
		resume     int64
		wantKind   registryv1.WatchResponseKind
		wantReason registryv1.SnapshotReason
	}{
		{"revision of an earlier process", f.backend.feed.base - 1, registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT, registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED},
		{"revision this process never issued", seen + 1000, registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT, registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED},
		{"revision before the registration", seen - 1, registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS, registryv1.SnapshotReason_SNAPSHOT_REASON_UNSPECIFIED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := watchInstancesOf(t, f.rpc, &registryv1.WatchInstancesRequest{ResumeRevision: tt.resume})
			r.next(t)
			if r.first.Kind != tt.wantKind || r.first.SnapshotReason != tt.wantReason {
				t.Fatalf("resume from %d: first response %v, want %v %v", tt.resume, r.first, tt.wantKind, tt.wantReason)
			}
			if _, ok := r.items[key]; !ok || r.rev != seen {
				t.Fatalf("resume from %d: state %v at %d, want %s at %d", tt.resume, r.items, r.rev, key, seen)
			}
		})
	}
}

func TestKubeLeaseFollowsTheResource(t *testing.T) {
	t.Parallel()
	const uid = "uid-lease"
	f := newFakeKube(t, testPod("worker-0", uid))
	const token = "the-worker's-token"
	ctx := metadata.AppendToOutgoingContext(kubeCtx(t), authtoken.LeaseTokenKey, token)
	res := workerResource("worker-0", uid)
	res.SetAnnotations(map[string]string{annotationLeaseToken: authtoken.DigestHex(token)})
	f.createResource(t, res)
	id := kubeInstanceID(uid)

	ka, err := f.rpc.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.CloseSend()
	keepAlive := func() *registryv1.KeepAliveResponse {
		t.Helper()
		if err := ka.Send(&registryv1.KeepAliveRequest{LeaseId: id}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := keepAlive(); !r.Found || r.TtlSeconds != 15 {
		t.Fatalf("keep-alive of a live resource = %v, want found with its 15 s TTL", r)
	}
	if _, err := f.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).Get(ctx, "worker-0", metav1.GetOptions{}); err == nil {
		t.Fatal("Deregister left the resource")
	}
	if r := keepAlive(); r.Found {
		t.Fatalf("keep-alive after Deregister = %v, want not found", r)
	}
	if _, err := f.rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("second Deregister = %v, want NotFound", err)
	}
}

func TestKubeRejectsBadLeaseRequests(t *testing.T) {
	t.Parallel()
	const uid = "uid-real"
	f := newFakeKube(t, testPod("worker-0", uid))
	ctx := kubeCtx(t)
	in := &registryv1.Instance{Namespace: "ns", Component: "c", Endpoint: "e", Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"grant without a pod", func() error {
			_, err := f.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{})
			return err
		}, codes.InvalidArgument, "POD_NAME, POD_NAMESPACE and POD_UID"},
		{"register without a pod or lease", func() error {
			_, err := f.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in})
			return err
		}, codes.InvalidArgument, "POD_NAME, POD_NAMESPACE and POD_UID"},
		{"pod in another namespace", func() error {
			_, err := f.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{Pod: &registryv1.KubernetesPod{Name: "worker-0", Namespace: "other", Uid: uid}})
			return err
		}, codes.InvalidArgument, `not the registry's namespace "dynamo"`},
		{"unknown pod", func() error {
			_, err := f.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{Pod: &registryv1.KubernetesPod{Name: "worker-9", Namespace: kubeTestNS, Uid: uid}})
			return err
		}, codes.NotFound, "worker-9"},
		{"pod with another uid", func() error {
			_, err := f.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{Pod: &registryv1.KubernetesPod{Name: "worker-0", Namespace: kubeTestNS, Uid: "uid-old"}})
			return err
		}, codes.NotFound, "not uid-old"},
		{"register on an unknown lease", func() error {
			_, err := f.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in, LeaseId: 42})
			return err
		}, codes.NotFound, "lease 2a"},
		{"model on an unknown lease", func() error {
			_, err := f.rpc.RegisterModel(ctx, &registryv1.RegisterModelRequest{LeaseId: 42, Card: &registryv1.ModelCard{Namespace: "ns", Component: "c", Endpoint: "e", ModelName: "m", BlockSize: 16, ContextLength: 4096}})
			return err
		}, codes.NotFound, "lease 2a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tt.code, tt.msg)
			}
		})
	}
}

func TestKubeBucketsAndLocksAreUnimplemented(t *testing.T) {
	t.Parallel()
	f := newFakeKube(t)
	ctx := kubeCtx(t)
	tests := []struct {
		name string
		call func() error
	}{
		{"CreateBucket", func() error {
			_, err := f.rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "b"})
			return err
		}},
		{"GetKey", func() error {
			_, err := f.rpc.GetKey(ctx, &registryv1.GetKeyRequest{Bucket: "b", Key: "k"})
			return err
		}},
		{"PutKey", func() error {
			_, err := f.rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: "k"})
			return err
		}},
		{"CreateKey", func() error {
			_, err := f.rpc.CreateKey(ctx, &registryv1.CreateKeyRequest{Bucket: "b", Key: "k"})
			return err
		}},
		{"DeleteKey", func() error {
			_, err := f.rpc.DeleteKey(ctx, &registryv1.DeleteKeyRequest{Bucket: "b", Key: "k"})
			return err
		}},
		{"ListKeys", func() error { _, err := f.rpc.ListKeys(ctx, &registryv1.ListKeysRequest{Bucket: "b"}); return err }},
		{"WatchKeys", func() error {
			s, err := f.rpc.WatchKeys(ctx, &registryv1.WatchKeysRequest{Bucket: "b"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}},
		{"AcquireWriteLock", func() error {
			_, err := f.rpc.AcquireWriteLock(ctx, &registryv1.AcquireWriteLockRequest{Name: "l", LeaseId: 1})
			return err
		}},
		{"AcquireReadLock", func() error {
			_, err := f.rpc.AcquireReadLock(ctx, &registryv1.AcquireReadLockRequest{Name: "l", LeaseId: 1})
			return err
		}},
		{"ReleaseLock", func() error {
			_, err := f.rpc.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Token: "l/writer/0123456789abcdef"})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "not available on the kubernetes discovery backend") {
				t.Fatalf("got %v, want Unimplemented naming the kubernetes backend", err)
			}
		})
	}
}

func TestKubeModelCardsFollowReadiness(t *testing.T) {
	t.Parallel()
	const uid = "uid-model"
	f := newFakeKube(t, testPod("worker-0", uid))
	ctx := kubeCtx(t)
	u := workerResource("worker-0", uid, tcpEntry("generate", "10.0.0.1:9000"))
	card := modelEntry{Namespace: "vllm-agg", Component: "backend", Endpoint: "generate", ModelName: "Qwen/Qwen3-0.6B", BlockSize: 16, ContextLength: 4096}
	v, err := toUnstructuredValue(card)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"].(map[string]any)["models"] = []any{v}
	f.createResource(t, u)
	s, err := f.rpc.WatchModels(ctx, &registryv1.WatchModelsRequest{Filter: &registryv1.ModelFilter{ModelName: "Qwen/Qwen3-0.6B"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil || r.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT || len(r.Cards) != 0 {
		t.Fatalf("first = %v, %v; want an empty snapshot (the pod is not ready)", r, err)
	}
	applySlice(t, f.kube, endpointSlice("backend", true, nil, map[string]string{"worker-0": uid}))
	for {
		r, err = s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Events) > 0 {
			break
		}
	}
	want := &registryv1.ModelEvent{Type: registryv1.EventType_EVENT_TYPE_PUT, Revision: r.Revision, Card: card.card(kubeInstanceID(uid))}
	if diff := cmp.Diff([]*registryv1.ModelEvent{want}, r.Events, protocmp.Transform()); diff != "" {
		t.Fatalf("model events (-want +got):\n%s", diff)
	}
}
