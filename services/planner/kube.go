package planner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// KubeConfig is the kubernetes connector's: which Deployment runs each
// pool, in which namespace.
type KubeConfig struct {
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster config.
	Kubeconfig string
	// Namespace of the Deployments; empty is the kubeconfig's or, in a
	// cluster, the planner's own.
	Namespace string
	// Deployments maps roles to Deployments: "agg=NAME,prefill=NAME,
	// decode=NAME" (any of them). The Helm chart's worker Deployment is
	// the agg pool of the model it serves.
	Deployments string
	// RESTConfig, when set by an embedding program or a test, replaces
	// Kubeconfig.
	RESTConfig *rest.Config
}

// RegisterFlags adds the kubernetes connector's flags.
func (c *KubeConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubernetes connector: kubeconfig file (development); empty uses the in-cluster config")
	fs.StringVar(&c.Namespace, "kubernetes-namespace", "", "kubernetes connector: namespace of the worker Deployments; empty is the kubeconfig's or, in a cluster, the planner's own")
	fs.StringVar(&c.Deployments, "kubernetes-deployments", "", "kubernetes connector: the Deployment of each pool by role, as agg=NAME,prefill=NAME,decode=NAME (the Helm chart's worker Deployment is <release>-worker)")
}

// Validate checks the settings; it reads nothing.
func (c KubeConfig) Validate() error {
	_, err := parseDeployments(c.Deployments)
	return err
}

// parseDeployments reads role=NAME pairs: known roles, each once, names
// of DNS labels (lower-case letters, digits and '-', at most 253 bytes).
func parseDeployments(s string) (map[core.Role]string, error) {
	out := map[core.Role]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		role, name, ok := strings.Cut(strings.TrimSpace(kv), "=")
		r := core.Role(role)
		switch {
		case !ok:
			return nil, fmt.Errorf("--kubernetes-deployments %q: want role=NAME", kv)
		case r != core.Agg && r != core.Prefill && r != core.Decode:
			return nil, fmt.Errorf("--kubernetes-deployments: role %q: valid roles are agg, prefill, decode", role)
		case out[r] != "":
			return nil, fmt.Errorf("--kubernetes-deployments: role %s given twice", role)
		case !dnsName(name):
			return nil, fmt.Errorf("--kubernetes-deployments: %q is not a Deployment name", name)
		}
		out[r] = name
	}
	if len(out) == 0 {
		return nil, errors.New("--connector kubernetes needs --kubernetes-deployments (as agg=NAME)")
	}
	return out, nil
}

func dnsName(s string) bool {
	if s == "" || len(s) > 253 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// kube scales the pools' Deployments through their scale subresource.
// Kubernetes chooses which pod goes on a scale-down and sends it SIGTERM:
// a Switchyard worker then deregisters (routers stop sending it requests)
// and finishes what it runs within the pod's termination grace period. So
// the planner never picks the workers itself (every one is pinned).
type kube struct {
	client      kubernetes.Interface
	namespace   string
	deployments map[core.Role]string
	log         *slog.Logger
}

func newKube(cfg KubeConfig, log *slog.Logger) (*kube, error) {
	deps, err := parseDeployments(cfg.Deployments)
	if err != nil {
		return nil, err
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{})
	rc := cfg.RESTConfig
	if rc == nil {
		if rc, err = loader.ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes connector: no API server config (in-cluster, or --kubeconfig): %w", err)
		}
	}
	ns := cfg.Namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, fmt.Errorf("kubernetes connector: cannot tell the namespace (set --kubernetes-namespace): %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "switchyard-planner"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes connector: %w", err)
	}
	return &kube{client: client, namespace: ns, deployments: deps, log: log}, nil
}

// Starting reads each pool's Deployment's scale: the replicas it asks for
// past the workers registered are starting (pods scheduled, pulling,
// loading, or not yet registered).
func (k *kube) Starting(ms []member) map[core.PoolKey]int {
	registered := map[core.PoolKey]int{}
	for _, m := range ms {
		registered[m.pool]++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := map[core.PoolKey]int{}
	for role, name := range k.deployments {
		sc, err := k.client.AppsV1().Deployments(k.namespace).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			k.log.Warn("deployment scale not readable", "deployment", name, "err", err.Error())
			continue
		}
		// Every model registered in the role is the Deployment's.
		for _, key := range poolsOfRole(registered, role) {
			out[key] = max(int(sc.Spec.Replicas)-registered[key], 0)
		}
	}
	return out
}

// poolsOfRole lists the pools of role among those with workers, sorted.
func poolsOfRole(registered map[core.PoolKey]int, role core.Role) []core.PoolKey {
	var keys []core.PoolKey
	for k := range registered {
		if k.Role == role {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Model < keys[j].Model })
	return keys
}

func (k *kube) Pinned(*registryv1.Instance) bool     { return true }
func (k *kube) Draining(uint64) bool                 { return false }
func (k *kube) Ready(context.Context) (bool, string) { return true, "" }
func (k *kube) Close(context.Context) error          { return nil }

// Apply sets the scale of each changed pool's Deployment to its target.
func (k *kube) Apply(ctx context.Context, d core.Decision, _ []member) error {
	var errs []error
	for _, p := range d.Pools {
		name := k.deployments[p.Role]
		if name == "" || p.Target == p.Current {
			continue
		}
		if err := k.scale(ctx, name, int32(p.Target)); err != nil {
			errs = append(errs, fmt.Errorf("scale deployment %s/%s to %d: %w", k.namespace, name, p.Target, err))
		}
	}
	return errors.Join(errs...)
}

// scale writes replicas through the scale subresource, with the
// resourceVersion read, so that a concurrent change is not overwritten
// blindly (a conflict is retried once on a fresh read).
func (k *kube) scale(ctx context.Context, name string, replicas int32) error {
	deps := k.client.AppsV1().Deployments(k.namespace)
	var err error
	for range 2 {
		var sc *autoscalingv1.Scale
		if sc, err = deps.GetScale(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		sc.Spec.Replicas = replicas
		if _, err = deps.UpdateScale(ctx, name, sc, metav1.UpdateOptions{FieldManager: "switchyard-planner"}); err == nil {
			k.log.Info("scaled deployment", "deployment", name, "replicas", replicas)
			return nil
		}
	}
	return err
}
