package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest/leasekeep"
)

// envtestSelector is the EndpointSlice selector the registry under test
// runs with; slices without the label must not count.
const envtestSelector = "switchyard.dev/discovery=enabled"

var discoveryLabel = map[string]string{"switchyard.dev/discovery": "enabled"}

// kubeEnv is a real kube-apiserver and etcd (envtest) with the CRD
// installed, and a registry on the kubernetes backend in front of them.
type kubeEnv struct {
	cfg  *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
	rpc  registryv1.RegistryServiceClient
	addr string
}

// startKubeEnv starts envtest, or skips: the suite needs the binaries that
// hack/envtest-binaries.sh builds, named by KUBEBUILDER_ASSETS.
func startKubeEnv(t *testing.T) *kubeEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a kube-apiserver and etcd (envtest); runs without -short")
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); assets == "" || err != nil {
			msg := fmt.Sprintf("KUBEBUILDER_ASSETS=%q has no %s: run export KUBEBUILDER_ASSETS=\"$(hack/envtest-binaries.sh)\" first", assets, bin)
			if os.Getenv("SWITCHYARD_REQUIRE_ENVTEST") == "1" {
				t.Fatal(msg + " (SWITCHYARD_REQUIRE_ENVTEST=1 forbids skipping)")
			}
			t.Skip(msg)
		}
	}
	env := &envtest.Environment{
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "..", "deploy", "kubernetes", "crd.yaml")}},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	// A machine whose only interface is loopback has no default route for
	// the API server to advertise ("no default routes found"); the endpoint
	// reconciler of the kubernetes Service refuses a loopback address, and
	// nothing here needs that Service's endpoints.
	env.ControlPlane.GetAPIServer().Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	e := &kubeEnv{cfg: cfg}
	if e.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx := kubeCtx(t)
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeTestNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.addr, e.rpc = startKubeRegistry(t, Config{
		Backend:                   BackendKubernetes,
		KubeRESTConfig:            cfg,
		KubeNamespace:             kubeTestNS,
		KubeEndpointSliceSelector: envtestSelector,
		KubeDebounce:              20 * time.Millisecond,
	})
	return e
}

// startKubeRegistry runs a registry with cfg (on a loopback port) until the
// test ends, and dials it.
func startKubeRegistry(t *testing.T, cfg Config) (string, registryv1.RegistryServiceClient) {
	t.Helper()
	cfg.Server = grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("registry stopped with %v", err)
		}
	})
	addr := svc.Addr().String()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, leasekeep.New().DialOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return addr, registryv1.NewRegistryServiceClient(cc)
}

