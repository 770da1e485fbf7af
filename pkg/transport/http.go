package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

// httpPlane is the http plane: HTTP/2 cleartext (h2c), base URL addresses.
var httpPlane = planeSpec{
	name:       PlaneHTTP,
	address:    (*commonv1.Transport).GetHttp,
	setAddress: func(t *commonv1.Transport, a string) { t.Http = a },
	validate:   validHTTPAddr,
	listen:     func(cfg Config) (string, int) { return cfg.HTTP.Host, cfg.HTTP.Port },
	newServer:  func(cfg Config, o options) Server { return newHTTPServer(cfg, o) },
	newClient:  func(cfg Config, o options) (Client, error) { return newHTTPClient(cfg, o), nil },
}

// The http plane. A call is POST {root}/{endpoint} with the payload as the
// body and each request header k sent as the HTTP header "Dyn-Hdr-k", except
// the well-known traceparent, tracestate and x-request-id, which travel
// under their standard names so proxies and tracing middleware see them. The
// response (200, Content-Type application/x-switchyard-frames) streams
// frames in its body:
//
//	type    uint8             frameData, frameEnd or frameError
//	length  uint32 big-endian
//	payload
//
// A rejected request gets a non-200 status (404 no handler, 413 too large,
// 503 draining, 400 malformed) with an error frame as its body. The server
// speaks HTTP/1.1 and HTTP/2 cleartext (h2c, prior knowledge) on one port,
// so any language's standard library can call it. The client speaks h2c
// and falls back to HTTP/1.1 for a server that answers the h2c preface in
// HTTP/1, so any language's standard library can also serve it.
const (
	// HTTPHeaderPrefix is put before a request header's key on the http
	// plane (HTTP headers are case-insensitive), except HeaderTraceParent,
	// HeaderTraceState and HeaderRequestID, which keep their own names.
	HTTPHeaderPrefix = "Dyn-Hdr-"
	// HTTPContentType is the Content-Type of an http plane response body
	// of frames.
	HTTPContentType = "application/x-switchyard-frames"

	httpHeaderPrefix   = HTTPHeaderPrefix
	httpContentType    = HTTPContentType
	httpFrameHeaderLen = 5
)

// httpServer is the http plane's [Server].
type httpServer struct {
	cfg     HTTPConfig
	maxSize int
	log     *slog.Logger
	hs      handlerSet

	srv      *http.Server
	ln       net.Listener
	base     string
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // Serve and every handler
	draining atomic.Bool
	inflight inflight
	once     sync.Once

	// open counts the http.Server's connections, whose goroutines
	// http.Server.Close does not wait for.
	connMu   sync.Mutex
	open     int
	openZero *sync.Cond
}

func newHTTPServer(cfg Config, o options) *httpServer {
	ctx, cancel := context.WithCancel(context.Background())
	s := &httpServer{cfg: cfg.HTTP, maxSize: cfg.Limits.MaxMessageSize, log: o.log, ctx: ctx, cancel: cancel}
	s.openZero = sync.NewCond(&s.connMu)
	return s
}

// connState tracks connections so Close can wait for their goroutines.
func (s *httpServer) connState(_ net.Conn, st http.ConnState) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	switch st {
	case http.StateNew:
		s.open++
	case http.StateClosed, http.StateHijacked:
		s.open--
		if s.open == 0 {
			s.openZero.Broadcast()
		}
	}
}

// Handle implements [Server].
func (s *httpServer) Handle(endpoint string, h Handler) { s.hs.set(endpoint, h) }

