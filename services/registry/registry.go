// Package registry is Switchyard's service discovery: a gRPC service in front
// of etcd that registers worker instances and model cards under leases, serves
// snapshot-then-events watches that survive reconnects and compaction, and
// offers key-value buckets and read/write locks. With no ETCD_ENDPOINTS it runs
// its own single-node etcd, so a laptop needs nothing else.
//
// With DYN_DISCOVERY_BACKEND=kubernetes it needs no etcd at all: KubeBackend
// keeps each worker pod's registrations in a DynamoWorkerMetadata custom
// resource owned by the pod and takes readiness from EndpointSlices, behind
// the same gRPC API (see deploy/kubernetes/README.md).
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// healthKey is read by the health probe every healthInterval.
const (
	healthKey      = "/switchyard/health"
	healthInterval = time.Second
)

// Service is a running registry.
type Service struct {
	log    *slog.Logger
	etcd   *EmbeddedEtcd // nil with external etcd
	cli    *clientv3.Client
	store  Backend
	server *grpcserver.Server
	// probe checks the backend for the health service; nil reports
	// SERVING for as long as the process serves.
	probe func(context.Context) error
	done  chan struct{}
	err   error
}

// Start connects to etcd (starting an embedded one when no endpoints are
// given), binds the gRPC and metrics addresses and serves until ctx ends. It
// returns once the addresses are bound; Wait returns when the service stops.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{log: log, done: make(chan struct{})}
	if cfg.Backend == BackendKubernetes {
		kb, ns, err := startKube(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		s.store = kb
		return s, s.serve(ctx, cfg, "kubernetes_namespace", ns)
	}
	endpoints := cfg.Endpoints()
	if len(endpoints) == 0 {
		dir := filepath.Join(cfg.DataDir, "etcd")
		e, err := StartEmbeddedEtcd(EmbeddedEtcdConfig{Dir: dir, ClientURL: cfg.EmbeddedClientURL, PeerURL: cfg.EmbeddedPeerURL})
		if err != nil {
			return nil, err
		}
		s.etcd = e
		endpoints = e.Endpoints()
		log.Info("ETCD_ENDPOINTS is empty: started an embedded single-node etcd", "dir", dir, "endpoints", endpoints)
	}
	etcdTLS, err := cfg.EtcdTLS.ClientTLS()
	if err != nil {
		s.closeEtcd()
		return nil, err
	}
	user, password := cfg.etcdCredentials()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		Username:             user,
		Password:             password,
		DialTimeout:          cfg.EtcdDialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		TLS:                  etcdTLS,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
			// Reconnect to a restarted etcd within a second, not gRPC's default
			// of up to two minutes: leases (10 s by default) must not expire
			// while the registry waits to redial.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: 2 * time.Second,
			}),
		},
	})
	if err != nil {
		s.closeEtcd()
		return nil, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	s.cli = cli
	pingCtx, cancel := context.WithTimeout(ctx, cfg.EtcdDialTimeout)
	_, err = cli.Status(pingCtx, endpoints[0])
	cancel()
	if err != nil {
		log.Warn("etcd is not answering yet; serving anyway and retrying per request", "endpoints", endpoints, "err", err.Error())
	}
	s.store = NewStore(cli, log)
	s.probe = func(ctx context.Context) error {
		// A linearizable read needs an etcd leader and a quorum: exactly
		// what every write of the registry needs.
		_, err := cli.Get(ctx, healthKey, clientv3.WithCountOnly())
		return err
	}
	return s, s.serve(ctx, cfg, "etcd", endpoints)
}

// serve builds the gRPC server over s.store and serves until ctx ends;
// where and whereVal say which backend state it fronts, for the log.
func (s *Service) serve(ctx context.Context, cfg Config, where string, whereVal any) error {
	cfg.Server.Policy = Policy
	srv, err := grpcserver.New(cfg.Server, s.log)
	if err != nil {
		s.closeBackend()
		return err
	}
	s.server = srv
	if s.probe != nil {
		srv.SetHealthProbe(healthInterval, s.probe)
	}
	m := newMetrics(srv.Registry())
	store := instrument(withDeadline(s.store, cfg.StoreTimeout), m)
	srv.Registry().MustRegister(newInstancesCollector(store))
	registryv1.RegisterRegistryServiceServer(srv.GRPC(), &server{store: store, log: s.log, metrics: m, stopping: srv.Stopping(), watchSlot: srv.WatchSlot})
	if err := srv.Listen(); err != nil {
		s.closeBackend()
		return err
	}
	s.log.Info("registry starting", "backend", cfg.Backend, where, whereVal, "grpc_addr", srv.Addr().String())
	go func() {
		defer close(s.done)
		s.err = srv.Serve(ctx, nil)
		s.closeBackend()
	}()
	return nil
}

// startKube connects to the Kubernetes API (cfg.KubeRESTConfig, else
// --kubeconfig, else the in-cluster config) and starts a KubeBackend on the
// workers' namespace.
func startKube(ctx context.Context, cfg Config, log *slog.Logger) (*KubeBackend, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{})
	rc := cfg.KubeRESTConfig
	if rc == nil {
		var err error
		if rc, err = loader.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("kubernetes backend: no API server config (in-cluster, or --kubeconfig): %w", err)
		}
	}
	ns := cfg.KubeNamespace
	if ns == "" {
		var err error
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubernetes backend: cannot tell the namespace (set --kubernetes-namespace): %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "switchyard-registry"
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes backend: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes backend: %w", err)
	}
	kb, err := NewKubeBackend(ctx, dyn, kube, KubeOptions{
		Namespace: ns, EndpointSliceSelector: cfg.KubeEndpointSliceSelector, Debounce: cfg.KubeDebounce, Log: log,
	})
	if err != nil {
		return nil, "", err
	}
	return kb, ns, nil
}

// Run starts the registry and blocks until ctx ends and it has stopped.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Addr is the bound gRPC address.
func (s *Service) Addr() net.Addr { return s.server.Addr() }

// MetricsAddr is the bound metrics address, or nil.
func (s *Service) MetricsAddr() net.Addr { return s.server.MetricsAddr() }

// Wait blocks until the service has stopped and returns why.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}

func (s *Service) closeBackend() {
	if s.store != nil {
		s.store.Close()
	}
	if s.cli != nil {
		s.cli.Close()
	}
	s.closeEtcd()
}

func (s *Service) closeEtcd() {
	if s.etcd != nil {
		s.etcd.Close()
		s.log.Info("embedded etcd stopped")
	}
}
