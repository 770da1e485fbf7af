// Package eventbustest starts an embedded nats-server with JetStream and a
// running eventbus for other packages' tests. Every helper takes a
// testing.TB and stops what it started in t.Cleanup.
package eventbustest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
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

// StartNATSAt starts a nats-server with JetStream on port (-1: a port of
// the test's own) storing under storeDir; restarting on the same port and
// store dir brings back the same streams. It is shut down in t.Cleanup
// unless the test did it first (StopNATS). A port it chose is the test's
// for its whole life (testport.Shareable): while the server is stopped, and
// after, no port another test binds on 127.0.0.1:0 lands on it, so a client
// reconnecting to this server is refused rather than answered by another
// test's. A port ReserveNATSPort holds is given back the moment before the
// server binds it.
func StartNATSAt(t testing.TB, port int, storeDir string) *natsserver.Server {
	t.Helper()
	if port > 0 {
		reserved.release(port)
	} else {
		port = shareablePort(t)
	}
	ns, err := eventbus.StartEmbeddedNATS(storeDir, port, Logger())
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() { StopNATS(ns) })
	return ns
}

// shareablePort is a testport.Shareable port, as a number.
func shareablePort(t testing.TB) int {
	t.Helper()
	_, p, err := net.SplitHostPort(testport.Shareable(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// StartNATSWithOptions starts a nats-server with a test's own options (an
// authorization the eventbus must meet, say) on opts.Port, taking it over
// from ReserveNATSPort as StartNATSAt does (-1: a port of the test's own,
// as there), and waits until it takes connections. It is shut down in
// t.Cleanup unless the test did it first.
func StartNATSWithOptions(t testing.TB, opts *natsserver.Options) *natsserver.Server {
	t.Helper()
	if opts.Port > 0 {
		reserved.release(opts.Port)
	} else if opts.Port == natsserver.RANDOM_PORT {
		opts.Port = shareablePort(t)
	}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		t.Fatalf("nats-server on port %d not ready after 30s", opts.Port)
	}
	t.Cleanup(func() { StopNATS(ns) })
	return ns
}

// StopNATS shuts a nats-server down and waits until it has. Stopping one
// that is already stopped does nothing.
func StopNATS(ns *natsserver.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}

// reserved are the ports ReserveNATSPort holds for a nats-server to come.
var reserved = &natsPorts{held: map[int]releaser{}}

type natsPorts struct {
	mu   sync.Mutex
	held map[int]releaser
}

// releaser is a held port: Release gives it back.
type releaser interface{ Release() }

// ReserveNATSPort holds a free loopback port for a nats-server that the test
// starts later there with StartNATSAt, which takes it over, so that no other
// test process binds it meanwhile. Until then the port takes connections and
// says nothing, as a NATS server that does not answer yet: a client's
// connect times out, which the eventbus retries at startup. (A reset, as
// testport gives, may reach nats.go after its dial, as a reset of the
// handshake, and the eventbus takes that for a TLS refusal: not retried.)
// Connections it took stay silent until their clients give up, also after
// the server has the port; the test's cleanup closes what is left. The port
// stays the test's after the server stops too (testport.Shareable).
func ReserveNATSPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", testport.Shareable(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &silentPort{ln: ln, conns: map[net.Conn]struct{}{}, accepted: make(chan struct{})}
	go p.accept()
	port := ln.Addr().(*net.TCPAddr).Port
	reserved.mu.Lock()
	reserved.held[port] = p
	reserved.mu.Unlock()
	t.Cleanup(func() {
		reserved.release(port)
		p.closeAll()
	})
	return port
}

// silentPort is ReserveNATSPort's holder.
type silentPort struct {
	ln       net.Listener
	accepted chan struct{} // closed when the accept loop ends
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func (p *silentPort) accept() {
	defer close(p.accepted)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(io.Discard, c) // until the client closes it
			c.Close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}

// Release unbinds the port; the connections it took stay open.
func (p *silentPort) Release() {
	p.ln.Close()
	<-p.accepted
}

// closeAll releases the port and closes every connection it took.
func (p *silentPort) closeAll() {
	p.Release()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
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
	// An address testport reserved stays the test's: serve on it. A port of
	// the kernel's choice is the test's for its whole life too
	// (testport.Shareable), so that a client still dialling a stopped
	// eventbus is refused rather than answered by another test's.
	if p, ok := testport.Held(cfg.Server.GRPCAddr); ok {
		cfg.Server.Listener = p.Listener()
	} else if cfg.Server.GRPCAddr == "127.0.0.1:0" && cfg.Server.Listener == nil {
		cfg.Server.GRPCAddr = testport.Shareable(t)
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
func Client(t testing.TB, addrs ...string) *eventbusclient.Client {
	t.Helper()
	c, err := eventbusclient.Dial(addrs, eventbusclient.Options{Log: Logger(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("dial eventbus: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func eventbusServerConfig() grpcserver.Config {
	return grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}
}
