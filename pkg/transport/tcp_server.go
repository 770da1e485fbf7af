package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

// tcpPlane is the tcp plane: binary frames over TCP connections, host:port
// addresses.
var tcpPlane = planeSpec{
	name:       PlaneTCP,
	address:    (*commonv1.Transport).GetTcp,
	setAddress: func(t *commonv1.Transport, a string) { t.Tcp = a },
	validate:   validTCPAddr,
	listen:     func(cfg Config) (string, int) { return cfg.TCP.Host, cfg.TCP.Port },
	newServer:  func(cfg Config, o options) Server { return newTCPServer(cfg, o) },
	newClient:  func(cfg Config, o options) (Client, error) { return newTCPClient(cfg, o), nil },
}

// tcpServer is the tcp plane's [Server].
type tcpServer struct {
	cfg TCPConfig
	lim Limits
	log *slog.Logger
	hs  handlerSet

	ln        net.Listener
	advertise string

	mu     sync.Mutex
	conns  map[*tcpServerConn]struct{}
	closed bool

	wg       sync.WaitGroup // accept loop, connection readers, handlers
	workers  workerPool     // goroutines for connection readers and handlers
	draining atomic.Bool
	inflight inflight
}

func newTCPServer(cfg Config, o options) *tcpServer {
	return &tcpServer{cfg: cfg.TCP, lim: cfg.Limits, log: o.log, conns: make(map[*tcpServerConn]struct{})}
}

// Handle implements [Server].
func (s *tcpServer) Handle(endpoint string, h Handler) { s.hs.set(endpoint, h) }

// Start implements [Server].
func (s *tcpServer) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port)))
	if err != nil {
		return fmt.Errorf("transport: tcp listen: %w", err)
	}
	s.ln = ln
	s.advertise = advertiseAddr(ln.Addr())
	s.log.Info("transport: tcp request plane listening", "addr", s.advertise)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.acceptLoop()
	}()
	return nil
}

// advertiseAddr replaces an unspecified bind address with a routable one.
func advertiseAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = DetectHost()
	}
	return net.JoinHostPort(host, strconv.Itoa(ta.Port))
}

// Address implements [Server].
func (s *tcpServer) Address(string) Address { return Address{Kind: PlaneTCP, Addr: s.advertise} }

// Addresses implements [Server].
func (s *tcpServer) Addresses(ep string) []Address { return []Address{s.Address(ep)} }

func (s *tcpServer) acceptLoop() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		sc := &tcpServerConn{
			srv:     s,
			conn:    nc,
			w:       newConnWriter(nc, 4<<20),
			streams: make(map[uint32]*tcpServerStream),
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			sc.w.fail(ErrClosed)
			nc.Close()
			<-sc.w.done
			return
		}
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.workers.run(func() {
			defer s.wg.Done()
			sc.readLoop(bufio.NewReaderSize(nc, 64<<10))
		})
	}
}

// Drain implements [Server].
func (s *tcpServer) Drain(ctx context.Context) error {
	s.draining.Store(true)
	err := s.inflight.wait(ctx)
	if err == nil {
		// Let the last responses reach the wire before the connections close.
		s.mu.Lock()
		conns := make([]*tcpServerConn, 0, len(s.conns))
		for sc := range s.conns {
			conns = append(conns, sc)
		}
		s.mu.Unlock()
		for _, sc := range conns {
			sc.w.flushPending(ctx)
		}
	}
	s.Close()
	return err
}

// Close implements [Server].
func (s *tcpServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		s.workers.close()
		return nil
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	// Drop connections before cancelling handlers, so that a handler's
	// return cannot reach the client as a clean end or a handler error.
	for sc := range conns {
		sc.w.fail(fmt.Errorf("%w: server closed", ErrClosed))
		sc.conn.Close()
	}
	for sc := range conns {
		sc.cancelAll()
	}
	s.wg.Wait()
	s.workers.close()
	return nil
}

