package helm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/pkg/flagenv"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/planner"
	"github.com/switchyard-llm/switchyard/services/registry"
	"github.com/switchyard-llm/switchyard/services/router"
)

const chartDir = "switchyard"

// valueSets are the values the chart is tested with: its defaults and every
// file in ci/ (the HA setup among them). The key names the release's
// namespace in the envtest apply test.
func valueSets(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in %s/ci: %v", chartDir, err)
	}
	sets := map[string]string{"default": ""}
	for _, f := range files {
		sets[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = f
	}
	return sets
}

var helmBin struct {
	once sync.Once
	path string
	err  error
}

// helmPath is the helm of tools/go.mod, built from Go modules by go tool
// (cached after the first build); asked once, as each go tool call costs
// seconds of module loading.
func helmPath(t testing.TB) string {
	t.Helper()
	helmBin.once.Do(func() {
		modfile, err := filepath.Abs(filepath.Join("..", "..", "tools", "go.mod"))
		if err != nil {
			helmBin.err = err
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command("go", "tool", "-modfile="+modfile, "-n", "helm")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmBin.err = fmt.Errorf("go tool -n helm: %v\n%s", err, stderr.String())
			return
		}
		helmBin.path = strings.TrimSpace(string(out))
	})
	if helmBin.err != nil {
		t.Fatal(helmBin.err)
	}
	return helmBin.path
}

// helm runs helm and returns its standard output.
func helm(t testing.TB, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmPath(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// render runs helm template for a release "sy" in namespace ns, CRDs
// included, and decodes every object.
func render(t testing.TB, ns, valuesFile string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "sy", chartDir, "--namespace", ns, "--include-crds"}
	if valuesFile != "" {
		args = append(args, "--values", valuesFile)
	}
	return decodeAll(t, helm(t, args...))
}

func decodeAll(t testing.TB, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := yamlutil.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode rendered manifest: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("rendered object without kind or name: %v", m)
		}
		objs = append(objs, u)
	}
}

// typed converts u to a typed object, failing on any field the type does
// not have (a misspelt or misplaced field in a template).
func typed[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

// service is what the test knows of one of our binaries: its Config, the
// environment prefix and named variables its main passes to cli.Options,
// and the variables it reads itself outside its flags.
type service struct {
	config func() cli.Config
	prefix string
	named  map[string]string
	reads  []string
}

var transportEnv = []string{"DYN_REQUEST_PLANE", "DYN_TCP_RPC_HOST", "DYN_TCP_RPC_PORT", "DYN_HTTP_RPC_HOST", "DYN_HTTP_RPC_PORT", "NATS_SERVER"}

// services are the images the chart runs, by name (the image is
// <prefix><name>:<tag>); the prefixes are those of each cmd/<svc>/main.go.
var services = map[string]service{
	"registry": {config: func() cli.Config { return new(registry.Config) }, prefix: "SWITCHYARD_REGISTRY_", named: registry.EnvVars},
	"eventbus": {config: func() cli.Config { return new(eventbus.Config) }, prefix: eventbus.EnvPrefix, named: eventbus.EnvVars},
	"router":   {config: func() cli.Config { return new(router.Config) }, prefix: "SWITCHYARD_ROUTER_", named: router.EnvVars},
	"frontend": {config: func() cli.Config { return new(frontend.Config) }, prefix: "SWITCHYARD_FRONTEND_", named: frontend.EnvVars, reads: transportEnv},
	// pkg/registryclient names the worker's pod from POD_* (kubernetes backend).
	"mocker":  {config: func() cli.Config { return new(mocker.Config) }, prefix: "SWITCHYARD_MOCKER_", named: mocker.EnvVars, reads: append([]string{"POD_NAME", "POD_NAMESPACE", "POD_UID"}, transportEnv...)},
	"planner": {config: func() cli.Config { return new(planner.Config) }, prefix: planner.EnvPrefix, named: planner.EnvVars},
}

// placeholder stands for a value the kubelet fills in at run time.
func placeholder(e corev1.EnvVar) string {
	if e.ValueFrom == nil {
		return e.Value
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		switch f.FieldPath {
		case "status.podIP":
			return "10.1.2.3"
		case "metadata.uid":
			return "0b6a9b0e-7d7a-4f0e-9d55-2f3c2b1a0c11"
		case "metadata.namespace":
			return "sy"
		}
		return "sy-pod-0"
	}
	return "from-a-secret"
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestChartArgsParse renders the chart with each values set and runs every
// container's arguments and environment through the service's own flags:
// each flag the chart passes must exist and parse, each variable it sets
// must be one the service reads, and the result must pass Validate (files
// from Secrets, absent here, excepted).
func TestChartArgsParse(t *testing.T) {
	for name, values := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			var seen []string
			for _, u := range render(t, "sy", values) {
				if u.GetKind() != "Deployment" {
					continue
				}
				d := typed[appsv1.Deployment](t, u)
				for _, c := range d.Spec.Template.Spec.Containers {
					svcName := imageService(t, c.Image)
					seen = append(seen, svcName)
					t.Run(d.Name+"/"+c.Name, func(t *testing.T) { checkContainer(t, svcName, c) })
				}
			}
			slices.Sort(seen)
			seen = slices.Compact(seen)
			want := []string{"eventbus", "frontend", "mocker", "registry", "router"}
			if name == "planner" {
				want = []string{"eventbus", "frontend", "mocker", "planner", "registry", "router"}
			}
			if !slices.Equal(seen, want) {
				t.Fatalf("deployed services %v, want %v", seen, want)
			}
		})
	}
}

