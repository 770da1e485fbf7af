//go:build !linux

package testport

import (
	"net"
	"strconv"
	"testing"
)

// Refusing is a loopback address nothing listens on. Off Linux it is a port
// taken and closed again, which another process can take meanwhile (see the
// Linux version).
func Refusing(t testing.TB) string {
	t.Helper()
	return freed(t)
}

// Shareable is a loopback address a server can bind. Off Linux it is a port
// taken and closed again (see the Linux version).
func Shareable(t testing.TB) string {
	t.Helper()
	return freed(t)
}

// ShareablePorts is n distinct Shareable ports, as numbers.
func ShareablePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// Taken reports whether addr is held: nothing else can listen there.
func Taken(addr string) (bool, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return true, nil
	}
	return false, l.Close()
}

func freed(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}

// ChildPort is a loopback address for a child process. Off Linux it is a
// port taken and closed again, which another process can take before the
// child binds it (see the Linux version).
func ChildPort() (addr string, release func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	l.Close()
	return addr, func() {}, nil
}
