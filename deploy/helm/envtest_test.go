package helm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// fieldManager is the server-side apply field manager of the test.
const fieldManager = "switchyard-chart-test"

// startAPIServer starts envtest (kube-apiserver and etcd built by
// hack/envtest-binaries.sh, named by KUBEBUILDER_ASSETS), or skips as the
// registry's envtest suites do; SWITCHYARD_REQUIRE_ENVTEST=1 turns the skip
// into a failure. CRDs are test data: a minimal ServiceMonitor CRD, so that
// the chart's ServiceMonitors apply without the Prometheus Operator; the
// chart's own CRD is applied from the rendered manifest.
func startAPIServer(t *testing.T) *rest.Config {
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
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "servicemonitor-crd.yaml")}},
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
	return cfg
}

// TestKubernetesEnvtestChart server-side applies every object the chart
// renders, for the default values and each ci/ values file, to a real
// kube-apiserver (which validates each against its schema and rejects
// unknown fields), then reads every object back and checks that all it
// rendered is there as rendered, and that the Deployments, Services and RBAC
// of each release exist.
func TestKubernetesEnvtestChart(t *testing.T) {
	cfg := startAPIServer(t)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cached := memory.NewMemCacheClient(disco)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	for name, values := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			ns := "sy-" + name
			if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			objs := render(t, ns, values)
			// CRDs first, as helm installs crds/ before the templates.
			slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
				return boolInt(b.GetKind() == "CustomResourceDefinition") - boolInt(a.GetKind() == "CustomResourceDefinition")
			})
			kinds := map[string]int{}
			for _, u := range objs {
				kinds[u.GetKind()]++
				res := apply(ctx, t, dyn, mapper, cached, ns, u)
				got, err := res.Get(ctx, u.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("get %s %s after apply: %v", u.GetKind(), u.GetName(), err)
				}
				if path, ok := contains(got.Object, u.Object); !ok {
					t.Errorf("%s %s on the server differs from the rendered object at %s", u.GetKind(), u.GetName(), path)
				}
				if u.GetKind() == "CustomResourceDefinition" {
					waitEstablished(ctx, t, res, u.GetName())
					cached.Invalidate()
					mapper.Reset()
				}
			}
			t.Logf("applied %v", kinds)
			// Each component has one Deployment, Service and
			// PodDisruptionBudget: the control plane, one worker pool (or a
			// prefill and a decode pool when disaggregated), and the planner
			// when enabled.
			components := []string{"eventbus", "frontend", "registry", "router"}
			switch name {
			case "disagg":
				components = append(components, "worker-decode", "worker-prefill")
			case "planner":
				components = append(components, "planner", "worker")
			default:
				components = append(components, "worker")
			}
			slices.Sort(components)
			for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget"} {
				if kinds[kind] != len(components) {
					t.Errorf("%d objects of kind %s, want %d (%v)", kinds[kind], kind, len(components), components)
				}
			}
			deps, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list Deployments: %v", err)
			}
			var deployed []string
			for _, d := range deps.Items {
				deployed = append(deployed, d.Labels["app.kubernetes.io/component"])
			}
			slices.Sort(deployed)
			if !slices.Equal(deployed, components) {
				t.Errorf("Deployments of components %v, want %v", deployed, components)
			}
			if name == "planner" {
				for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
					if kinds[kind] != 1 {
						t.Errorf("%d objects of kind %s with the planner, want 1", kinds[kind], kind)
					}
				}
				// The planner may read and set the worker Deployment's
				// scale, and nothing more.
				sa := "system:serviceaccount:" + ns + ":sy-switchyard-planner"
				for _, tc := range []struct {
					verb, resource, sub, name string
					want                      bool
				}{
					{"update", "deployments", "scale", "sy-switchyard-worker", true},
					{"get", "deployments", "scale", "sy-switchyard-worker", true},
					{"update", "deployments", "scale", "sy-switchyard-router", false},
					{"update", "deployments", "", "sy-switchyard-worker", false},
					{"delete", "deployments", "", "sy-switchyard-worker", false},
				} {
					r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: sa, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: tc.verb, Group: "apps",
							Resource: tc.resource, Subresource: tc.sub, Name: tc.name}}}, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if r.Status.Allowed != tc.want {
						t.Errorf("planner may %s %s/%s %s: %v, want %v", tc.verb, tc.resource, tc.sub, tc.name, r.Status.Allowed, tc.want)
					}
				}
			}
			if name == "kubernetes" {
				for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "CustomResourceDefinition"} {
					if kinds[kind] != 1 {
						t.Errorf("%d objects of kind %s with discovery.backend kubernetes, want 1", kinds[kind], kind)
					}
				}
				sa := "system:serviceaccount:" + ns + ":sy-switchyard-registry"
				checkCan(ctx, t, kube, sa, ns, "patch", "switchyard.dev", "dynamoworkermetadatas", true)
				checkCan(ctx, t, kube, sa, ns, "watch", "discovery.k8s.io", "endpointslices", true)
				checkCan(ctx, t, kube, sa, ns, "delete", "", "pods", false)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// apply server-side applies u (in namespace ns when the kind is
