package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// rawH2Server accepts one connection, reads the client preface and frames,
// and reports what it sees. It answers the client's SETTINGS and PINGs so
// the connection stays healthy.
type rawH2Server struct {
	ln       net.Listener
	settings chan map[http2.SettingID]uint32
	pings    chan struct{}
	done     chan struct{}
}

func startRawH2Server(t *testing.T) *rawH2Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawH2Server{ln: ln, settings: make(chan map[http2.SettingID]uint32, 4), pings: make(chan struct{}, 16), done: make(chan struct{})}
	conns := make(chan net.Conn, 1)
	go func() {
		defer close(s.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		conns <- c
		defer c.Close()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			return
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					// The frame aliases the framer's buffer; copy it out.
					m := map[http2.SettingID]uint32{}
					_ = f.ForeachSetting(func(st http2.Setting) error {
						m[st.ID] = st.Val
						return nil
					})
					s.settings <- m
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					s.pings <- struct{}{}
					_ = fr.WritePing(true, f.Data)
				}
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		select {
		case c := <-conns:
			c.Close()
		default:
		}
		<-s.done
	})
	return s
}

// TestHTTPClientSettingsTakeEffect proves DYN_HTTP2_MAX_FRAME_SIZE reaches
// the SETTINGS frame the server receives and DYN_HTTP2_KEEP_ALIVE_INTERVAL_SECS
// makes the client PING an idle connection.
func TestHTTPClientSettingsTakeEffect(t *testing.T) {
	srv := startRawH2Server(t)
	cfg := testConfig(t, PlaneHTTP)
	cfg.HTTP.MaxFrameSize = 65536
	cfg.HTTP.KeepAliveInterval = 50 * time.Millisecond
	cfg.HTTP.KeepAliveTimeout = 5 * time.Second
	cfg.Limits.RequestTimeout = 30 * time.Second
	c := testClient(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	callDone := make(chan struct{})
	go func() {
		defer close(callDone)
		// The raw server never answers; the call ends when ctx does.
		_, _ = c.Call(ctx, Address{Kind: PlaneHTTP, Addr: "http://" + srv.ln.Addr().String() + "/v1/rpc"}, "echo", nil, []byte("x"))
	}()
	defer func() { cancel(); <-callDone }()

	sf := waitFor(t, srv.settings, "client SETTINGS")
	got, ok := sf[http2.SettingMaxFrameSize]
	if !ok || got != 65536 {
		t.Fatalf("SETTINGS_MAX_FRAME_SIZE = %d (present %v), want 65536", got, ok)
	}
	if iw, ok := sf[http2.SettingInitialWindowSize]; ok && iw <= 65535 {
		t.Errorf("adaptive window on: SETTINGS_INITIAL_WINDOW_SIZE = %d, want Go's large default", iw)
	}
	waitFor(t, srv.pings, "keep-alive PING")
}

// TestHTTPAdaptiveWindowOff proves DYN_HTTP2_ADAPTIVE_WINDOW=false pins the
// stream window to the RFC 7540 initial 65535 bytes.
func TestHTTPAdaptiveWindowOff(t *testing.T) {
	srv := startRawH2Server(t)
	cfg := testConfig(t, PlaneHTTP)
	cfg.HTTP.AdaptiveWindow = false
	c := testClient(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	callDone := make(chan struct{})
	go func() {
		defer close(callDone)
		_, _ = c.Call(ctx, Address{Kind: PlaneHTTP, Addr: "http://" + srv.ln.Addr().String() + "/v1/rpc"}, "echo", nil, nil)
	}()
	defer func() { cancel(); <-callDone }()
	sf := waitFor(t, srv.settings, "client SETTINGS")
	if iw, ok := sf[http2.SettingInitialWindowSize]; !ok || iw != 65535 {
		t.Fatalf("SETTINGS_INITIAL_WINDOW_SIZE = %d (present %v), want 65535", iw, ok)
	}
}

// TestHTTPMaxConcurrentStreams proves DYN_HTTP2_MAX_CONCURRENT_STREAMS caps
// the client's in-flight calls.
func TestHTTPMaxConcurrentStreams(t *testing.T) {
	cfg := testConfig(t, PlaneHTTP)
	cfg.HTTP.MaxConcurrentStreams = 1
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	c := testClient(t, cfg)
	first, err := c.Call(context.Background(), s.Address("block"), "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	// With the one stream taken, a second call cannot start; it gives up
	// when its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, s.Address("echo"), "echo", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second call: got %v, want it held back until its deadline", err)
	}
	select {
	case name := <-th.started:
		if name != "block" {
			t.Fatalf("handler %q ran while the stream limit was taken", name)
		}
	default:
	}
	first.Close()
	waitFor(t, th.ctxEnded, "first handler to end")
	if err := callErr(context.Background(), c, s.Address("echo"), "echo", nil); err != io.EOF {
		t.Fatalf("call after the stream was freed: %v", err)
	}
}

// TestHTTPServerSpeaksHTTP1 calls the server with a plain HTTP/1.1 client,
// as a worker or caller in another language would.
func TestHTTPServerSpeaksHTTP1(t *testing.T) {
	cfg := testConfig(t, PlaneHTTP)
	th := newTestHandlers()
	s := testServer(t, cfg, th)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, s.Address("headers").Addr+"/headers", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", "r9")
	req.Header.Set("Dyn-Hdr-Tenant", "t1")
	req.Header.Set("Accept", "*/*")
	hresp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if want := "tenant=t1\nx-request-id=r9"; !bytes.Contains(body, []byte(want)) {
		t.Fatalf("headers seen by the handler: body %q lacks %q", body, want)
	}
	req, err = http.NewRequest(http.MethodPost, s.Address("stream").Addr+"/stream", bytes.NewReader(encodeStreamReq(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != httpContentType {
		t.Fatalf("got %s %d %q", resp.Proto, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	var types []byte
	for {
		var hdr [httpFrameHeaderLen]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		types = append(types, hdr[0])
		if _, err := io.CopyN(io.Discard, r, int64(binary.BigEndian.Uint32(hdr[1:]))); err != nil {
			t.Fatal(err)
		}
	}
	if want := []byte{frameData, frameData, frameData, frameEnd}; !bytes.Equal(types, want) {
		t.Fatalf("frame types %v, want %v", types, want)
	}
}

// TestHTTPClientSpeaksH2C checks that the plane's client reaches the server
// over HTTP/2 cleartext with prior knowledge.
func TestHTTPClientSpeaksH2C(t *testing.T) {
	cfg := testConfig(t, PlaneHTTP)
	s := testServer(t, cfg, newTestHandlers())
	tr := newHTTPTransport(cfg)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(s.Address("echo").Addr+"/echo", "application/octet-stream", bytes.NewReader([]byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %s %d, want HTTP/2.0 200", resp.Proto, resp.StatusCode)
	}
}

// TestHTTPServerRejects checks the status codes for requests the server
// refuses before a handler runs.
func TestHTTPServerRejects(t *testing.T) {
	cfg := testConfig(t, PlaneHTTP)
	s := testServer(t, cfg, newTestHandlers())
	base := s.Address("echo").Addr
	tests := []struct {
		method, url string
		body        []byte
		status      int
	}{
		{http.MethodGet, base + "/echo", nil, http.StatusMethodNotAllowed},
		{http.MethodPost, base + "/missing", nil, http.StatusNotFound},
		{http.MethodPost, base + "/a/b", nil, http.StatusNotFound},
		{http.MethodPost, base + "/echo", make([]byte, testMaxSize+1), http.StatusRequestEntityTooLarge},
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, tt.url, bytes.NewReader(tt.body))
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.url, resp.StatusCode, tt.status)
		}
	}
}

// TestRequestTimeout checks that a server that accepts but never answers
// yields ErrTimeout, on the planes where a server can stall so.
func TestRequestTimeout(t *testing.T) {
	for _, plane := range []Plane{PlaneTCP, PlaneHTTP} {
		t.Run(string(plane), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					accepted <- c
				}
				close(accepted)
			}()
			defer func() {
				ln.Close()
				for c := range accepted {
					c.Close()
				}
			}()
			cfg := testConfig(t, plane)
			cfg.Limits.RequestTimeout = 100 * time.Millisecond
			c := testClient(t, cfg)
			addr := Address{Kind: plane, Addr: ln.Addr().String()}
			if plane == PlaneHTTP {
				addr.Addr = "http://" + addr.Addr + "/v1/rpc"
			}
			err = callErr(context.Background(), c, addr, "echo", nil)
			if err := errIs(err, ErrTimeout); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHTTPClientFallsBackToHTTP1 calls a worker whose server speaks only
// HTTP/1.1 (as a standard library server would): the client's h2c attempt
// is answered in HTTP/1, so it calls again over HTTP/1.1 and keeps doing so.
func TestHTTPClientFallsBackToHTTP1(t *testing.T) {
	cfg := testConfig(t, PlaneHTTP)
	hs := newHTTPServer(cfg, options{log: slog.New(slog.DiscardHandler)})
	newTestHandlers().register(hs)
	srv := httptest.NewServer(hs) // HTTP/1.1 only: no h2c
	defer srv.Close()
	defer hs.cancel()
	c := testClient(t, cfg)
	addr := Address{Kind: PlaneHTTP, Addr: srv.URL + cfg.HTTP.RootPath}
	for i := range 3 {
		st, err := c.Call(context.Background(), addr, "stream", nil, encodeStreamReq(5, 8))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		n := 0
		for {
			_, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("call %d: Recv: %v", i, err)
			}
			n++
		}
		st.Close()
		if n != 5 {
			t.Fatalf("call %d: %d responses, want 5", i, n)
		}
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	hc, err := c.(*multiClient).client(PlaneHTTP)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hc.(*httpClient).http1.Load(host); !ok {
		t.Fatalf("the client did not remember that %s speaks HTTP/1.1", host)
	}
}