// tcpServerConn is one accepted connection.
type tcpServerConn struct {
	srv  *tcpServer
	conn net.Conn
	w    *connWriter

	// streams holds the running handlers' streams. Their contexts are not
	// children of a connection context (registering a child with a parent
	// costs a lock and a map entry per request); cancelAll ends them
	// instead, and gone refuses streams after it.
	mu      sync.Mutex
	streams map[uint32]*tcpServerStream
	gone    bool
}

// tcpServerStream is the server side of one stream; it is the handler's
// [ResponseWriter].
type tcpServerStream struct {
	sc     *tcpServerConn
	id     uint32
	ctx    context.Context
	cancel context.CancelFunc
	win    window
	max    int
	h      Handler
	req    *Request
}

// Send implements [ResponseWriter].
func (st *tcpServerStream) Send(p []byte) error {
	if len(p) > st.max {
		return tooLarge("response payload", len(p), st.max)
	}
	if err := st.win.acquire(st.ctx); err != nil {
		return err
	}
	return st.sc.w.writeFrame(st.id, frameData, nil, p)
}

// readLoop reads the connection's frames. When a request arrives it hands
// the reader to another goroutine of the pool and runs the handler itself:
// the handler starts without waiting for a goroutine to be scheduled, and the
// hand-off is off the request's critical path.
func (sc *tcpServerConn) readLoop(r *bufio.Reader) {
	var hdr [frameHeaderSize]byte
	maxIn := maxFramePayload(sc.srv.lim.MaxMessageSize)
	for {
		h, p, err := readFrame(r, hdr[:], maxIn)
		if err != nil {
			if errors.Is(err, errProtocol) {
				sc.srv.log.Warn("transport: closing tcp connection", "remote", sc.conn.RemoteAddr().String(), "err", err)
			}
			sc.shutdown()
			return
		}
		switch h.typ {
		case frameRequest:
			if run := sc.startStream(h.stream, p); run != nil {
				sc.srv.wg.Add(1)
				sc.srv.workers.run(func() {
					defer sc.srv.wg.Done()
					sc.readLoop(r)
				})
				run()
				return
			}
		case frameCancel:
			if st := sc.stream(h.stream); st != nil {
				st.cancel()
			}
		case frameCredit:
			if st := sc.stream(h.stream); st != nil {
				st.win.add(int64(binary.BigEndian.Uint32(p)))
			}
		default:
			sc.srv.log.Warn("transport: closing tcp connection", "remote", sc.conn.RemoteAddr().String(), "err", "unexpected frame type", "type", h.typ)
			sc.shutdown()
			return
		}
	}
}

// shutdown closes the connection and cancels every handler on it.
func (sc *tcpServerConn) shutdown() {
	sc.srv.mu.Lock()
	delete(sc.srv.conns, sc)
	sc.srv.mu.Unlock()
	sc.w.fail(fmt.Errorf("%w: connection closed", ErrDisconnected))
	sc.conn.Close()
	sc.cancelAll()
	<-sc.w.done
}

// cancelAll ends the context of every handler on the connection, and of any
// started later.
func (sc *tcpServerConn) cancelAll() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.gone = true
	for _, st := range sc.streams {
		st.cancel()
	}
}

func (sc *tcpServerConn) stream(id uint32) *tcpServerStream {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.streams[id]
}

func (sc *tcpServerConn) sendError(id uint32, he *HandlerError) {
	_ = sc.w.writeFrame(id, frameError, appendErrorBody(nil, he), nil)
}

