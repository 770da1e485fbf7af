package registrybench

import (
	"net"
	"strconv"
	"syscall"
)

// holdPort is a loopback address held for a child registry by a socket
// bound with SO_REUSEADDR that never listens (pkg/testport.Shareable, for a
// command): ports the kernel chooses for 127.0.0.1:0 never land on it, so
// no other process takes it between here and the child's bind, and the
// child's net.Listen (SO_REUSEADDR, as Go's) can listen there, since Linux
// lets such sockets share a port while at most one listens. A port freed
// and bound later could become another process's listener meanwhile.
// release closes the hold.
func holdPort() (addr string, release func(), err error) {
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