func (e *kubeEnv) createPod(t *testing.T, name string) *registryv1.KubernetesPod {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(kubeTestNS).Create(kubeCtx(t), testPod(name, ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &registryv1.KubernetesPod{Name: p.Name, Namespace: p.Namespace, Uid: string(p.UID)}
}

func (e *kubeEnv) resource(t *testing.T, name string) (*unstructured.Unstructured, error) {
	t.Helper()
	return e.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).Get(kubeCtx(t), name, metav1.GetOptions{})
}

func (e *kubeEnv) slice(t *testing.T, name string, ready bool, lbls map[string]string, pods ...*registryv1.KubernetesPod) {
	t.Helper()
	m := map[string]string{}
	for _, p := range pods {
		m[p.Name] = p.Uid
	}
	applySlice(t, e.kube, endpointSlice(name, ready, lbls, m))
}

func tcpInstanceOf(ep, addr string) *registryv1.Instance {
	return &registryv1.Instance{Namespace: "vllm-agg", Component: "backend", Endpoint: ep, Transport: &commonv1.Transport{Tcp: addr}}
}

// TestKubernetesEnvtest runs the kubernetes backend against a real API
// server: server-side apply, owner references, label selectors and watch
// semantics that the client-go fakes do not have. The subtests share one
// API server and run in order.
func TestKubernetesEnvtest(t *testing.T) {
	e := startKubeEnv(t)
	ctx := kubeCtx(t)
	w1 := e.createPod(t, "worker-1")
	id1 := kubeInstanceID(w1.Uid)
	gen1, pre1 := instanceKey("vllm-agg", "backend", "generate", id1), instanceKey("vllm-agg", "backend", "prefill", id1)

	t.Run("register applies a resource owned by the pod", func(t *testing.T) {
		r, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("generate", "10.0.0.1:9000"), TtlSeconds: 20, Pod: w1})
		if err != nil {
			t.Fatal(err)
		}
		if r.InstanceId != id1 || r.TtlSeconds != 20 {
			t.Fatalf("Register = %v, want instance %x with TTL 20", r, id1)
		}
		if _, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("prefill", "10.0.0.1:9001"), LeaseId: id1}); err != nil {
			t.Fatal(err)
		}
		_, err = e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("generate", "10.0.0.1:9002"), LeaseId: id1})
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("duplicate Register = %v, want AlreadyExists", err)
		}
		card := &registryv1.ModelCard{Namespace: "vllm-agg", Component: "backend", Endpoint: "generate", ModelName: "Qwen/Qwen3-0.6B", BlockSize: 16, ContextLength: 4096}
		if _, err := e.rpc.RegisterModel(ctx, &registryv1.RegisterModelRequest{Card: card, LeaseId: id1}); err != nil {
			t.Fatal(err)
		}

		u, err := e.resource(t, "worker-1")
		if err != nil {
			t.Fatal(err)
		}
		refs := u.GetOwnerReferences()
		if len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].APIVersion != "v1" || refs[0].Name != "worker-1" || string(refs[0].UID) != w1.Uid {
			t.Fatalf("owner references = %+v, want the pod worker-1 (%s)", refs, w1.Uid)
		}
		if got := u.GetLabels()[labelInstanceID]; got != idLabel(id1) {
			t.Fatalf("instance id label = %q, want %q", got, idLabel(id1))
		}
		spec, err := specOf(u)
		if err != nil {
			t.Fatal(err)
		}
		if spec.PodUID != w1.Uid || spec.TTLSeconds != 20 || len(spec.Endpoints) != 2 || len(spec.Models) != 1 {
			t.Fatalf("spec = %+v, want two endpoints and one model of pod %s", spec, w1.Uid)
		}
		if spec.Endpoints[0].Transport["tcp"] != "10.0.0.1:9000" {
			t.Fatalf("the duplicate overwrote the first registration: %+v", spec.Endpoints)
		}
	})

	// One watch follows the whole suite (its stream lives as long as the
	// parent test).
	watch := watchInstancesOf(t, e.rpc, &registryv1.WatchInstancesRequest{})
	w2 := e.createPod(t, "worker-2")
	gen2 := instanceKey("vllm-agg", "backend", "generate", kubeInstanceID(w2.Uid))

	t.Run("only ready endpoints of selected slices count", func(t *testing.T) {
		if len(watch.items) != 0 {
			t.Fatalf("snapshot before any ready slice = %v, want empty", watch.items)
		}
		if _, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("generate", "10.0.0.2:9000"), Pod: w2}); err != nil {
			t.Fatal(err)
		}
		// worker-1 is ready only in a slice the selector leaves out; worker-2's
		// slice is written after it, so once worker-2 shows, worker-1 would
		// have shown too if the selector were ignored.
		e.slice(t, "unselected", true, nil, w1)
		e.slice(t, "backend-2", true, discoveryLabel, w2)
		watch.until(t, gen2)
	})

	t.Run("endpoint slice readiness flips the instances", func(t *testing.T) {
		steps := []struct {
			ready bool
			want  []string
			last  registryv1.EventType
		}{
			{true, []string{gen1, pre1, gen2}, registryv1.EventType_EVENT_TYPE_PUT},
			{false, []string{gen2}, registryv1.EventType_EVENT_TYPE_DELETE},
			{true, []string{gen1, pre1, gen2}, registryv1.EventType_EVENT_TYPE_PUT},
		}
		for _, st := range steps {
			e.slice(t, "backend-1", st.ready, discoveryLabel, w1)
			watch.until(t, st.want...)
			if last := watch.events[len(watch.events)-1]; last.Type != st.last || last.Instance.InstanceId != id1 {
				t.Fatalf("ready=%v: last event %v, want %v of instance %x", st.ready, last, st.last, id1)
			}
		}
		list, err := e.rpc.ListModels(ctx, &registryv1.ListModelsRequest{})
		if err != nil || len(list.Cards) != 1 || list.Cards[0].InstanceId != id1 {
			t.Fatalf("ListModels = %v, %v; want worker-1's card", list, err)
		}
	})

	t.Run("deleting the resource emits DELETE and ends the lease", func(t *testing.T) {
		// A resource the registry did not write (no managed-by label) is
		// not watched, even for a ready pod.
		w3 := e.createPod(t, "worker-3")
		stray := workerResource("worker-3", w3.Uid, tcpEntry("generate", "10.0.0.3:9000"))
		stray.SetLabels(nil)
		if _, err := e.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).Create(ctx, stray, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.slice(t, "backend-3", true, discoveryLabel, w3)

		if err := e.dyn.Resource(WorkerMetadataGVR).Namespace(kubeTestNS).Delete(ctx, "worker-2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		watch.until(t, gen1, pre1)
		if last := watch.events[len(watch.events)-1]; last.Type != registryv1.EventType_EVENT_TYPE_DELETE || last.Instance.InstanceId != kubeInstanceID(w2.Uid) {
			t.Fatalf("last event %v, want the DELETE of worker-2", last)
		}
		ka, err := e.rpc.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ka.CloseSend()
		for _, tc := range []struct {
			lease uint64
			found bool
		}{{id1, true}, {kubeInstanceID(w2.Uid), false}} {
			if err := ka.Send(&registryv1.KeepAliveRequest{LeaseId: tc.lease}); err != nil {
				t.Fatal(err)
			}
			r, err := ka.Recv()
			if err != nil || r.Found != tc.found {
				t.Fatalf("keep-alive of %x = %v, %v; want found=%v", tc.lease, r, err, tc.found)
			}
		}
	})

	t.Run("a session through pkg/registryclient", func(t *testing.T) {
		c, err := registryclient.Dial([]string{e.addr}, registryclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w4 := e.createPod(t, "worker-4")
		t.Setenv("POD_NAME", w4.Name)
		t.Setenv("POD_NAMESPACE", w4.Namespace)
		t.Setenv("POD_UID", w4.Uid)
		s, err := registryclient.NewSession(ctx, c, registryclient.SessionOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if s.ID() != kubeInstanceID(w4.Uid) {
			t.Fatalf("session id %x, want the pod's instance id %x", s.ID(), kubeInstanceID(w4.Uid))
		}
		if _, err := s.Register(ctx, tcpInstanceOf("generate", "10.0.0.4:9000")); err != nil {
			t.Fatal(err)
		}
		e.slice(t, "backend-4", true, discoveryLabel, w4)
		watch.until(t, gen1, pre1, instanceKey("vllm-agg", "backend", "generate", s.ID()))
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.resource(t, "worker-4"); !apierrors.IsNotFound(err) {
			t.Fatalf("after Close the resource is %v, want it deleted", err)
		}
		watch.until(t, gen1, pre1)
	})

	t.Run("another registry process answers an old revision with a fresh snapshot", func(t *testing.T) {
		// As after a restart, or a client moving to another replica: the
		// revision is not one this process issued.
		_, rpc := startKubeRegistry(t, Config{Backend: BackendKubernetes, KubeRESTConfig: e.cfg, KubeNamespace: kubeTestNS,
			KubeEndpointSliceSelector: envtestSelector, KubeDebounce: 20 * time.Millisecond})
		other := watchInstancesOf(t, rpc, &registryv1.WatchInstancesRequest{ResumeRevision: watch.rev})
		other.next(t)
		if other.first.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT || other.first.SnapshotReason != registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED {
			t.Fatalf("resume from %d on another process: %v, want a COMPACTED snapshot", watch.rev, other.first)
		}
		other.until(t, gen1, pre1)
	})

	t.Run("a new lease of the same pod starts afresh", func(t *testing.T) {
		// A restarted container asks for a lease again: what the previous
		// process registered goes, and the id stays the pod's.
		g, err := e.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{Pod: w1})
		if err != nil || g.LeaseId != id1 {
			t.Fatalf("GrantLease = %v, %v; want lease %x", g, err, id1)
		}
		watch.until(t)
		if _, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("generate", "10.0.0.1:9100"), LeaseId: id1}); err != nil {
			t.Fatal(err)
		}
		watch.until(t, gen1)
		if got := watch.items[gen1].GetTransport().GetTcp(); got != "10.0.0.1:9100" {
			t.Fatalf("worker-1 serves at %q, want the new port", got)
		}
	})

	t.Run("registrations without a lease add up per pod", func(t *testing.T) {
		steps := []struct {
			ep, addr string
			want     []string
		}{
			{"prefill", "10.0.0.1:9101", []string{gen1, pre1}},
			{"prefill", "10.0.0.1:9102", []string{gen1, pre1}}, // the pod's own re-registration replaces it
		}
		for _, st := range steps {
			r, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf(st.ep, st.addr), Pod: w1})
			if err != nil || r.InstanceId != id1 {
				t.Fatalf("Register %s = %v, %v; want instance %x", st.addr, r, err, id1)
			}
			for watch.items[pre1].GetTransport().GetTcp() != st.addr {
				watch.next(t)
			}
			watch.until(t, st.want...)
		}
		if got := watch.items[gen1].GetTransport().GetTcp(); got != "10.0.0.1:9100" {
			t.Fatalf("generate moved to %q; a registration of another endpoint must leave it", got)
		}
	})
}

