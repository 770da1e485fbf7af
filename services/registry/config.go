package registry

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// Discovery backends, chosen by DYN_DISCOVERY_BACKEND.
const (
	BackendKVStore    = "kv_store"
	BackendKubernetes = "kubernetes"
)

// Config is the registry's configuration.
type Config struct {
	Server grpcserver.Config
	// Backend is the discovery backend (DYN_DISCOVERY_BACKEND).
	Backend string
	// EtcdEndpoints is a comma list of etcd client URLs (ETCD_ENDPOINTS);
	// empty starts an embedded single-node etcd under DataDir.
	EtcdEndpoints string
	// EtcdTLS secures the connection to an external etcd: its CA and, for
	// an etcd with --client-cert-auth, the registry's client certificate.
	EtcdTLS tlsconfig.Config
	// EtcdUser and EtcdPassword authenticate to an etcd with auth enabled
	// (etcdctl's --user and --password; EtcdUser may be "name:password").
	EtcdUser, EtcdPassword string
	// EtcdDialTimeout bounds the first connection to etcd.
	EtcdDialTimeout time.Duration
	// StoreTimeout bounds every call the registry makes to its backend, so
	// a caller gets Unavailable within it when etcd does not answer; 0 is
	// DefaultStoreTimeout.
	StoreTimeout time.Duration
	// DataDir holds the embedded etcd's data.
	DataDir string
	// EmbeddedClientURL and EmbeddedPeerURL are where an embedded etcd listens.
	EmbeddedClientURL, EmbeddedPeerURL string

	// Kubeconfig is a kubeconfig file for the kubernetes backend, for
	// development outside a cluster; empty uses the in-cluster config.
	Kubeconfig string
	// KubeNamespace is the namespace of the worker pods; empty is the
	// kubeconfig context's namespace, or in a cluster the registry's own.
	KubeNamespace string
	// KubeEndpointSliceSelector limits the EndpointSlices that decide
	// readiness to those matching this label selector.
	KubeEndpointSliceSelector string
	// KubeDebounce is how long the kubernetes backend gathers changes before
	// it emits them.
	KubeDebounce time.Duration
	// KubeRESTConfig, when set by an embedding program or test, replaces
	// Kubeconfig and the in-cluster config.
	KubeRESTConfig *rest.Config
}

// EnvVars maps flags to the documented environment variables.
var EnvVars = map[string]string{
	"etcd-endpoints":    "ETCD_ENDPOINTS",
	"discovery-backend": "DYN_DISCOVERY_BACKEND",
	// The etcd client settings take etcdctl's variable names.
	"etcd-cert":     "ETCDCTL_CERT",
	"etcd-key":      "ETCDCTL_KEY",
	"etcd-ca":       "ETCDCTL_CACERT",
	"etcd-user":     "ETCDCTL_USER",
	"etcd-password": "ETCDCTL_PASSWORD",
}

// RegisterFlags adds the registry's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Server.RegisterFlags(fs, ":7001", ":9101")
	fs.StringVar(&c.Backend, "discovery-backend", BackendKVStore, "discovery backend: kv_store (etcd) or kubernetes")
	fs.StringVar(&c.EtcdEndpoints, "etcd-endpoints", "", "comma-separated etcd client URLs; empty starts an embedded etcd under --data-dir")
	fs.DurationVar(&c.EtcdDialTimeout, "etcd-dial-timeout", 5*time.Second, "bound on connecting to etcd at start")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", DefaultStoreTimeout, "bound on each call to etcd (or the Kubernetes API): past it the caller gets Unavailable")
	fs.StringVar(&c.DataDir, "data-dir", "switchyard-registry.data", "directory of the embedded etcd's data")
	fs.StringVar(&c.EmbeddedClientURL, "embedded-etcd-client-url", "http://127.0.0.1:2379", "client URL of the embedded etcd")
	fs.StringVar(&c.EmbeddedPeerURL, "embedded-etcd-peer-url", "http://127.0.0.1:2380", "peer URL of the embedded etcd")
	fs.StringVar(&c.EtcdTLS.CertFile, "etcd-cert", "", "client certificate for an external etcd (env ETCDCTL_CERT)")
	fs.StringVar(&c.EtcdTLS.KeyFile, "etcd-key", "", "client key for --etcd-cert (env ETCDCTL_KEY)")
	fs.StringVar(&c.EtcdTLS.CAFile, "etcd-ca", "", "CA bundle that verifies an external etcd (env ETCDCTL_CACERT)")
	fs.StringVar(&c.EtcdUser, "etcd-user", "", "user name, or name:password, for an etcd with auth enabled (env ETCDCTL_USER)")
	fs.StringVar(&c.EtcdPassword, "etcd-password", "", "password of --etcd-user (env ETCDCTL_PASSWORD)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file for the kubernetes backend (development); empty uses the in-cluster config")
	fs.StringVar(&c.KubeNamespace, "kubernetes-namespace", "", "namespace of the worker pods for the kubernetes backend; empty is the kubeconfig's or, in a cluster, the registry's own")
	fs.StringVar(&c.KubeEndpointSliceSelector, "kubernetes-endpointslice-selector", "", "label selector of the EndpointSlices whose ready endpoints count (kubernetes backend); empty takes all in the namespace")
	fs.DurationVar(&c.KubeDebounce, "kubernetes-debounce", 100*time.Millisecond, "how long the kubernetes backend gathers changes before emitting them")
}