// namespaced) and returns the resource client it went through.
func apply(ctx context.Context, t *testing.T, dyn dynamic.Interface, mapper meta.ResettableRESTMapper, cached discovery.CachedDiscoveryInterface, ns string, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %s: no resource for %v on the server: %v", u.GetKind(), u.GetName(), gvk, err)
	}
	var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if u.GetNamespace() != "" && u.GetNamespace() != ns {
			t.Fatalf("%s %s renders into namespace %q, not the release's %q", u.GetKind(), u.GetName(), u.GetNamespace(), ns)
		}
		res = dyn.Resource(m.Resource).Namespace(ns)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	force := true
	if _, err := res.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force}); err != nil {
		t.Fatalf("server-side apply %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return res
}

func waitEstablished(ctx context.Context, t *testing.T, res dynamic.ResourceInterface, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}

// checkCan asks the API server (SubjectAccessReview) whether user may verb
// the resource in ns, and fails unless the answer is want.
func checkCan(ctx context.Context, t *testing.T, kube kubernetes.Interface, user, ns, verb, group, resource string, want bool) {
	t.Helper()
	r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar(user, ns, verb, group, resource), metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			t.Skip("no SubjectAccessReview API")
		}
		t.Fatal(err)
	}
	if r.Status.Allowed != want {
		t.Errorf("%s may %s %s.%s in %s: %v, want %v (%s)", user, verb, resource, group, ns, r.Status.Allowed, want, r.Status.Reason)
	}
}

func sar(user, ns, verb, group, resource string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
	}}
}

// contains reports whether every field of want is in got with the same
// value (what the server added, defaults and status, is ignored), and the
// path of the first difference. Lists must have the same length and match
// element by element.
func contains(got, want any) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return "", false
		}
		for k, wv := range w {
			if wv == nil {
				continue // a null in YAML is an absent field
			}
			gv, ok := g[k]
			if !ok {
				return "." + k + " (missing)", false
			}
			if p, ok := contains(gv, wv); !ok {
				return "." + k + p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf(" (length %d, want %d)", len(g), len(w)), false
		}
		for i := range w {
			if p, ok := contains(g[i], w[i]); !ok {
				return fmt.Sprintf("[%d]%s", i, p), false
			}
		}
		return "", true
	default:
		if reflect.DeepEqual(normalize(got), normalize(want)) {
			return "", true
		}
		return fmt.Sprintf(" (%v, want %v)", got, want), false
	}
}

// normalize makes numbers from YAML (int64, float64) and from the server's
// JSON comparable.
func normalize(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case int32:
		return float64(n)
	}
	return v
}

func TestContains(t *testing.T) {
	tests := []struct {
		name      string
		got, want any
		ok        bool
	}{
		{"server defaults ignored", map[string]any{"a": int64(1), "b": "x"}, map[string]any{"a": float64(1)}, true},
		{"null in the manifest", map[string]any{}, map[string]any{"env": nil}, true},
		{"missing field", map[string]any{"a": 1}, map[string]any{"b": 1}, false},
		{"changed value", map[string]any{"a": "x"}, map[string]any{"a": "y"}, false},
		{"list shorter", []any{"a"}, []any{"a", "b"}, false},
		{"list element", []any{map[string]any{"n": "a", "v": "1"}}, []any{map[string]any{"n": "a", "v": "2"}}, false},
		{"nested subset", map[string]any{"s": map[string]any{"x": []any{map[string]any{"p": int64(80), "q": true}}}}, map[string]any{"s": map[string]any{"x": []any{map[string]any{"p": int64(80)}}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if path, ok := contains(tt.got, tt.want); ok != tt.ok {
				t.Fatalf("contains = %v at %q, want %v", ok, path, tt.ok)
			}
		})
	}
}
