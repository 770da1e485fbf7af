package testport_test

import (
	"errors"
	"io"
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/pkg/testport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve answers one byte on every connection until l closes.
func serve(l net.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				done <- err
				return
			}
			_, _ = c.Write([]byte{1})
			c.Close()
		}
	}()
	return done
}

// dial reads what the port answers: one byte from a server, or an error
// (reset) while the Port holds it.
func dial(t *testing.T, addr string) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	return nil
}

// TestPortOutlivesItsServers: a reserved port serves each server handed its
// Listener in turn, refuses connections between them, and is never free for
// another listener while the test runs.
func TestPortOutlivesItsServers(t *testing.T) {
	p := testport.Reserve(t)
	if got, ok := testport.Held(p.Addr()); !ok || got != p {
		t.Fatalf("Held(%s) = %v, %v; want the reserved port", p.Addr(), got, ok)
	}
	if err := dial(t, p.Addr()); err == nil {
		t.Error("a connection before any server was answered; want it refused")
	}
	for i := range 2 {
		l := p.Listener()
		if l.Addr().String() != p.Addr() {
			t.Fatalf("listener address %s; want %s", l.Addr(), p.Addr())
		}
		done := serve(l)
		if err := dial(t, p.Addr()); err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		l.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close = %v; want net.ErrClosed", err)
		}
		if err := l.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close = %v; want net.ErrClosed", err)
		}
		if err := dial(t, p.Addr()); err == nil {
			t.Errorf("a connection after server %d stopped was answered; want it refused", i)
		}
		if l, err := net.Listen("tcp", p.Addr()); err == nil {
			l.Close()
			t.Fatalf("another listener bound the held port %s", p.Addr())
		}
	}
}