// TestKubernetesEnvtestRBAC runs the registry through a kubeconfig file as
// the service account of deploy/kubernetes/rbac.yaml, with only the rights
// that file grants, through a worker's whole life.
func TestKubernetesEnvtestRBAC(t *testing.T) {
	e := startKubeEnv(t)
	ctx := kubeCtx(t)
	applyManifest(t, e.dyn, filepath.Join("..", "..", "deploy", "kubernetes", "rbac.yaml"))

	kubeconfig := writeKubeconfig(t, e.cfg, "system:serviceaccount:"+kubeTestNS+":switchyard-registry")
	_, rpc := startKubeRegistry(t, Config{Backend: BackendKubernetes, Kubeconfig: kubeconfig, KubeDebounce: 20 * time.Millisecond})

	w := e.createPod(t, "worker-rbac")
	watch := watchInstancesOf(t, rpc, &registryv1.WatchInstancesRequest{})
	r, err := rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("generate", "10.0.1.1:9000"), Pod: w})
	if err != nil {
		t.Fatalf("Register as the service account: %v", err)
	}
	card := &registryv1.ModelCard{Namespace: "vllm-agg", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 16, ContextLength: 64}
	if _, err := rpc.RegisterModel(ctx, &registryv1.RegisterModelRequest{Card: card, LeaseId: r.InstanceId}); err != nil {
		t.Fatalf("RegisterModel as the service account: %v", err)
	}
	e.slice(t, "backend-rbac", true, nil, w)
	key := instanceKey("vllm-agg", "backend", "generate", r.InstanceId)
	watch.until(t, key)
	if _, err := rpc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: r.InstanceId}); err != nil {
		t.Fatalf("Deregister as the service account: %v", err)
	}
	watch.until(t)
}

