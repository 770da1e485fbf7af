// Package registrytest starts real etcd and registry processes in process for
// other packages' tests.
package registrytest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/registry"
)

// Etcd is an embedded single-node etcd that a test can stop and restart on
// the same data directory and port.
type Etcd struct {
	t          testing.TB
	dir        string
	clientURL  string
	peerURL    string
	etcd       *registry.EmbeddedEtcd
	Endpoints  []string
	ClientPort int
}

// StartEtcd starts an embedded etcd for the test and stops it at cleanup.
// Its two ports are the test's for its whole life (testport.Shareable):
// etcd listens on them while it runs, and while it is stopped and after, no
// port another test binds on 127.0.0.1:0 lands on them, so a client of this
// etcd is refused rather than answered by another test's etcd.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	e := &Etcd{t: t, dir: t.TempDir()}
	client := testport.Shareable(t)
	_, port, _ := net.SplitHostPort(client)
	e.ClientPort, _ = strconv.Atoi(port)
	e.clientURL = "http://" + client
	e.peerURL = "http://" + testport.Shareable(t)
	e.Start()
	t.Cleanup(e.Stop)
	return e
}

// Start starts (or restarts) etcd on the same directory and ports.
func (e *Etcd) Start() {
	e.t.Helper()
	var err error
	for range 50 { // the old listener's port may take a moment to free
		e.etcd, err = registry.StartEmbeddedEtcd(registry.EmbeddedEtcdConfig{Dir: e.dir, ClientURL: e.clientURL, PeerURL: e.peerURL, Fast: true})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("start embedded etcd: %v", err)
	}
	e.Endpoints = e.etcd.Endpoints()
}

// RevokeLease revokes a lease in etcd itself, as an operator fencing a
// worker would: the registry's API lets only the lease's holder (or an admin
// token) end it. A lease etcd has already expired counts as revoked: a test
// that stopped the registry past the lease's TTL races etcd's own expiry.
func (e *Etcd) RevokeLease(ctx context.Context, id uint64) {
	e.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		e.t.Fatalf("revoke lease %x: %v", id, err)
	}
}

// Stop stops etcd; Start brings it back with its data. Meanwhile its ports
// stay the test's (connections to them are refused, as by a closed port).
// It is idempotent.
func (e *Etcd) Stop() {
	if e.etcd == nil {
		return
	}
	e.etcd.Close()
	e.etcd = nil
}

// Registry is a registry service running in the test process.
type Registry struct {
	*registry.Service
	cancel context.CancelFunc
	// Addr is the registry's gRPC address, host:port.
	Addr string
}

// StartRegistry runs a registry against etcd endpoints until Stop or test
// cleanup.
func StartRegistry(t testing.TB, endpoints []string) *Registry {
	t.Helper()
	return StartRegistryAt(t, endpoints, "127.0.0.1:0")
}

// StartRegistryAt is StartRegistry listening on addr, such as the address a
// stopped registry had, so that clients dialled to it find it again. A
// registry this package started holds its address for the rest of the test
// (see testport.Port), so a registry started again on it takes it over.
func StartRegistryAt(t testing.TB, endpoints []string, addr string) *Registry {
	t.Helper()
	return startRegistry(t, endpoints, addr, Logger())
}

func startRegistry(t testing.TB, endpoints []string, addr string, log *slog.Logger) *Registry {
	t.Helper()
	port, held := testport.Held(addr)
	if !held && strings.HasSuffix(addr, ":0") {
		port = testport.Reserve(t)
	}
	cfg := registry.Config{
		Server:          grpcserver.Config{GRPCAddr: addr, ShutdownTimeout: 2 * time.Second},
		Backend:         registry.BackendKVStore,
		EtcdDialTimeout: 5 * time.Second,
	}
	for i, ep := range endpoints {
		if i > 0 {
			cfg.EtcdEndpoints += ","
		}
		cfg.EtcdEndpoints += ep
	}
	var svc *registry.Service
	var cancel context.CancelFunc
	var err error
	for range 50 { // a stopped registry's port may take a moment to free
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		if port != nil {
			cfg.Server.GRPCAddr, cfg.Server.Listener = port.Addr(), port.Listener()
		}
		svc, err = registry.Start(ctx, cfg, log)
		if err == nil {
			break
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	r := &Registry{Service: svc, cancel: cancel, Addr: svc.Addr().String()}
	t.Cleanup(r.Stop)
	return r
}

// Stop shuts the registry down and waits for it. It is idempotent.
func (r *Registry) Stop() {
	r.cancel()
	if err := r.Wait(); err != nil {
		panic("registry stopped with error: " + err.Error())
	}
}

// Start runs etcd and one registry on it; the common case.
func Start(t testing.TB) (*Etcd, *Registry) {
	t.Helper()
	e := StartEtcd(t)
	return e, StartRegistry(t, e.Endpoints)
}

// StartLogged is Start with the registry logging to log, such as a
// pkg/testlog logger that shows the registry's lines beside the other
// services' when the test fails.
func StartLogged(t testing.TB, log *slog.Logger) (*Etcd, *Registry) {
	t.Helper()
	e := StartEtcd(t)
	return e, startRegistry(t, e.Endpoints, "127.0.0.1:0", log.With("service", "registry"))
}

// Logger is the logger the helpers give the registry: discarded unless
// SWITCHYARD_TEST_LOG is set, then text on stderr (as eventbustest.Logger).
func Logger() *slog.Logger {
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("service", "registry")
	}
	return slog.New(slog.DiscardHandler)
}