// Endpoints splits EtcdEndpoints.
func (c Config) Endpoints() []string {
	var eps []string
	for _, e := range strings.Split(c.EtcdEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// Complete reads the files the settings name (the server's token and TLS
// files, the etcd client's TLS files). Start calls it, then Validate.
func (c *Config) Complete() error {
	if err := c.Server.Complete(); err != nil {
		return err
	}
	if err := c.EtcdTLS.Complete(); err != nil {
		return fmt.Errorf("etcd TLS (--etcd-cert, --etcd-key, --etcd-ca): %w", err)
	}
	return nil
}

// Validate checks the configuration before anything starts; it reads
// nothing and changes nothing.
func (c Config) Validate() error {
	if err := c.Server.Validate(); err != nil {
		return err
	}
	switch c.Backend {
	case BackendKVStore:
	case BackendKubernetes:
		if c.KubeDebounce <= 0 {
			return errors.New("--kubernetes-debounce must be positive")
		}
		if _, err := labels.Parse(c.KubeEndpointSliceSelector); err != nil {
			return fmt.Errorf("invalid --kubernetes-endpointslice-selector %q: %w", c.KubeEndpointSliceSelector, err)
		}
		return nil
	default:
		return fmt.Errorf("invalid DYN_DISCOVERY_BACKEND %q: valid values are %q and %q", c.Backend, BackendKVStore, BackendKubernetes)
	}
	if len(c.Endpoints()) == 0 && c.DataDir == "" {
		return errors.New("--data-dir is required for the embedded etcd (ETCD_ENDPOINTS is empty)")
	}
	if c.EtcdDialTimeout <= 0 {
		return errors.New("--etcd-dial-timeout must be positive")
	}
	if c.StoreTimeout < 0 {
		return errors.New("--store-timeout must not be negative")
	}
	if _, pass := c.etcdCredentials(); c.EtcdUser == "" && c.EtcdPassword != "" || c.EtcdUser != "" && pass == "" {
		return errors.New("--etcd-user (ETCDCTL_USER) needs a password: name:password or --etcd-password (ETCDCTL_PASSWORD)")
	}
	if len(c.Endpoints()) == 0 && (c.EtcdUser != "" || c.EtcdTLS.Enabled()) {
		return errors.New("etcd credentials (--etcd-user, --etcd-cert, --etcd-ca) are set but ETCD_ENDPOINTS is empty: they apply to an external etcd only")
	}
	if err := c.EtcdTLS.Validate(); err != nil {
		return fmt.Errorf("etcd TLS (--etcd-cert, --etcd-key, --etcd-ca): %w", err)
	}
	return nil
}

// etcdCredentials splits --etcd-user as etcdctl does: "name:password", or
// a name with --etcd-password.
func (c Config) etcdCredentials() (user, password string) {
	if name, pass, ok := strings.Cut(c.EtcdUser, ":"); ok && c.EtcdPassword == "" {
		return name, pass
	}
	return c.EtcdUser, c.EtcdPassword
}
