package registry

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

func defaults(t *testing.T) Config {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigDefaults(t *testing.T) {
	c := defaults(t)
	if c.Server.GRPCAddr != ":7001" || c.Server.MetricsAddr != ":9101" || c.Backend != BackendKVStore || c.EtcdEndpoints != "" {
		t.Fatalf("defaults = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"kubernetes without debounce", func(c *Config) { c.Backend = BackendKubernetes; c.KubeDebounce = 0 }, "--kubernetes-debounce must be positive"},
		{"kubernetes bad selector", func(c *Config) { c.Backend = BackendKubernetes; c.KubeEndpointSliceSelector = "a in (" }, `invalid --kubernetes-endpointslice-selector "a in ("`},
		{"unknown backend", func(c *Config) { c.Backend = "zookeeper" }, `invalid DYN_DISCOVERY_BACKEND "zookeeper": valid values are "kv_store" and "kubernetes"`},
		{"no data dir for embedded etcd", func(c *Config) { c.DataDir = "" }, "--data-dir is required"},
		{"no grpc addr", func(c *Config) { c.Server.GRPCAddr = "" }, "--grpc-addr must not be empty"},
		{"half TLS", func(c *Config) { c.Server.TLS.CertFile = "x" }, "--tls-cert and --tls-key must be given together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults(t)
			tt.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	c := defaults(t)
	c.EtcdEndpoints = " http://a:2379, ,http://b:2379 "
	if got := c.Endpoints(); len(got) != 2 || got[0] != "http://a:2379" || got[1] != "http://b:2379" {
		t.Fatalf("Endpoints = %q", got)
	}
}

// TestEmbeddedEtcdByDefault runs the registry as its binary does with no
// flags (but on free ports): it must start its own etcd, say so, and serve.
func TestEmbeddedEtcdByDefault(t *testing.T) {
	c := defaults(t)
	c.Server.GRPCAddr = "127.0.0.1:0"
	c.Server.MetricsAddr = "127.0.0.1:0"
	c.DataDir = t.TempDir()
	c.EmbeddedClientURL = "http://127.0.0.1:0"
	c.EmbeddedPeerURL = "http://127.0.0.1:0"
	logs := &syncWriter{b: &strings.Builder{}}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := Start(ctx, c, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("Wait: %v", err)
		}
	}()
	cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	resp, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{Service: "switchyard.registry.v1.RegistryService"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", resp, err)
	}
	// A watch shows up in the registry's own metrics.
	w, err := registryv1.NewRegistryServiceClient(cc).WatchInstances(cctx, &registryv1.WatchInstancesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + svc.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`switchyard_registry_watches_active{kind="instances"} 1`, `switchyard_registry_watch_snapshots_total{reason="initial"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(logs.String(), "started an embedded single-node etcd") {
		t.Fatalf("log does not announce the embedded etcd:\n%s", logs.String())
	}
}

func TestKubernetesBackendNeedsAnAPIServer(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	missing := t.TempDir() + "/no-such-kubeconfig"
	tests := []struct {
		name       string
		kubeconfig string
		want       string
	}{
		{"no kubeconfig outside a cluster", "", "no API server config (in-cluster, or --kubeconfig)"},
		{"kubeconfig that does not exist", missing, "no-such-kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults(t)
			c.Backend = BackendKubernetes
			c.Kubeconfig = tt.kubeconfig
			c.Server.GRPCAddr = "127.0.0.1:0"
			c.Server.MetricsAddr = ""
			svc, err := Start(context.Background(), c, slog.New(slog.DiscardHandler))
			if err == nil {
				svc.Wait()
				t.Fatal("Start succeeded without an API server")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestConfigKubernetesNeedsNoEtcd(t *testing.T) {
	c := defaults(t)
	c.Backend = BackendKubernetes
	c.DataDir = ""
	c.EtcdDialTimeout = 0
	if err := c.Validate(); err != nil {
		t.Fatalf("DYN_DISCOVERY_BACKEND=kubernetes without etcd settings: %v", err)
	}
}