func imageService(t *testing.T, image string) string {
	t.Helper()
	repo, _, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	if _, ok := services[repo]; !ok || !strings.HasPrefix(image, "switchyard/") {
		t.Fatalf("image %q is not one of switchyard/<service>", image)
	}
	return repo
}

func checkContainer(t *testing.T, name string, c corev1.Container) {
	svc := services[name]
	if len(c.Command) != 0 {
		t.Errorf("command %q replaces the image's entrypoint", c.Command)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = placeholder(e)
	}
	var refs []string
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = varRef.ReplaceAllStringFunc(a, func(m string) string {
			v := m[2 : len(m)-1]
			refs = append(refs, v)
			if _, ok := env[v]; !ok {
				t.Errorf("argument %q refers to $(%s), which the container does not set", a, v)
			}
			return env[v]
		})
	}

	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(&bytes.Buffer{})
	fset.String("log-level", "info", "") // cli.Main's own flag
	cfg := svc.config()
	cfg.RegisterFlags(fset)
	if err := fset.Parse(args); err != nil {
		t.Fatalf("%s does not accept the chart's arguments %q: %v", name, args, err)
	}
	if fset.NArg() != 0 {
		t.Fatalf("%s: arguments %q left over after the flags", name, fset.Args())
	}

	named := map[string]string{"log-level": "SWITCHYARD_LOG_LEVEL"}
	for k, v := range svc.named {
		named[k] = v
	}
	known := map[string]bool{}
	fset.VisitAll(func(f *flag.Flag) {
		if v, ok := named[f.Name]; ok {
			known[v] = true
		} else {
			known[flagenv.EnvName(svc.prefix, f.Name)] = true
		}
	})
	for _, v := range svc.reads {
		known[v] = true
	}
	for _, v := range refs {
		known[v] = true
	}
	for e := range env {
		if !known[e] {
			t.Errorf("env %s is read by no flag of %s nor by the process", e, name)
		}
		t.Setenv(e, env[e])
	}
	if err := flagenv.Set(fset, svc.prefix, named); err != nil {
		t.Fatalf("%s: the chart's environment does not parse: %v", name, err)
	}
	// Complete reads the files the chart mounts from Secrets; absent here.
	if err := cfg.Complete(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: the chart's configuration does not complete: %v", name, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: the chart's configuration does not validate: %v", name, err)
	}
}

// TestChartCRDAndRBACMatchDeploy keeps the chart's CRD and the registry's
// Role the same as deploy/kubernetes, which the registry's own envtest
// suites run against.
func TestChartCRDAndRBACMatchDeploy(t *testing.T) {
	chartCRD, err := os.ReadFile(filepath.Join(chartDir, "crds", "dynamoworkermetadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	deployCRD, err := os.ReadFile(filepath.Join("..", "kubernetes", "crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chartCRD, deployCRD) {
		t.Errorf("%s/crds/dynamoworkermetadata.yaml differs from deploy/kubernetes/crd.yaml; copy it", chartDir)
	}

	rbac, err := os.ReadFile(filepath.Join("..", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []rbacv1.PolicyRule
	for _, u := range decodeAll(t, rbac) {
		if u.GetKind() == "Role" {
			want = typed[rbacv1.Role](t, u).Rules
		}
	}
	var got []rbacv1.PolicyRule
	for _, u := range render(t, "sy", filepath.Join(chartDir, "ci", "kubernetes-values.yaml")) {
		if u.GetKind() == "Role" {
			got = typed[rbacv1.Role](t, u).Rules
		}
	}
	if want == nil || got == nil {
		t.Fatalf("Role rules: deploy/kubernetes has %d, the chart %d", len(want), len(got))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chart Role rules differ from deploy/kubernetes/rbac.yaml (-deploy +chart):\n%s", diff)
	}
}

// TestChartRefusesBrokenValues: values that cannot work fail the render
// with a message, instead of deploying a release that cannot start.
func TestChartRefusesBrokenValues(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want string
	}{
		{"two registries on an embedded etcd", []string{"registry.replicas=2"}, "needs discovery.etcd.endpoints"},
		{"two eventbus on an embedded nats", []string{"eventbus.replicas=2"}, "needs nats.url"},
		{"nats request plane without nats", []string{"requestPlane=nats"}, "needs nats.url"},
		{"routers without sync", []string{"router.replicas=2", "router.replicaSync=false"}, "needs router.replicaSync"},
		{"unknown backend", []string{"discovery.backend=consul"}, "valid values are kv_store and kubernetes"},
		{"unknown plane", []string{"requestPlane=udp"}, "valid values are tcp, http and nats"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"template", "sy", chartDir}
			for _, s := range tt.set {
				args = append(args, "--set", s)
			}
			out, err := exec.Command(helmPath(t), args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Fatalf("helm template --set %v: err %v, output:\n%s\nwant a failure saying %q", tt.set, err, out, tt.want)
			}
		})
	}
}

