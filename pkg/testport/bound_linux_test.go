package testport_test

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/testport"
)

// bindPlain binds addr without SO_REUSEADDR, as a process that does not
// share ports would, and reports the error.
func bindPlain(t *testing.T, addr string) error {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: a.Port, Addr: [4]byte(a.IP.To4())})
}

// TestRefusingHoldsThePort: a Refusing address refuses connections at
// connect (ECONNREFUSED, as a closed port), and nothing else can bind it
// while the test runs: neither net.Listen (SO_REUSEADDR) nor a plain bind.
// A port taken from 127.0.0.1:0 and closed again, what the eventbus
// startup tests used, fails the last two.
func TestRefusingHoldsThePort(t *testing.T) {
	addr := testport.Refusing(t)
	for range 2 {
		if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s = %v; want connection refused", addr, err)
		}
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("net.Listen(%s) succeeded on a held port", addr)
	}
	if err := bindPlain(t, addr); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind(%s) = %v; want address in use", addr, err)
	}
}

// TestShareableLetsOneServerListen: a Shareable address refuses
// connections until a server listens on it with net.Listen, serves that
// server, admits no second listener meanwhile, and refuses again once the
// server closes; a socket without SO_REUSEADDR never binds it. (A freed
// port fails the plain bind, and a second server could take it.)
func TestShareableLetsOneServerListen(t *testing.T) {
	addr := testport.Shareable(t)
	for i := range 2 {
		if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("round %d: dial %s before a server = %v; want connection refused", i, addr, err)
		}
		if err := bindPlain(t, addr); !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("round %d: bind(%s) = %v; want address in use", i, addr, err)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("round %d: a server cannot listen on the shareable %s: %v", i, addr, err)
		}
		done := serve(l)
		if err := dial(t, addr); err != nil {
			t.Fatalf("round %d: the server did not answer: %v", i, err)
		}
		if l2, err := net.Listen("tcp", addr); err == nil {
			l2.Close()
			t.Fatalf("round %d: a second server listened on %s beside the first", i, addr)
		}
		l.Close()
		<-done
	}
	if got := testport.ShareablePorts(t, 3); len(got) != 3 || got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("ShareablePorts(3) = %v; want 3 distinct ports", got)
	}
}

// TestTaken: a Shareable port is taken before, while and after a server
// listens there; a port a listener on 127.0.0.1:0 had and closed is not.
func TestTaken(t *testing.T) {
	taken := func(addr string) bool {
		t.Helper()
		ok, err := testport.Taken(addr)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	addr := testport.Shareable(t)
	if !taken(addr) {
		t.Fatalf("Shareable %s not taken", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if !taken(addr) {
		t.Fatalf("Shareable %s with a server not taken", addr)
	}
	l.Close()
	if !taken(addr) {
		t.Fatalf("Shareable %s not taken once its server closed", addr)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !taken(free.Addr().String()) {
		t.Fatalf("a listening port is not taken")
	}
	free.Close()
	if taken(free.Addr().String()) {
		t.Fatalf("a closed 127.0.0.1:0 port %s is taken", free.Addr())
	}
}