// startStream validates a request and registers its stream. It returns the
// function that runs the handler, or nil if the request was refused (the
// client has been sent the error).
func (sc *tcpServerConn) startStream(id uint32, body []byte) func() {
	srv := sc.srv
	req, err := parseRequestBody(body)
	if err != nil {
		sc.sendError(id, &HandlerError{Code: CodeUnknown, Message: err.Error()})
		return nil
	}
	if len(req.Payload) > srv.lim.MaxMessageSize {
		sc.sendError(id, &HandlerError{Code: CodeTooLarge, Message: tooLarge("request payload", len(req.Payload), srv.lim.MaxMessageSize).Error()})
		return nil
	}
	h, herr := srv.hs.get(req.Endpoint)
	if herr != nil {
		sc.sendError(id, herr)
		return nil
	}
	if srv.draining.Load() || !srv.inflight.add() {
		sc.sendError(id, drainingError())
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &tcpServerStream{sc: sc, id: id, ctx: ctx, cancel: cancel, max: srv.lim.MaxMessageSize, h: h, req: req}
	st.win.init(srv.lim.ChannelBuffer)
	sc.mu.Lock()
	if sc.gone {
		cancel()
	}
	if old := sc.streams[id]; old != nil {
		old.cancel()
	}
	sc.streams[id] = st
	sc.mu.Unlock()
	return st.run
}

// run runs the stream's handler and ends the stream.
func (st *tcpServerStream) run() {
	sc := st.sc
	defer sc.srv.inflight.done()
	err := runHandler(st.ctx, st.h, st.req, st)
	// End the stream before any bookkeeping, so the end frame usually
	// joins the last response in the flusher's next write.
	if st.ctx.Err() == nil { // else the client cancelled or the connection is gone
		if err != nil {
			sc.sendError(st.id, toHandlerError(err))
		} else {
			_ = sc.w.writeFrame(st.id, frameEnd, nil, nil)
		}
	}
	sc.mu.Lock()
	if sc.streams[st.id] == st {
		delete(sc.streams, st.id)
	}
	sc.mu.Unlock()
	st.cancel()
}

// runHandler calls h, turning a panic into an error for the client.
func runHandler(ctx context.Context, h Handler, req *Request, w ResponseWriter) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &HandlerError{Code: CodeInternal, Message: fmt.Sprintf("handler panic: %v\n%s", r, debug.Stack())}
		}
	}()
	return h(traceContext(ctx, req), req, w)
}

func drainingError() *HandlerError {
	return &HandlerError{Code: CodeDraining, Message: "server is draining; retry on another instance"}
}

// handlerSet maps endpoint names to handlers.
type handlerSet struct {
	mu sync.RWMutex
	m  map[string]Handler
}

func (hs *handlerSet) set(endpoint string, h Handler) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.m == nil {
		hs.m = make(map[string]Handler)
	}
	hs.m[endpoint] = h
}

func (hs *handlerSet) get(endpoint string) (Handler, *HandlerError) {
	hs.mu.RLock()
	h := hs.m[endpoint]
	hs.mu.RUnlock()
	if h == nil {
		return nil, &HandlerError{Code: CodeNoHandler, Message: fmt.Sprintf("no handler for endpoint %q", endpoint)}
	}
	return h, nil
}

func (hs *handlerSet) endpoints() []string {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	out := make([]string, 0, len(hs.m))
	for k := range hs.m {
		out = append(out, k)
	}
	return out
}

// inflight counts running handlers so Drain can wait for them.
type inflight struct {
	mu      sync.Mutex
	n       int
	stopped bool
	zero    chan struct{}
}

// add counts a new handler; it reports false once draining has finished.
func (f *inflight) add() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	f.n++
	return true
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.zero != nil {
		close(f.zero)
		f.zero = nil
	}
}

// wait blocks until no handler runs or ctx ends.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.n == 0 {
		f.stopped = true
		f.mu.Unlock()
		return nil
	}
	if f.zero == nil {
		f.zero = make(chan struct{})
	}
	zero := f.zero
	f.mu.Unlock()
	select {
	case <-zero:
		f.mu.Lock()
		f.stopped = true
		f.mu.Unlock()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("transport: drain: in-flight requests still running: %w", ctx.Err())
	}
}