// Start implements [Server].
func (s *httpServer) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port)))
	if err != nil {
		return fmt.Errorf("transport: http listen: %w", err)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s.ln = ln
	s.base = "http://" + advertiseAddr(ln.Addr()) + s.cfg.RootPath
	s.srv = &http.Server{
		Handler:           s,
		Protocols:         &protos,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ConnState:         s.connState,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: s.cfg.MaxConcurrentStreams,
			MaxReadFrameSize:     s.cfg.MaxFrameSize,
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.log.Info("transport: http request plane listening", "url", s.base)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return nil
}

// Address implements [Server].
func (s *httpServer) Address(string) Address { return Address{Kind: PlaneHTTP, Addr: s.base} }

// Addresses implements [Server].
func (s *httpServer) Addresses(ep string) []Address { return []Address{s.Address(ep)} }

// Drain implements [Server].
func (s *httpServer) Drain(ctx context.Context) error {
	s.draining.Store(true)
	err := s.inflight.wait(ctx)
	if err == nil && s.srv != nil {
		// Let the last responses' end of stream reach the wire before the
		// connections close.
		if serr := s.srv.Shutdown(ctx); serr != nil {
			err = fmt.Errorf("transport: drain: %w", serr)
		}
	}
	s.Close()
	return err
}

// Close implements [Server].
func (s *httpServer) Close() error {
	s.once.Do(func() {
		if s.srv != nil {
			_ = s.srv.Close()
		}
		s.cancel()
	})
	s.wg.Wait()
	s.connMu.Lock()
	for s.open > 0 {
		s.openZero.Wait()
	}
	s.connMu.Unlock()
	return nil
}

// httpStatusError is a rejected request: the status and the error frame.
type httpStatusError struct {
	status int
	he     *HandlerError
}

// parseHTTPRequest validates a request's method, path and headers and
// returns the endpoint and the transport headers.
func parseHTTPRequest(root, method, path string, header http.Header, contentLength int64, maxSize int) (string, Headers, *httpStatusError) {
	bad := func(status int, code, msg string) *httpStatusError {
		return &httpStatusError{status: status, he: &HandlerError{Code: code, Message: msg}}
	}
	if method != http.MethodPost {
		return "", nil, bad(http.StatusMethodNotAllowed, CodeUnknown, "method "+method+" not allowed; use POST")
	}
	rest, ok := strings.CutPrefix(path, root+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", nil, bad(http.StatusNotFound, CodeNoHandler, fmt.Sprintf("path %q is not %s/{endpoint}", path, root))
	}
	if contentLength > int64(maxSize) {
		return "", nil, bad(http.StatusRequestEntityTooLarge, CodeTooLarge, tooLarge("request payload", int(min(contentLength, 1<<62)), maxSize).Error())
	}
	h := Headers{}
	for k, vs := range header {
		if len(vs) == 0 {
			continue
		}
		if wk := strings.ToLower(k); httpStandardHeader(wk) {
			h[wk] = vs[0]
			continue
		}
		name, ok := cutPrefixFold(k, httpHeaderPrefix)
		if !ok || name == "" {
			continue
		}
		h[strings.ToLower(name)] = vs[0]
	}
	if err := checkRequestMeta(rest, h); err != nil {
		return "", nil, bad(http.StatusBadRequest, CodeUnknown, err.Error())
	}
	return rest, h, nil
}

// httpStandardHeader reports whether a lower-case header key travels under
// its own HTTP name rather than with the Dyn-Hdr- prefix.
func httpStandardHeader(k string) bool {
	return k == HeaderTraceParent || k == HeaderTraceState || k == HeaderRequestID
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

func writeHTTPError(w http.ResponseWriter, e *httpStatusError) {
	w.Header().Set("Content-Type", httpContentType)
	w.WriteHeader(e.status)
	body := appendErrorBody(nil, e.he)
	_, _ = w.Write(appendHTTPFrame(nil, frameError, body))
}

func appendHTTPFrame(b []byte, typ byte, p []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// ServeHTTP serves one call.
func (s *httpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint, headers, perr := parseHTTPRequest(s.cfg.RootPath, r.Method, r.URL.Path, r.Header, r.ContentLength, s.maxSize)
	if perr != nil {
		writeHTTPError(w, perr)
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, int64(s.maxSize)+1))
	if err != nil {
		return // the client went away
	}
	if len(payload) > s.maxSize {
		writeHTTPError(w, &httpStatusError{http.StatusRequestEntityTooLarge, &HandlerError{Code: CodeTooLarge, Message: tooLarge("request payload", len(payload), s.maxSize).Error()}})
		return
	}
	h, herr := s.hs.get(endpoint)
	if herr != nil {
		writeHTTPError(w, &httpStatusError{http.StatusNotFound, herr})
		return
	}
	if s.draining.Load() || !s.inflight.add() {
		writeHTTPError(w, &httpStatusError{http.StatusServiceUnavailable, drainingError()})
		return
	}
	s.wg.Add(1)
	defer s.wg.Done()
	defer s.inflight.done()
	w.Header().Set("Content-Type", httpContentType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := newHTTPServerStream(ctx, w, rc, s.maxSize)
	herr2 := runHandler(ctx, h, &Request{Endpoint: endpoint, Headers: headers, Payload: payload}, st)
	if herr2 != nil {
		st.end(frameError, appendErrorBody(nil, toHandlerError(herr2)))
		return
	}
	st.end(frameEnd, nil)
}

// httpServerStream is the http plane's [ResponseWriter]. Send writes into
// the response's buffer and kicks a flusher goroutine rather than flushing
// itself, so frames a handler sends while a flush is in progress go out
// together in one HTTP/2 DATA frame.
type httpServerStream struct {
	ctx  context.Context
	w    http.ResponseWriter
	rc   *http.ResponseController
	max  int
	kick chan struct{} // cap 1: there is something to flush
	stop chan struct{} // closed when the handler has returned
	done chan struct{} // closed when the flusher has exited

	mu    sync.Mutex // guards w, hdr, dirty, err
	hdr   [httpFrameHeaderLen]byte
	dirty bool
	err   error
}

func newHTTPServerStream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, max int) *httpServerStream {
	st := &httpServerStream{ctx: ctx, w: w, rc: rc, max: max,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	// The status line goes out with the first flush: at once if the
	// handler is slow, together with its first response if it is quick.
	st.dirty = true
	st.kick <- struct{}{}
	go st.flushLoop()
	return st
}

func (st *httpServerStream) flushLoop() {
	defer close(st.done)
	for {
		select {
		case <-st.kick:
		case <-st.stop:
			return
		}
		st.mu.Lock()
		if st.dirty && st.err == nil {
			st.dirty = false
			if err := st.rc.Flush(); err != nil {
				st.err = st.failErr(err)
			}
		}
		st.mu.Unlock()
	}
}

// Send implements [ResponseWriter]. HTTP/2 flow control supplies the
// back-pressure: the write blocks while the client's window is full.
func (st *httpServerStream) Send(p []byte) error {
	if len(p) > st.max {
		return tooLarge("response payload", len(p), st.max)
	}
	if err := st.ctx.Err(); err != nil {
		return err
	}
	st.mu.Lock()
	err := st.writeLocked(frameData, p)
	st.dirty = true
	st.mu.Unlock()
	select {
	case st.kick <- struct{}{}:
	default:
	}
	return err
}

// end stops the flusher and writes the final frame, if the stream is
// still healthy.
func (st *httpServerStream) end(typ byte, p []byte) {
	close(st.stop)
	<-st.done
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ctx.Err() != nil || st.err != nil {
		return
	}
	if st.writeLocked(typ, p) == nil {
		if err := st.rc.Flush(); err != nil {
			st.err = st.failErr(err)
		}
	}
}

func (st *httpServerStream) writeLocked(typ byte, p []byte) error {
	if st.err != nil {
		return st.err
	}
	st.hdr[0] = typ
	binary.BigEndian.PutUint32(st.hdr[1:], uint32(len(p)))
	if _, err := st.w.Write(st.hdr[:]); err != nil {
		st.err = st.failErr(err)
		return st.err
	}
	if _, err := st.w.Write(p); err != nil {
		st.err = st.failErr(err)
		return st.err
	}
	return nil
}

func (st *httpServerStream) failErr(err error) error {
	if cerr := st.ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: %v", ErrDisconnected, err)
}

// httpClient is the http plane's [Client].
type httpClient struct {
	cfg HTTPConfig
	lim Limits
	log *slog.Logger
	tr  *http.Transport
	hc  *http.Client
	// hc1 speaks HTTP/1.1, for workers whose standard library serves only
	// that: a server that answers the h2c preface with HTTP/1 text is
	// remembered in http1 and called over HTTP/1.1 from then on.
	tr1     *http.Transport
	hc1     *http.Client
	http1   sync.Map      // host:port -> struct{}
	h2ok    sync.Map      // host:port -> struct{}: answered over h2c once
	streams chan struct{} // semaphore: DYN_HTTP2_MAX_CONCURRENT_STREAMS
	closed  atomic.Bool

	mu     sync.Mutex
	active map[*httpStream]struct{} // cancelled by Close
}

// newHTTPTransport applies every DYN_HTTP2_* setting to a Go HTTP/2
// cleartext transport.
func newHTTPTransport(cfg Config) *http.Transport {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge, no upgrade round trip
	h2 := &http.HTTP2Config{
		// DYN_HTTP2_MAX_FRAME_SIZE: SETTINGS_MAX_FRAME_SIZE the client advertises.
		MaxReadFrameSize: cfg.HTTP.MaxFrameSize,
		// DYN_HTTP2_KEEP_ALIVE_INTERVAL_SECS: PING after this long without a frame read.
		SendPingTimeout: cfg.HTTP.KeepAliveInterval,
		// DYN_HTTP2_KEEP_ALIVE_TIMEOUT_SECS: close the connection if the PING is not answered.
		PingTimeout: cfg.HTTP.KeepAliveTimeout,
	}
	if !cfg.HTTP.AdaptiveWindow {
		// DYN_HTTP2_ADAPTIVE_WINDOW=false: Go has no BDP-probing window
		// like hyper's; its default windows are already large (4 MiB per
		// stream). false pins them to the RFC 7540 initial 64 KiB instead,
		// which is what hyper does without adaptive_window.
		h2.MaxReceiveBufferPerStream = 65535
		h2.MaxReceiveBufferPerConnection = 64 << 10
	}
	return &http.Transport{
		Protocols: &protos,
		// DYN_TCP_CONNECT_TIMEOUT bounds the TCP connect.
		DialContext: (&net.Dialer{Timeout: cfg.Limits.ConnectTimeout}).DialContext,
		// DYN_HTTP2_POOL_MAX_IDLE_PER_HOST: idle connections kept per server.
		MaxIdleConnsPerHost: cfg.HTTP.PoolMaxIdlePerHost,
		// DYN_HTTP2_POOL_IDLE_TIMEOUT_SECS: close a connection idle this long.
		IdleConnTimeout: cfg.HTTP.PoolIdleTimeout,
		// DYN_TCP_REQUEST_TIMEOUT is enforced per call by httpStream's timer.
		HTTP2: h2,
	}
}

func newHTTPClient(cfg Config, o options) *httpClient {
	tr := newHTTPTransport(cfg)
	var p1 http.Protocols
	p1.SetHTTP1(true)
	tr1 := &http.Transport{
		Protocols:           &p1,
		DialContext:         tr.DialContext,
		MaxIdleConnsPerHost: cfg.HTTP.PoolMaxIdlePerHost,
		IdleConnTimeout:     cfg.HTTP.PoolIdleTimeout,
	}
	return &httpClient{
		cfg: cfg.HTTP,
		lim: cfg.Limits,
		log: o.log,
		tr:  tr,
		hc:  &http.Client{Transport: tr},
		tr1: tr1,
		hc1: &http.Client{Transport: tr1},
		// DYN_HTTP2_MAX_CONCURRENT_STREAMS: Go's transport only honours the
		// server's limit, so the client's own cap is this semaphore, held for
		// the life of each stream.
		streams: make(chan struct{}, cfg.HTTP.MaxConcurrentStreams),
		active:  map[*httpStream]struct{}{},
	}
}

// Call implements [Client].
func (c *httpClient) Call(ctx context.Context, addr Address, endpoint string, headers Headers, payload []byte) (Stream, error) {
	headers = withTrace(ctx, headers)
	if addr.Kind != PlaneHTTP {
		return nil, fmt.Errorf("transport: http client cannot call a %q address", addr.Kind)
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if len(payload) > c.lim.MaxMessageSize {
		return nil, tooLarge("request payload", len(payload), c.lim.MaxMessageSize)
	}
	if err := checkRequestMeta(endpoint, headers); err != nil {
		return nil, err
	}
	select {
	case c.streams <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	s := &httpStream{ctx: ctx, callCtx: callCtx, cancel: cancel, release: func() { <-c.streams }, max: c.lim.MaxMessageSize}
	s.timer = time.AfterFunc(c.lim.RequestTimeout, func() {
		cancel(fmt.Errorf("%w: no response within %v", ErrTimeout, c.lim.RequestTimeout))
	})
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		s.timer.Stop()
		cancel(ErrClosed)
		<-c.streams
		return nil, ErrClosed
	}
	s.untrack = func() {
		c.mu.Lock()
		delete(c.active, s)
		c.mu.Unlock()
	}
	c.active[s] = struct{}{}
	c.mu.Unlock()
	newReq := func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(callCtx, http.MethodPost, addr.Addr+"/"+endpoint, bytes.NewReader(payload))
		if err != nil {
			return nil, fmt.Errorf("transport: http request: %w", err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		for k, v := range headers {
			if httpStandardHeader(k) {
				req.Header.Set(k, v)
			} else {
				req.Header[httpHeaderPrefix+k] = []string{v}
			}
		}
		return req, nil
	}
	req, err := newReq()
	if err != nil {
		s.Close()
		return nil, err
	}
	hc := c.hc
	if _, ok := c.http1.Load(req.URL.Host); ok {
		hc = c.hc1
	}
	resp, err := hc.Do(req)
	if err == nil && hc == c.hc {
		c.h2ok.Store(req.URL.Host, struct{}{})
	}
	if _, known := c.h2ok.Load(req.URL.Host); err != nil && hc == c.hc && !known && notHTTP2(err) {
		// The server read our h2c preface as a bad HTTP/1 request and
		// answered in HTTP/1: nothing reached a handler, so the call is sent
		// again over HTTP/1.1, and so are later calls to this server.
		c.http1.Store(req.URL.Host, struct{}{})
		c.log.Info("http request plane server speaks HTTP/1.1 only; using HTTP/1.1 for it", "host", req.URL.Host)
		h2err := err
		if req, err = newReq(); err == nil {
			resp, err = c.hc1.Do(req)
		}
		if err != nil {
			// Not an HTTP/1.1 server either: report the h2c failure.
			c.http1.Delete(req.URL.Host)
			err = h2err
		}
	}
	if err != nil {
		err = s.classify(err, true)
		s.Close()
		return nil, err
	}
	s.body = resp.Body
	s.r = bufio.NewReaderSize(resp.Body, 4<<10)
	if resp.StatusCode != http.StatusOK {
		s.status = resp.StatusCode
		s.framed = resp.Header.Get("Content-Type") == httpContentType
	}
	return s, nil
}

// notHTTP2 reports whether a first h2c attempt at a server may have failed
// because the server speaks only HTTP/1: anything but a failure to connect
// (its status line read as an oversized frame, the connection closed or reset
// after it answered our preface in HTTP/1, the h2 connection never
// established). It is only consulted for servers that never answered over
// h2c, and a wrong guess costs one failed HTTP/1.1 attempt.
func notHTTP2(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Close implements [Client].
func (c *httpClient) Close() error {
	c.mu.Lock()
	c.closed.Store(true)
	active := make([]*httpStream, 0, len(c.active))
	for s := range c.active {
		active = append(active, s)
	}
	c.mu.Unlock()
	for _, s := range active {
		s.closeWith(fmt.Errorf("%w: client closed", ErrClosed))
	}
	c.tr.CloseIdleConnections()
	c.tr1.CloseIdleConnections()
	return nil
}

// httpStream is the http plane's [Stream].
type httpStream struct {
	ctx      context.Context
	callCtx  context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	release  func()
	untrack  func()
	max      int
	body     io.ReadCloser
	r        *bufio.Reader
	status   int
	framed   bool
	gotAny   bool
	err      error
	once     sync.Once
	bodyOnce sync.Once
	hdr      [httpFrameHeaderLen]byte
}

// classify maps a transport error to the package's errors.
func (s *httpStream) classify(err error, dialing bool) error {
	if cerr := s.ctx.Err(); cerr != nil {
		return cerr
	}
	if cause := context.Cause(s.callCtx); cause != nil && errors.Is(cause, ErrClosed) {
		return cause
	}
	if cause := context.Cause(s.callCtx); cause != nil && errors.Is(cause, ErrTimeout) {
		return cause
	}
	var op *net.OpError
	if dialing && errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %v", ErrCannotConnect, err)
	}
	if dialing {
		return fmt.Errorf("%w: %v", ErrDisconnected, err)
	}
	return fmt.Errorf("%w: %v", ErrDisconnected, err)
}

// statusError maps a rejection status without an error frame.
func statusError(status int) *HandlerError {
	code := CodeUnknown
	switch status {
	case http.StatusServiceUnavailable:
		code = CodeDraining
	case http.StatusNotFound:
		code = CodeNoHandler
	case http.StatusRequestEntityTooLarge:
		code = CodeTooLarge
	}
	return &HandlerError{Code: code, Message: "http status " + strconv.Itoa(status) + " " + http.StatusText(status)}
}

// Pending implements [Pending]: a frame header is buffered.
func (s *httpStream) Pending() bool {
	return s.err == nil && s.r != nil && s.r.Buffered() >= httpFrameHeaderLen
}

// Recv implements [Stream].
func (s *httpStream) Recv() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.status != 0 && !s.framed {
		// Not our server (a proxy, a wrong port): map the status.
		return nil, s.finish(statusError(s.status))
	}
	typ, p, err := s.readFrame()
	if err != nil {
		return nil, s.finish(err)
	}
	if !s.gotAny {
		s.gotAny = true
		s.timer.Stop()
	}
	if s.status != 0 {
		if typ == frameError {
			if he, perr := parseErrorBody(p); perr == nil {
				return nil, s.finish(he)
			}
		}
		return nil, s.finish(statusError(s.status))
	}
	switch typ {
	case frameData:
		return p, nil
	case frameEnd:
		return nil, s.finish(io.EOF)
	case frameError:
		he, perr := parseErrorBody(p)
		if perr != nil {
			return nil, s.finish(fmt.Errorf("%w: %v", ErrDisconnected, perr))
		}
		return nil, s.finish(he)
	}
	return nil, s.finish(fmt.Errorf("%w: %v: frame type %d", ErrDisconnected, errProtocol, typ))
}

func (s *httpStream) readFrame() (byte, []byte, error) {
	if _, err := io.ReadFull(s.r, s.hdr[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // no end frame: the stream broke
		}
		return 0, nil, s.classify(err, false)
	}
	n := binary.BigEndian.Uint32(s.hdr[1:])
	if uint64(n) > uint64(s.max)+maxHeaderBytes {
		return 0, nil, fmt.Errorf("%w: %v: frame of %d bytes", ErrDisconnected, errProtocol, n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(s.r, p); err != nil {
		return 0, nil, s.classify(err, false)
	}
	return s.hdr[0], p, nil
}

func (s *httpStream) finish(err error) error {
	s.err = err
	s.closeWith(err)
	s.closeBody()
	return err
}

// closeBody releases the response body; only the stream's user calls it.
func (s *httpStream) closeBody() {
	s.bodyOnce.Do(func() {
		if s.body != nil {
			_ = s.body.Close()
		}
	})
}

// Close implements [Stream].
func (s *httpStream) Close() {
	s.closeWith(fmt.Errorf("%w: stream closed", ErrClosed))
	s.closeBody()
}

// closeWith ends the call; a Recv in progress or after returns cause.
func (s *httpStream) closeWith(cause error) {
	s.once.Do(func() {
		s.timer.Stop()
		s.cancel(cause)
		s.untrack()
		s.release()
	})
}
