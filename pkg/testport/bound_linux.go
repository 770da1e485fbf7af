package testport

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// Refusing is a loopback address that refuses every connection for the
// whole test: a TCP socket bound to it that never listens. Linux answers a
// connection to a bound port nobody listens on with a reset at connect, as
// for a port nobody holds (ECONNREFUSED: a client sees "connection
// refused", not a reset after its dial as a Port gives), and no other
// socket can bind it meanwhile (the bound socket does not set SO_REUSEADDR).
// A port taken from 127.0.0.1:0 and closed again, the old way to get a
// refusing address, can become another test process's listener before the
// test dials it.
func Refusing(t testing.TB) string {
	t.Helper()
	return bind(t, false)
}

// Shareable is a loopback address held for the test by a socket bound with
// SO_REUSEADDR that never listens: connections to it are refused, ports
// the kernel chooses for 127.0.0.1:0 never land on it, and yet a server
// that binds it with SO_REUSEADDR, as Go's net.Listen does (in this process
// or in a child), can listen there. Linux lets such sockets share a port as
// long as at most one of them listens. When that server closes, the port
// is held again, refusing. Use it where the address must be handed to code
// that binds it itself (a child process, a Start that takes an address,
// another library's listener) instead of a port freed and bound later.
func Shareable(t testing.TB) string {
	t.Helper()
	return bind(t, true)
}

// ShareablePorts is n distinct Shareable ports, as numbers (for a child
// process's flags).
func ShareablePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		_, p, err := net.SplitHostPort(Shareable(t))
		if err != nil {
			t.Fatal(err)
		}
		if ports[i], err = strconv.Atoi(p); err != nil {
			t.Fatal(err)
		}
	}
	return ports
}

// Taken reports whether addr is held: a socket that does not share ports
// (no SO_REUSEADDR, as the kernel's choice of a port for 127.0.0.1:0 does
// not) cannot bind it. A Shareable port is taken for the whole test, while
// its server runs and after it stops; a port freed by a server bound on
// 127.0.0.1:0 is not.
func Taken(addr string) (bool, error) {
	a, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return false, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer syscall.Close(fd)
	switch err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: a.Port, Addr: [4]byte(a.IP.To4())}); err {
	case nil:
		return false, nil
	case syscall.EADDRINUSE:
		return true, nil
	default:
		return false, err
	}
}

func bind(t testing.TB, reuse bool) string {
	t.Helper()
	// SOCK_CLOEXEC: a child process must not inherit the hold.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testport: socket: %v", err)
	}
	if reuse {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			syscall.Close(fd)
			t.Fatalf("testport: SO_REUSEADDR: %v", err)
		}
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatalf("testport: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatalf("testport: getsockname: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// ChildPort is a loopback address held for a child process by a socket bound
// with SO_REUSEADDR that never listens (Shareable, for a command rather
// than a test): ports the kernel chooses for 127.0.0.1:0 never land on it, so
// no other process takes it between here and the child's bind, and the
// child's net.Listen (SO_REUSEADDR, as Go's) can listen there, since Linux
// lets such sockets share a port while at most one listens. A port freed
// and bound later could become another process's listener meanwhile.
// release closes the hold.
func ChildPort() (addr string, release func(), err error) {
	// SOCK_CLOEXEC: the child must not inherit the hold.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return "", nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)), func() { syscall.Close(fd) }, nil
}
