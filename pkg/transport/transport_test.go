package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var planes = []Plane{PlaneTCP, PlaneHTTP, PlaneNATS}

// TestPlanes runs the same cases against every plane.
func TestPlanes(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, cfg Config)
	}{
		{"OneResponse", testOneResponse},
		{"StreamInOrder", testStreamInOrder},
		{"OneMiBPayload", testOneMiB},
		{"TooLargeBothSides", testTooLarge},
		{"HandlerError", testHandlerError},
		{"NoHandler", testNoHandler},
		{"CancelMidStream", testCancel},
		{"CloseStreamCancelsHandler", testCloseStream},
		{"ServerKilledMidStream", testServerKilled},
		{"ClientGoneCancelsHandler", testClientGone},
		{"NothingListening", testNothingListening},
		{"Concurrent256", testConcurrent},
		{"DrainFinishesInFlight", testDrain},
		{"DrainIsBounded", testDrainBounded},
		{"SlowConsumerBackPressure", testSlowConsumer},
	}
	for _, plane := range planes {
		t.Run(string(plane), func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, testConfig(t, plane))
				})
			}
		})
	}
}

func testOneResponse(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	st, err := c.Call(context.Background(), s.Address("echo"), "echo", Headers{HeaderRequestID: "req-1", HeaderTraceParent: "00-abc-def-01"}, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(st)
	if err != io.EOF {
		t.Fatalf("end: got %v, want io.EOF", err)
	}
	if len(got) != 1 || string(got[0]) != "req-1:hello" {
		t.Fatalf("got %q, want one response %q", got, "req-1:hello")
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv after end: got %v, want io.EOF again", err)
	}
	hdrs := Headers{HeaderRequestID: "req-2", HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", HeaderTraceState: "vendor=1", "tenant": "acme"}
	st, err = c.Call(context.Background(), s.Address("headers"), "headers", hdrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err = recvAll(st)
	want := "tenant=acme\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\ntracestate=vendor=1\nx-request-id=req-2"
	if err != io.EOF || len(got) != 1 || string(got[0]) != want {
		t.Fatalf("headers: got %q, %v; want %q", got, err, want)
	}
}

func testStreamInOrder(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	const n = 10000
	st, err := c.Call(context.Background(), s.Address("stream"), "stream", nil, encodeStreamReq(n, 16))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(st)
	if err != io.EOF {
		t.Fatalf("end: got %v after %d responses, want io.EOF", err, len(got))
	}
	if len(got) != n {
		t.Fatalf("got %d responses, want %d", len(got), n)
	}
	for i, p := range got {
		if idx := binary.BigEndian.Uint32(p); idx != uint32(i) {
			t.Fatalf("response %d carries index %d", i, idx)
		}
	}
}

func testOneMiB(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	st, err := c.Call(context.Background(), s.Address("echo"), "echo", nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(st)
	if err != io.EOF || len(got) != 1 {
		t.Fatalf("got %d responses and %v, want 1 and io.EOF", len(got), err)
	}
	if !bytes.Equal(got[0][1:], payload) {
		t.Fatal("1 MiB payload came back altered")
	}
}

func testTooLarge(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	// The client refuses to send.
	_, err := c.Call(context.Background(), s.Address("echo"), "echo", nil, make([]byte, testMaxSize+1))
	if err := errIs(err, ErrTooLarge); err != nil {
		t.Fatalf("client side: %v", err)
	}
	// The server refuses the handler's oversized response.
	err = callErr(context.Background(), c, s.Address("oversize"), "oversize", nil)
	if err := errIs(err, ErrTooLarge); err != nil {
		t.Fatalf("client sees: %v", err)
	}
	var he *HandlerError
	if !errors.As(err, &he) || he.Code != CodeTooLarge {
		t.Fatalf("client sees %v, want a *HandlerError with code %q", err, CodeTooLarge)
	}
	if err := errIs(waitFor(t, th.sendErr, "handler Send"), ErrTooLarge); err != nil {
		t.Fatalf("handler Send: %v", err)
	}
}

func testHandlerError(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	err := callErr(context.Background(), c, s.Address("fail"), "fail", nil)
	var he *HandlerError
	if !errors.As(err, &he) || he.Code != "invalid_argument" || he.Message != "bad prompt" {
		t.Fatalf("got %v, want HandlerError{invalid_argument, bad prompt}", err)
	}
	if errors.Is(err, ErrDisconnected) || err == io.EOF {
		t.Fatalf("handler error %v must not look like a broken or finished stream", err)
	}
}

func testNoHandler(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	err := callErr(context.Background(), c, s.Address("echo"), "missing", nil)
	if cfg.Plane == PlaneNATS {
		// Each endpoint has its own subject; the echo subject's server
		// reports the unknown endpoint name.
		err = callErr(context.Background(), c, s.Address("echo"), "missing", nil)
	}
	if err := errIs(err, ErrNoHandler); err != nil {
		t.Fatal(err)
	}
}

func testCancel(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.Call(ctx, s.Address("block"), "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.Recv(); err != nil || string(p) != "first" {
		t.Fatalf("first Recv: %q, %v", p, err)
	}
	cancel()
	if err := errIs(waitFor(t, th.ctxEnded, "handler context to end"), context.Canceled); err != nil {
		t.Fatalf("handler: %v", err)
	}
	if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
		t.Fatalf("client Recv after cancel: got %v, want context.Canceled", err)
	}
}

func testCloseStream(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	st, err := c.Call(context.Background(), s.Address("block"), "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	waitFor(t, th.ctxEnded, "handler context to end after Stream.Close")
}

func testServerKilled(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	st, err := c.Call(context.Background(), s.Address("block"), "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	kill(s)
	_, err = st.Recv()
	if err == io.EOF {
		t.Fatal("a killed server looked like a clean end (io.EOF)")
	}
	if err := errIs(err, ErrDisconnected); err != nil {
		t.Fatal(err)
	}
}

func testNothingListening(t *testing.T, cfg Config) {
	c := testClient(t, cfg)
	err := callErr(context.Background(), c, deadAddress(t, cfg.Plane), "echo", []byte("x"))
	if err := errIs(err, ErrCannotConnect); err != nil {
		t.Fatal(err)
	}
}

func testConcurrent(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	const streams, per = 256, 50
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.Call(context.Background(), s.Address("stream"), "stream", Headers{HeaderRequestID: fmt.Sprint(i)}, encodeStreamReq(per, 8))
			if err != nil {
				errs <- err
				return
			}
			got, err := recvAll(st)
			if err != io.EOF || len(got) != per {
				errs <- fmt.Errorf("stream %d: %d responses, %v", i, len(got), err)
				return
			}
			for j, p := range got {
				if binary.BigEndian.Uint32(p) != uint32(j) {
					errs <- fmt.Errorf("stream %d: response %d out of order", i, j)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testDrain(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	type result struct {
		got [][]byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		st, err := c.Call(context.Background(), s.Address("slow"), "slow", nil, nil)
		if err != nil {
			res <- result{err: err}
			return
		}
		got, err := recvAll(st)
		res <- result{got, err}
	}()
	waitFor(t, th.started, "slow handler to start")
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(context.Background()) }()
	// New requests are refused with ErrDraining while the old one runs.
	for {
		err := callErr(context.Background(), c, s.Address("echo"), "echo", nil)
		if errors.Is(err, ErrDraining) {
			break
		}
		if err != io.EOF {
			t.Fatalf("new request during drain: got %v, want ErrDraining", err)
		}
		// Drain has not set its flag yet; try again.
		time.Sleep(time.Millisecond)
	}
	close(th.release)
	r := waitFor(t, res, "in-flight request")
	if r.err != io.EOF || len(r.got) != 1 || string(r.got[0]) != "done" {
		t.Fatalf("in-flight request: %q, %v; want [done], io.EOF", r.got, r.err)
	}
	if err := waitFor(t, drained, "Drain"); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// testSlowConsumer checks that a client that stops reading holds the
// handler's Send back instead of letting the server buffer everything. The
// pause below only gives a broken implementation the chance to overrun; no
// duration is asserted.
func testSlowConsumer(t *testing.T, cfg Config) {
	cfg.Limits.ChannelBuffer = 10
	cfg.HTTP.AdaptiveWindow = false // 64 KiB HTTP/2 windows
	var n atomic.Int64
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	s.Handle("flood", func(ctx context.Context, req *Request, w ResponseWriter) error {
		for {
			if err := w.Send(buf); err != nil {
				return err
			}
			n.Add(1)
		}
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := testClient(t, cfg)
	st, err := c.Call(context.Background(), s.Address("flood"), "flood", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	// The consumer now stops reading.
	for n.Load() < int64(cfg.Limits.ChannelBuffer) && cfg.Plane != PlaneHTTP {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	got := n.Load()
	if cfg.Plane != PlaneHTTP && got > int64(cfg.Limits.ChannelBuffer) {
		t.Fatalf("handler sent %d responses to a client that read 1 with a window of %d", got, cfg.Limits.ChannelBuffer)
	}
	if got >= 10000 {
		t.Fatalf("handler sent %d KiB to a client that stopped reading", got)
	}
}

// testClientGone checks that a caller that disappears mid-stream (its client
// closed without closing the stream) stops the handler.
func testClientGone(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Call(context.Background(), s.Address("block"), "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitFor(t, th.ctxEnded, "handler context to end after the client went away")
	if _, err := st.Recv(); err == nil || err == io.EOF {
		t.Fatalf("Recv on a closed client: got %v, want an error", err)
	}
}

// testDrainBounded checks that Drain gives up on a handler that does not
// finish once its context ends: the handler is cancelled, the caller sees a
// broken stream, and Drain reports the deadline.
func testDrainBounded(t *testing.T, cfg Config) {
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	errc := make(chan error, 1)
	go func() { errc <- callErr(context.Background(), c, s.Address("slow"), "slow", nil) }()
	waitFor(t, th.started, "slow handler to start")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain: got %v, want context.DeadlineExceeded", err)
	}
	err := waitFor(t, errc, "the in-flight call to fail")
	if err == io.EOF || err == nil {
		t.Fatalf("in-flight call cut off by Drain: got %v, want an error", err)
	}
	if !errors.Is(err, ErrDisconnected) {
		t.Fatalf("in-flight call cut off by Drain: got %v, want ErrDisconnected", err)
	}
}
