// Package eventbustest starts an embedded nats-server with JetStream and a
// running eventbus for other packages' tests. Every helper takes a
// testing.TB and stops what it started in t.Cleanup.
package eventbustest

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	busclient "github.com/switchyard-llm/switchyard/pkg/eventbus"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

// Logger is the logger the helpers give the services: discarded unless
// SWITCHYARD_TEST_LOG is set, then text on stderr.
func Logger() *slog.Logger {
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// StartNATS starts a nats-server with JetStream on a free port, storing under
// t.TempDir(). It is shut down (and waited for) in t.Cleanup.
func StartNATS(t testing.TB) *natsserver.Server {
	t.Helper()
	return StartNATSAt(t, -1, t.TempDir())
}

// StartNATSAt starts a nats-server with JetStream on port (-1: a free one)
// storing under storeDir; restarting on the same port and store dir brings
// back the same streams. It is shut down in t.Cleanup unless the test did it
// first (StopNATS). While StopNATS has it stopped, its port stays held (see
// testport.Port) until a StartNATSAt on it or the test's end: nats-server
// takes no listener, so the port is given back the moment before it
// binds, and meanwhile no other test process can take it.
func StartNATSAt(t testing.TB, port int, storeDir string) *natsserver.Server {
	t.Helper()
	if port > 0 {
		stopped.release(port)
	}
	ns, err := eventbus.StartEmbeddedNATS(storeDir, port, Logger())
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	port = ns.Addr().(*net.TCPAddr).Port
	stopped.started(ns, port)
	t.Cleanup(func() {
		StopNATS(ns)
		stopped.release(port)
	})
	return ns
}

// StopNATS shuts a nats-server down and waits until it has. Stopping one
// that is already stopped does nothing. The port of one StartNATSAt started
// stays held until it starts again there.
func StopNATS(ns *natsserver.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
	stopped.hold(ns)
}

// stopped holds the ports of the nats-servers StartNATSAt started and
// StopNATS stopped.
var stopped = &natsPorts{running: map[*natsserver.Server]int{}, held: map[int]*testport.Port{}}

type natsPorts struct {
	mu      sync.Mutex
	running map[*natsserver.Server]int
	held    map[int]*testport.Port
}

func (n *natsPorts) started(ns *natsserver.Server, port int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.running[ns] = port
}

// hold binds a stopped server's port, if StartNATSAt started it; a port it
// cannot bind (not to happen: the server has closed its listener) is left
// free, as before ports were held.
func (n *natsPorts) hold(ns *natsserver.Server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	port, ok := n.running[ns]
	if !ok {
		return
	}
	delete(n.running, ns)
	if p, err := testport.Hold(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		n.held[port] = p
	}
}

func (n *natsPorts) release(port int) {
	n.mu.Lock()
	p := n.held[port]
	delete(n.held, port)
	n.mu.Unlock()
	if p != nil {
		p.Release()
	}
}

// Config is an eventbus configuration for tests: gRPC on 127.0.0.1:0, no
// metrics endpoint, the given NATS URL.
func Config(natsURL string) eventbus.Config {
	return eventbus.Config{
		Server:       eventbusServerConfig(),
		NATSServer:   natsURL,
		StreamMaxAge: time.Hour,
	}
}

// StartEventbus starts an eventbus with cfg and stops it in t.Cleanup.
func StartEventbus(t testing.TB, cfg eventbus.Config) *eventbus.Service {
	t.Helper()
	// An address testport reserved stays the test's: serve on it.
	if p, ok := testport.Held(cfg.Server.GRPCAddr); ok {
		cfg.Server.Listener = p.Listener()
	}
	svc, err := eventbus.Start(context.Background(), cfg, Logger())
	if err != nil {
		t.Fatalf("start eventbus: %v", err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Errorf("eventbus stopped with: %v", err)
		}
	})
	return svc
}

// Start starts a nats-server and an eventbus in front of it.
func Start(t testing.TB) (*natsserver.Server, *eventbus.Service) {
	t.Helper()
	ns := StartNATS(t)
	return ns, StartEventbus(t, Config(ns.ClientURL()))
}

// Client dials the eventbus replicas at addrs and closes the client in
// t.Cleanup.
func Client(t testing.TB, addrs ...string) *busclient.Client {
	t.Helper()
	c, err := busclient.Dial(addrs, busclient.Options{Log: Logger(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("dial eventbus: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func eventbusServerConfig() grpcserver.Config {
	return grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}
}
