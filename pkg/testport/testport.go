// Package testport holds loopback TCP ports for tests, so that a service a
// test stops, or starts late, keeps its address meanwhile.
package testport

import (
	"net"
	"sync"
	"testing"
)

// Port is a loopback TCP port that a test holds for its whole life, so that a
// service it stops keeps its address until it starts again there. Tests of
// other packages run in parallel and bind 127.0.0.1:0 all the time: a port
// released for the length of an outage can become theirs. CI saw it: while a
// test's registry was stopped, another test process's registry got its port,
// and the Node worker's next keep-alive was answered by that registry (on
// another etcd): "the registry no longer has lease", a re-registration
// there, and a test waiting for a log line that never came.
//
// While no server takes connections from it (between a Stop and the next
// start, or before the first), a Port resets every connection at once, as a
// closed port refuses one: a client sees the service away, not a hang.
type Port struct {
	ln net.Listener

	mu   sync.Mutex
	view *portView // the listener a server accepts from now, nil when none
	done chan struct{}
}

// Reserve binds a loopback port for the test and releases it at cleanup.
// Until then Held finds it by its address: a test helper that starts a
// service on that address serves on the Port's Listener.
func Reserve(t testing.TB) *Port {
	t.Helper()
	p, err := Hold("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ports.Store(p.Addr(), p)
	t.Cleanup(func() {
		ports.CompareAndDelete(p.Addr(), p)
		p.Release()
	})
	return p
}

// Held is the reserved Port at addr, if any.
func Held(addr string) (*Port, bool) {
	v, ok := ports.Load(addr)
	if !ok {
		return nil, false
	}
	return v.(*Port), true
}

// Hold binds addr and holds it until Release; it is not found by Held.
func Hold(addr string) (*Port, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Port{ln: ln, done: make(chan struct{})}
	go p.accept()
	return p, nil
}

// Release unbinds the port and waits for its accept loop.
func (p *Port) Release() {
	p.ln.Close()
	<-p.done
}

// Addr is the port's address, host:port.
func (p *Port) Addr() string { return p.ln.Addr().String() }

// Listener is a listener for one server on the port. Closing it (the server
// does when it stops) gives the port back to the Port, which holds it again.
// One server at a time: a second Listener replaces the first.
func (p *Port) Listener() net.Listener {
	v := &portView{p: p, conns: make(chan net.Conn), closed: make(chan struct{})}
	p.mu.Lock()
	old := p.view
	p.view = v
	p.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return v
}

func (p *Port) accept() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			v := p.view
			p.mu.Unlock()
			if v != nil {
				v.Close()
			}
			return
		}
		p.mu.Lock()
		v := p.view
		p.mu.Unlock()
		if v == nil {
			refuse(c)
			continue
		}
		select {
		case v.conns <- c:
		case <-v.closed:
			refuse(c)
		}
	}
}

// refuse resets a connection (SO_LINGER 0), the nearest a listening port
// gets to a refused one.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// portView is the net.Listener one server accepts from.
type portView struct {
	p      *Port
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (v *portView) Accept() (net.Conn, error) {
	select {
	case c := <-v.conns:
		return c, nil
	case <-v.closed:
		return nil, net.ErrClosed
	}
}

func (v *portView) Close() error {
	first := false
	v.once.Do(func() {
		first = true
		close(v.closed)
		v.p.mu.Lock()
		if v.p.view == v {
			v.p.view = nil
		}
		v.p.mu.Unlock()
	})
	if !first {
		return net.ErrClosed
	}
	return nil
}

func (v *portView) Addr() net.Addr { return v.p.ln.Addr() }

// ports are the reserved Ports of running tests by address.
var ports sync.Map // string -> *Port
