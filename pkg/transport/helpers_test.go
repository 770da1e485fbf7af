package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/pkg/testport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testMaxSize keeps max+1 payloads cheap; it is above 1 MiB so the 1 MiB
// case fits in every plane.
const testMaxSize = 2 << 20

// runNATS starts an embedded nats-server and returns its URL.
func runNATS(tb testing.TB) string {
	tb.Helper()
	opts := &natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 4 << 20}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		tb.Fatalf("nats-server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		tb.Fatal("nats-server not ready")
	}
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.ClientURL()
}

// testConfig returns a loopback configuration for plane.
func testConfig(tb testing.TB, plane Plane) Config {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Plane = plane
	cfg.TCP.Host = "127.0.0.1"
	cfg.Limits.MaxMessageSize = testMaxSize
	cfg.Limits.RequestTimeout = 10 * time.Second
	cfg.HTTP.Host = "127.0.0.1"
	cfg.HTTP.Port = 0
	cfg.NATS.HeartbeatInterval = 500 * time.Millisecond
	if plane == PlaneNATS {
		cfg.NATS.URL = runNATS(tb)
	}
	return cfg
}

// testServer starts a server with the test handlers and registers Close.
func testServer(tb testing.TB, cfg Config, th *testHandlers) Server {
	tb.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	th.register(s)
	if err := s.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func testClient(tb testing.TB, cfg Config) Client {
	tb.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// testHandlers are the endpoints every plane's tests call.
type testHandlers struct {
	started  chan string   // "block" and "slow" report their start
	ctxEnded chan error    // "block" reports its context's end
	release  chan struct{} // "slow" waits for it
	sendErr  chan error    // "oversize" reports what Send returned
}

func newTestHandlers() *testHandlers {
	return &testHandlers{
		started:  make(chan string, 1024),
		ctxEnded: make(chan error, 1024),
		release:  make(chan struct{}),
		sendErr:  make(chan error, 16),
	}
}

func (th *testHandlers) register(s Server) {
	// echo answers once with the request id header and the payload.
	s.Handle("echo", func(ctx context.Context, req *Request, w ResponseWriter) error {
		return w.Send(append([]byte(req.Headers[HeaderRequestID]+":"), req.Payload...))
	})
	// headers answers once with the request's headers as sorted k=v lines.
	s.Handle("headers", func(ctx context.Context, req *Request, w ResponseWriter) error {
		lines := make([]string, 0, len(req.Headers))
		for k, v := range req.Headers {
			lines = append(lines, k+"="+v)
		}
		slices.Sort(lines)
		return w.Send([]byte(strings.Join(lines, "\n")))
	})
	// stream sends n responses of size bytes, each starting with its index.
	s.Handle("stream", func(ctx context.Context, req *Request, w ResponseWriter) error {
		n, size := decodeStreamReq(req.Payload)
		buf := make([]byte, size)
		for i := range n {
			binary.BigEndian.PutUint32(buf, uint32(i))
			if err := w.Send(buf); err != nil {
				return err
			}
		}
		return nil
	})
	// block sends one response, then waits for its context to end.
	s.Handle("block", func(ctx context.Context, req *Request, w ResponseWriter) error {
		th.started <- "block"
		if err := w.Send([]byte("first")); err != nil {
			return err
		}
		<-ctx.Done()
		th.ctxEnded <- ctx.Err()
		return ctx.Err()
	})
	// slow waits for release, then answers once.
	s.Handle("slow", func(ctx context.Context, req *Request, w ResponseWriter) error {
		th.started <- "slow"
		select {
		case <-th.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return w.Send([]byte("done"))
	})
	// oversize tries to send one byte over the limit.
	s.Handle("oversize", func(ctx context.Context, req *Request, w ResponseWriter) error {
		err := w.Send(make([]byte, testMaxSize+1))
		th.sendErr <- err
		return err
	})
	// fail returns a handler error.
	s.Handle("fail", func(ctx context.Context, req *Request, w ResponseWriter) error {
		return &HandlerError{Code: "invalid_argument", Message: "bad prompt"}
	})
}

func encodeStreamReq(n, size int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	return binary.BigEndian.AppendUint32(b, uint32(size))
}

func decodeStreamReq(p []byte) (n, size int) {
	if len(p) < 8 {
		return 0, 4
	}
	n, size = int(binary.BigEndian.Uint32(p)), int(binary.BigEndian.Uint32(p[4:]))
	return n, max(size, 4)
}

// recvAll reads a stream to its end and returns the payloads.
func recvAll(s Stream) ([][]byte, error) {
	var out [][]byte
	for {
		p, err := s.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}

// call returns the error from Call or, failing that, from the first Recv.
func callErr(ctx context.Context, c Client, addr Address, endpoint string, payload []byte) error {
	st, err := c.Call(ctx, addr, endpoint, nil, payload)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = recvAll(st)
	return err
}

// waitFor fails the test if ch yields nothing in a generous bound; it
// guards against hangs and asserts nothing about speed.
func waitFor[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		tb.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// deadAddress returns an address of plane on which nothing listens.
func deadAddress(tb testing.TB, plane Plane) Address {
	tb.Helper()
	if plane == PlaneNATS {
		return Address{Kind: PlaneNATS, Addr: "switchyard.nobody.home"}
	}
	// Held for the test, refusing: a port closed again could become another
	// test process's listener, which would answer.
	addr := testport.Refusing(tb)
	if plane == PlaneHTTP {
		return Address{Kind: PlaneHTTP, Addr: "http://" + addr + DefaultHTTPRootPath}
	}
	return Address{Kind: PlaneTCP, Addr: addr}
}

// kill drops the server's connections without a goodbye, as a crash would.
func kill(s Server) {
	if ns, ok := s.(*natsServer); ok {
		ns.nc.Close()
	}
	s.Close()
}

func errIs(err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("got error %v, want %v", err, target)
	}
	return nil
}
