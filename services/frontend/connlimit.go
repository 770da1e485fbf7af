package frontend

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// refuseTimeout bounds answering and closing a connection over its
// client's limit, so that a client that does not read cannot hold the
// refusal open.
const refuseTimeout = time.Second

// refusal is what a connection over its client's limit reads before it is
// closed: a complete HTTP/1.1 answer, 429 with OpenAI's error body.
var refusal = func() []byte {
	body := `{"error":{"message":"too many open connections from this address","type":"rate_limit_error","param":null,"code":"too_many_connections"}}` + "\n"
	return []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// connLimiter is a listener that lets each client address (the IP, any
// port) hold at most max connections at once. A connection past it is
// answered 429 and closed without reaching the HTTP server.
type connLimiter struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[string]int
}

func limitConns(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return &connLimiter{Listener: ln, max: max, open: map[string]int{}}
}

// Accept returns the next connection within its client's limit.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := clientHost(c.RemoteAddr())
		l.mu.Lock()
		if l.open[host] >= l.max {
			l.mu.Unlock()
			go refuse(c)
			continue
		}
		l.open[host]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, host: host}, nil
	}
}

func (l *connLimiter) release(host string) {
	l.mu.Lock()
	if l.open[host]--; l.open[host] <= 0 {
		delete(l.open, host)
	}
	l.mu.Unlock()
}

// clientHost is the address a connection counts against: its IP.
func clientHost(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// refuse answers c with the refusal and closes it. What the client sent is
// read (up to the deadline) after the answer, so that the close does not
// reset the connection before the client has read it.
func refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseTimeout))
	if _, err := c.Write(refusal); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	var buf [512]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// limitedConn gives its place back when closed (once).
type limitedConn struct {
	net.Conn
	l    *connLimiter
	host string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.host) })
	return err
}