// applyManifest creates the ServiceAccounts, Roles and RoleBindings of a
// YAML file.
func applyManifest(t *testing.T, dyn dynamic.Interface, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resources := map[string]schema.GroupVersionResource{
		"ServiceAccount": {Version: "v1", Resource: "serviceaccounts"},
		"Role":           {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		"RoleBinding":    {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	}
	dec := yamlutil.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvr, ok := resources[u.GetKind()]
		if !ok {
			t.Fatalf("%s: unexpected kind %q", path, u.GetKind())
		}
		if _, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(kubeCtx(t), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// writeKubeconfig writes a kubeconfig for cfg's API server and credentials,
// impersonating user when set, with the test namespace as its namespace.
func writeKubeconfig(t *testing.T, cfg *rest.Config, user string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken, Impersonate: user,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user", Namespace: kubeTestNS}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKubernetesEnvtestGarbageCollection runs kube-controller-manager's
// garbage collector beside envtest (which has no controllers): deleting a
// worker pod must delete its DynamoWorkerMetadata through the owner
// reference, and watchers must see the DELETE. The pod's EndpointSlice is
// left ready on purpose, so the DELETE can only come from the resource.
func TestKubernetesEnvtestGarbageCollection(t *testing.T) {
	e := startKubeEnv(t)
	kcm := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(kcm); err != nil {
		msg := fmt.Sprintf("no %s: hack/envtest-binaries.sh builds it", kcm)
		if os.Getenv("SWITCHYARD_REQUIRE_ENVTEST") == "1" {
			t.Fatal(msg + " (SWITCHYARD_REQUIRE_ENVTEST=1 forbids skipping)")
		}
		t.Skip(msg)
	}
	ctx := kubeCtx(t)
	pod := e.createPod(t, "worker-gc")
	watch := watchInstancesOf(t, e.rpc, &registryv1.WatchInstancesRequest{})
	r, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: tcpInstanceOf("generate", "10.0.2.1:9000"), Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	e.slice(t, "backend-gc", true, discoveryLabel, pod)
	watch.until(t, instanceKey("vllm-agg", "backend", "generate", r.InstanceId))

	var out bytes.Buffer
	cmd := exec.Command(kcm, "--kubeconfig="+writeKubeconfig(t, e.cfg, ""), "--controllers=garbagecollector",
		"--leader-elect=false", "--secure-port=0", "--v=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kube-controller-manager output:\n%s", out.String())
		}
	})

	now := int64(0) // no kubelet here to finish a graceful deletion
	if err := e.kube.CoreV1().Pods(kubeTestNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil {
		t.Fatal(err)
	}
	watch.until(t)
	if last := watch.events[len(watch.events)-1]; last.Type != registryv1.EventType_EVENT_TYPE_DELETE || last.Instance.InstanceId != r.InstanceId {
		t.Fatalf("last event %v, want the DELETE of the pod's instance", last)
	}
	if _, err := e.resource(t, pod.Name); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod's resource after the pod went: %v, want NotFound", err)
	}
}
