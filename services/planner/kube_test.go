package planner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// TestKubeConnectorScalesDeployments runs the kubernetes connector against
// a real kube-apiserver (envtest; no controllers, so a Deployment's scale
// is its spec and no pods start): it reads the replicas a Deployment asks
// for past the workers registered as starting, and sets each changed
// pool's Deployment's scale to the decision's target, leaving unchanged
// pools' and other Deployments alone.
func TestKubeConnectorScalesDeployments(t *testing.T) {
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
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	// A machine whose only interface is loopback has no default route for
	// the API server to advertise.
	env.ControlPlane.GetAPIServer().Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none")
	rc, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "planner"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deploy := func(name string, replicas int32) {
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "switchyard/mocker"}}}},
		}}
		if _, err := kc.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deploy("workers", 2)
	deploy("decoders", 1)
	deploy("other", 3)
	replicas := func(name string) int32 {
		sc, err := kc.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sc.Spec.Replicas
	}

	k, err := newKube(KubeConfig{RESTConfig: rc, Namespace: ns, Deployments: "agg=workers,decode=decoders"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	agg, dec := core.PoolKey{Model: "m", Role: core.Agg}, core.PoolKey{Model: "m", Role: core.Decode}
	ms := []member{{inst: &registryv1.Instance{InstanceId: 1}, pool: agg}, {inst: &registryv1.Instance{InstanceId: 2}, pool: dec}}
	// The agg Deployment asks for 2 and one worker is registered: one
	// starts. The decode one asks for 1 and has it.
	if got := k.Starting(ms); got[agg] != 1 || got[dec] != 0 {
		t.Fatalf("starting %v, want agg 1, decode 0", got)
	}
	if !k.Pinned(ms[0].inst) {
		t.Fatal("a pod is chosen by Kubernetes, not by the planner: every worker is pinned")
	}
	// Up to 5 agg workers; the decode pool unchanged; then down to 1.
	for _, tc := range []struct {
		agg, dec             core.PoolDecision
		wantAgg, wantDecoder int32
	}{
		{core.PoolDecision{PoolKey: agg, Current: 2, Target: 5}, core.PoolDecision{PoolKey: dec, Current: 1, Target: 1}, 5, 1},
		{core.PoolDecision{PoolKey: agg, Current: 5, Target: 1}, core.PoolDecision{PoolKey: dec, Current: 1, Target: 3}, 1, 3},
	} {
		if err := k.Apply(ctx, core.Decision{ID: 1, Pools: []core.PoolDecision{tc.agg, tc.dec}}, ms); err != nil {
			t.Fatal(err)
		}
		if a, d, o := replicas("workers"), replicas("decoders"), replicas("other"); a != tc.wantAgg || d != tc.wantDecoder || o != 3 {
			t.Fatalf("replicas workers %d decoders %d other %d; want %d, %d, 3", a, d, o, tc.wantAgg, tc.wantDecoder)
		}
	}
	// A pool without a Deployment is left alone; a missing Deployment is
	// an error naming it.
	if err := k.Apply(ctx, core.Decision{ID: 2, Pools: []core.PoolDecision{{PoolKey: core.PoolKey{Model: "m", Role: core.Prefill}, Current: 0, Target: 2}}}, ms); err != nil {
		t.Fatalf("a pool without a Deployment: %v", err)
	}
	gone, err := newKube(KubeConfig{RESTConfig: rc, Namespace: ns, Deployments: "agg=missing"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Apply(ctx, core.Decision{ID: 3, Pools: []core.PoolDecision{{PoolKey: agg, Current: 1, Target: 2}}}, ms); err == nil {
		t.Fatal("scaling a missing Deployment succeeded")
	}
}
