package eventbustest_test

import (
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStoppedNATSKeepsItsPort: while a test has its nats-server stopped,
// nobody else can bind its port (other test processes bind 127.0.0.1:0 all
// the time), a connected client reconnects once it is back on that port and
// store, and a server stopped for good gives its port back at the test's
// end (goleak: no holder left).
func TestStoppedNATSKeepsItsPort(t *testing.T) {
	store := t.TempDir()
	ns := eventbustest.StartNATSAt(t, -1, store)
	addr := ns.Addr().String()
	port := ns.Addr().(*net.TCPAddr).Port
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	for range 2 { // a second stop and start on the same port holds it again
		eventbustest.StopNATS(ns)
		// Taken: no port the kernel chooses for another listener lands on it.
		if taken, err := testport.Taken(addr); err != nil || !taken {
			t.Fatalf("the stopped nats-server's address %s is free (%v)", addr, err)
		}
		eventbustest.StopNATS(ns)          // stopping it again does nothing
		time.Sleep(100 * time.Millisecond) // the client meets the held port
		ns = eventbustest.StartNATSAt(t, port, store)
		select {
		case <-reconnected:
		case <-time.After(30 * time.Second):
			t.Fatalf("the client did not reconnect to the nats-server started again on %s", addr)
		}
		if err := nc.Flush(); err != nil {
			t.Fatalf("flush after reconnecting: %v", err)
		}
	}
	eventbustest.StopNATS(ns) // held until the cleanup, which releases it
}

// TestReservedNATSPortIsHeld: a port ReserveNATSPort holds for a nats-server
// to come cannot be bound by anyone else, a client's connection to it is
// not answered (a timeout, retried by the eventbus at startup, where a reset
// may be taken for a TLS refusal), and StartNATSAt takes it over.
func TestReservedNATSPortIsHeld(t *testing.T) {
	port := eventbustest.ReserveNATSPort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("another listener could bind the reserved address %s", addr)
	}
	_, err := nats.Connect("nats://"+addr, nats.Timeout(200*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connect to the reserved port: %v, want an i/o timeout", err)
	}
	ns := eventbustest.StartNATSAt(t, port, t.TempDir())
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatalf("connect to the nats-server started on the reserved port: %v", err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
