package frontend_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/frontend"
)

// clientBound is how long a test client waits for the server to act; the
// server's own bounds in these tests are far shorter.
const clientBound = 30 * time.Second

// dialFrontend opens a raw connection to the stack's frontend.
func (s *stack) dialFrontend(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.fe.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(clientBound)); err != nil {
		t.Fatal(err)
	}
	return c
}

// getLive sends GET /live on c and returns the answer's status.
func getLive(t *testing.T, c net.Conn, r *bufio.Reader) int {
	t.Helper()
	if _, err := io.WriteString(c, "GET /live HTTP/1.1\r\nHost: fe\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitClosed reads c until the server closes it and returns what it read;
// it fails the test when the client's own bound passes first.
func waitClosed(t *testing.T, c net.Conn, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open past %s (read %q)", clientBound, b)
	}
	return string(b)
}

// TestHTTPServerTimeouts checks the HTTP server's time bounds: a client
// that sends half a body and goes quiet is answered 408 and cut off, one
// that sends half its headers is cut off, and an idle keep-alive
// connection is closed.
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{configure: func(c *frontend.Config) {
		c.HTTPReadTimeout, c.HTTPIdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	}})

	t.Run("half a body", func(t *testing.T) {
		c := s.dialFrontend(t)
		body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`
		if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: fe\r\nContent-Type: application/json\r\nContent-Length: "+
			strings.TrimSpace(strings.Repeat(" ", 0))+"100\r\n\r\n"+body[:len(body)/2]); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("no answer to a half body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"request_timeout"`) {
			t.Fatalf("half a body: %d %s, want 408 request_timeout", resp.StatusCode, b)
		}
		waitClosed(t, c, r)
	})

	t.Run("half the headers", func(t *testing.T) {
		c := s.dialFrontend(t)
		if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: fe\r\n"); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, c, c)
	})

	t.Run("idle", func(t *testing.T) {
		c := s.dialFrontend(t)
		r := bufio.NewReader(c)
		if code := getLive(t, c, r); code != 200 {
			t.Fatalf("GET /live: %d", code)
		}
		if rest := waitClosed(t, c, r); rest != "" {
			t.Fatalf("after the answer the server sent %q", rest)
		}
	})

}

// TestConnsPerClient checks --max-conns-per-client: at the limit every
// connection of a client address is served, one more is answered 429 and
// closed.
func TestConnsPerClient(t *testing.T) {
	t.Parallel()
	const maxConns = 3
	s := startStack(t, stackOpts{configure: func(c *frontend.Config) { c.MaxConnsPerClient = maxConns }})
	// The stack's own client's connections count too: closed here, they
	// leave once the server has seen them go, so each place is taken by
	// a connection that was served.
	s.http.CloseIdleConnections()
	deadline := time.Now().Add(clientBound)
	for range maxConns {
		for {
			c := s.dialFrontend(t)
			r := bufio.NewReader(c)
			_, _ = io.WriteString(c, "GET /live HTTP/1.1\r\nHost: fe\r\n\r\n")
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("connections within the limit are refused: %d", resp.StatusCode)
			}
		}
	}
	// maxConns connections are open and served: one more is refused.
	c := s.dialFrontend(t)
	r := bufio.NewReader(c)
	_, _ = io.WriteString(c, "GET /live HTTP/1.1\r\nHost: fe\r\n\r\n")
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer past the limit: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"too_many_connections"`) {
		t.Fatalf("past the limit: %d %s, want 429 too_many_connections", resp.StatusCode, b)
	}
	waitClosed(t, c, r)
}