// TestChartPodsHardened: every pod runs as non-root with a read-only root
// filesystem, every container has resources and readiness and liveness
// probes (native gRPC probes on the gRPC services unless TLS is on), and
// every Deployment has a Service and a PodDisruptionBudget selecting it.
func TestChartPodsHardened(t *testing.T) {
	grpcServices := map[string]bool{"registry": true, "eventbus": true, "router": true}
	for name, values := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			objs := render(t, "sy", values)
			selects := map[string][]map[string]string{}
			for _, u := range objs {
				switch u.GetKind() {
				case "Service":
					selects["Service"] = append(selects["Service"], typed[corev1.Service](t, u).Spec.Selector)
				case "PodDisruptionBudget":
					sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
					selects["PodDisruptionBudget"] = append(selects["PodDisruptionBudget"], sel)
				}
			}
			tls := strings.Contains(values, "ha")
			for _, u := range objs {
				if u.GetKind() != "Deployment" {
					continue
				}
				d := typed[appsv1.Deployment](t, u)
				pod := d.Spec.Template.Spec
				if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
					t.Errorf("%s: pod does not require a non-root user", d.Name)
				}
				for _, kind := range []string{"Service", "PodDisruptionBudget"} {
					if !slices.ContainsFunc(selects[kind], func(sel map[string]string) bool {
						return len(sel) > 0 && subsetOf(sel, d.Spec.Template.Labels)
					}) {
						t.Errorf("%s: no %s selects its pods", d.Name, kind)
					}
				}
				for _, c := range pod.Containers {
					if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
						sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
						t.Errorf("%s/%s: root filesystem writable or privilege escalation allowed", d.Name, c.Name)
					}
					if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
						t.Errorf("%s/%s: no CPU request or memory limit", d.Name, c.Name)
					}
					if c.ReadinessProbe == nil || c.LivenessProbe == nil {
						t.Errorf("%s/%s: readiness or liveness probe missing", d.Name, c.Name)
						continue
					}
					svc := imageService(t, c.Image)
					if !grpcServices[svc] {
						continue
					}
					switch p := c.ReadinessProbe; {
					case !tls && p.GRPC == nil:
						t.Errorf("%s/%s: readiness is not the native gRPC probe", d.Name, c.Name)
					case tls && (p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"/usr/local/bin/service", "healthcheck"})):
						t.Errorf("%s/%s: with TLS, readiness is not the service's healthcheck: %+v", d.Name, c.Name, p)
					}
				}
			}
		})
	}
}

func subsetOf(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}

// TestChartWorkerPools: worker.pools render a prefill and a decode pool,
// each a Deployment whose pods carry the role label the registry's
// Kubernetes backend reads (registry.LabelRole) and whose mockers run
// --disaggregation-mode with the same role, so that the registry, which
// refuses an instance registering another role than its pod's label, takes
// them; the aggregated worker has neither.
func TestChartWorkerPools(t *testing.T) {
	tests := []struct {
		name   string
		values string
		want   map[string]string // Deployment -> role ("" for none)
	}{
		{"default", "", map[string]string{"sy-switchyard-worker": ""}},
		{"disagg", filepath.Join(chartDir, "ci", "disagg-values.yaml"),
			map[string]string{"sy-switchyard-worker-prefill": "prefill", "sy-switchyard-worker-decode": "decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			replicas := map[string]int32{}
			for _, u := range render(t, "sy", tt.values) {
				if u.GetKind() != "Deployment" {
					continue
				}
				d := typed[appsv1.Deployment](t, u)
				c := d.Spec.Template.Spec.Containers[0]
				if imageService(t, c.Image) != "mocker" {
					continue
				}
				label := d.Spec.Template.Labels[registry.LabelRole]
				var mode string
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(a, "--disaggregation-mode="); ok {
						mode = v
					}
				}
				if label != mode {
					t.Errorf("%s: pod label %s=%q, mocker --disaggregation-mode=%q", d.Name, registry.LabelRole, label, mode)
				}
				if d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != strings.TrimPrefix(d.Name, "sy-switchyard-") {
					t.Errorf("%s selects %v: a pool's pods must be apart from the other pools'", d.Name, d.Spec.Selector.MatchLabels)
				}
				got[d.Name] = label
				replicas[d.Name] = *d.Spec.Replicas
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("worker Deployments and roles (-want +got):\n%s", diff)
			}
			if tt.name == "disagg" && (replicas["sy-switchyard-worker-prefill"] != 2 || replicas["sy-switchyard-worker-decode"] != 3) {
				t.Errorf("pool replicas %v, want prefill 2 and decode 3", replicas)
			}
		})
	}
}
