//go:build !linux

package registrybench

import "net"

// holdPort is a loopback address for a child registry. Off Linux it is a
// port taken and closed again, which another process can take before the
// child binds it (see the Linux version).
func holdPort() (addr string, release func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	l.Close()
	return addr, func() {}, nil
}
