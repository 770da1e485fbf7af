package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// inFrame is one server-to-client frame handed from a connection's reader to
// the stream that owns it.
type inFrame struct {
	typ  byte
	data []byte
}

// streamLink is what a muxStream needs from the plane that carries it.
type streamLink interface {
	// sendCredit grants the server n more data frames for the stream.
	sendCredit(s *muxStream, n uint32)
	// sendCancel asks the server to cancel the stream's handler.
	sendCancel(s *muxStream)
	// release forgets the stream; no frame is delivered after it.
	release(s *muxStream)
}

// muxStream is the client side of one call on a multiplexed plane (tcp,
// nats). The plane's reader delivers frames; the server never sends more than
// window data frames beyond what Recv has granted back, so deliver never
// blocks, the queue stays bounded, and one slow stream cannot stall its
// connection.
type muxStream struct {
	id     uint32
	key    string // nats: the reply subject token
	route  string // nats: the server's control subject
	link   streamLink
	ctx    context.Context
	window int

	// The queue of delivered frames grows as needed up to window+2 (data
	// frames plus the end or error frame); it starts in qbuf, so a short
	// call allocates none. broken is set by breakWith, with brokenErr.
	qmu       sync.Mutex
	q         []inFrame
	qbuf      [2]inFrame
	head      int
	broken    bool
	brokenErr error
	ready     chan struct{} // signalled after each delivery and on a break

	// lastSeen is the UnixNano of the last frame delivered (nats watchdog).
	lastSeen atomic.Int64
	// gotFirst is set once any frame arrived.
	gotFirst atomic.Bool

	// Fields below are owned by the goroutine calling Recv.
	deadline time.Time // first-response deadline
	timeout  time.Duration
	consumed int
	err      error
	stopCtx  func() bool
	closed   atomic.Bool
}

func newMuxStream(ctx context.Context, link streamLink, window int, timeout time.Duration) *muxStream {
	s := &muxStream{
		link:     link,
		ctx:      ctx,
		ready:    make(chan struct{}, 1),
		window:   window,
		deadline: time.Now().Add(timeout),
		timeout:  timeout,
	}
	s.q = s.qbuf[:0]
	return s
}

// watchContext cancels the remote handler when the call's context ends,
// without a goroutine per stream.
func (s *muxStream) watchContext() {
	if s.ctx.Done() == nil {
		return // the context never ends
	}
	s.stopCtx = context.AfterFunc(s.ctx, func() {
		if !s.closed.Load() {
			s.link.sendCancel(s)
		}
	})
}

// deliver hands a frame to the stream. It reports false if the frame
// overflowed the window, a protocol violation.
func (s *muxStream) deliver(f inFrame) bool {
	s.gotFirst.Store(true)
	s.qmu.Lock()
	if len(s.q)-s.head >= s.window+2 {
		s.qmu.Unlock()
		s.breakWith(fmt.Errorf("%w: server exceeded the stream window of %d", ErrDisconnected, s.window))
		return false
	}
	s.q = append(s.q, f)
	s.qmu.Unlock()
	s.signal()
	return true
}

// signal wakes Recv if it waits.
func (s *muxStream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Pending implements [Pending].
func (s *muxStream) Pending() bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.head < len(s.q)
}

// pop takes the oldest delivered frame. With none, it reports the error the
// stream broke with, if it did: frames that arrived before a break still
// count.
func (s *muxStream) pop() (f inFrame, ok bool, broken error) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.head == len(s.q) {
		if s.broken {
			return inFrame{}, false, s.brokenErr
		}
		return inFrame{}, false, nil
	}
	f = s.q[s.head]
	s.q[s.head] = inFrame{}
	s.head++
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	}
	return f, true, nil
}

// breakWith fails the stream with err unless frames already queued finish it.
func (s *muxStream) breakWith(err error) {
	s.qmu.Lock()
	if s.broken {
		s.qmu.Unlock()
		return
	}
	s.broken, s.brokenErr = true, err
	s.qmu.Unlock()
	s.signal()
}

// timers recycles the first-response timers of streams.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// Recv implements [Stream].
func (s *muxStream) Recv() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	var timeout <-chan time.Time
	for {
		f, ok, broken := s.pop()
		if ok {
			return s.handle(f)
		}
		if broken != nil {
			return nil, s.finish(broken, false)
		}
		if timeout == nil && !s.gotFirst.Load() {
			t := timers.Get().(*time.Timer)
			t.Reset(time.Until(s.deadline))
			defer func() {
				t.Stop() // since Go 1.23 a stopped timer's channel holds no stale tick
				timers.Put(t)
			}()
			timeout = t.C
		}
		select {
		case <-s.ready:
		case <-s.ctx.Done():
			return nil, s.finish(s.ctx.Err(), true)
		case <-timeout:
			if f, ok, _ := s.pop(); ok {
				return s.handle(f)
			}
			return nil, s.finish(fmt.Errorf("%w: no response within %v", ErrTimeout, s.timeout), true)
		}
	}
}

// handle turns one frame into Recv's result.
func (s *muxStream) handle(f inFrame) ([]byte, error) {
	switch f.typ {
	case frameData:
		s.consumed++
		if s.consumed >= (s.window+1)/2 {
			s.link.sendCredit(s, uint32(s.consumed))
			s.consumed = 0
		}
		return f.data, nil
	case frameEnd:
		return nil, s.finish(io.EOF, false)
	case frameError:
		he, err := parseErrorBody(f.data)
		if err != nil {
			return nil, s.finish(fmt.Errorf("%w: %v", ErrDisconnected, err), true)
		}
		return nil, s.finish(he, false)
	default:
		return nil, s.finish(fmt.Errorf("%w: unexpected frame type %d", ErrDisconnected, f.typ), true)
	}
}

// finish records the terminal error (on the Recv goroutine) and shuts the
// stream down.
func (s *muxStream) finish(err error, cancelRemote bool) error {
	s.err = err
	s.shutdown(cancelRemote)
	return err
}

// shutdown releases the stream once, cancelling the handler if the stream
// did not end on the server's side.
func (s *muxStream) shutdown(cancelRemote bool) {
	if s.closed.CompareAndSwap(false, true) {
		if s.stopCtx != nil {
			s.stopCtx()
		}
		if cancelRemote {
			s.link.sendCancel(s)
		}
		s.link.release(s)
	}
}

// Close implements [Stream]. It may be called concurrently with Recv, which
// then returns ErrClosed.
func (s *muxStream) Close() {
	s.breakWith(fmt.Errorf("%w: stream closed", ErrClosed))
	s.shutdown(true)
}

// window is a server-side stream's credit: how many more data frames the
// client has room for.
type window struct {
	n   atomic.Int64
	sig chan struct{}
}

func newWindow(n int) *window {
	w := &window{}
	w.init(n)
	return w
}

// init readies a zero window with n credits.
func (w *window) init(n int) {
	w.sig = make(chan struct{}, 1)
	w.n.Store(int64(n))
}

// acquire takes one credit, blocking until the client grants one or ctx
// ends. Only one goroutine acquires per window.
func (w *window) acquire(ctx context.Context) error {
	for w.n.Load() <= 0 {
		select {
		case <-w.sig:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.n.Add(-1)
	return nil
}

// add grants n credits.
func (w *window) add(n int64) {
	w.n.Add(n)
	select {
	case w.sig <- struct{}{}:
	default:
	}
}

// connWriter coalesces frames from many goroutines onto one connection.
// Writers append frames to a pending buffer; one flusher goroutine writes
// the whole buffer in one syscall whenever it is non-empty, so every frame
// queued while the previous write was in the kernel goes out together (the
// buffer is flushed when the queue drains, never held back by a timer). A
// request is the exception: its caller writes it itself when no write is in
// progress, since it has nothing else to do until the answer comes. The
// buffer is bounded: writers block while it holds more than maxPending
// bytes, which is the connection-level back-pressure.
type connWriter struct {
	conn       net.Conn
	maxPending int
	done       chan struct{} // closed when the flusher has exited

	mu       sync.Mutex
	notEmpty sync.Cond
	notFull  sync.Cond
	buf      []byte
	spare    []byte
	busy     bool // a write is in the kernel
	err      error
}

// newConnWriter starts the flusher. The owner must call fail and then wait
// for done.
func newConnWriter(c net.Conn, maxPending int) *connWriter {
	w := &connWriter{conn: c, maxPending: maxPending, done: make(chan struct{}),
		buf: make([]byte, 0, 64<<10), spare: make([]byte, 0, 64<<10)}
	w.notEmpty.L = &w.mu
	w.notFull.L = &w.mu
	go w.flushLoop()
	return w
}

// writeFrame queues one frame: a header, then body, then payload (either
// may be nil). It returns the connection's error once it has failed.
func (w *connWriter) writeFrame(stream uint32, typ byte, body, payload []byte) error {
	if err := w.lock(); err != nil {
		return err
	}
	wasEmpty := len(w.buf) == 0
	w.buf = appendFrameHeader(w.buf, frameHeader{stream: stream, typ: typ, length: uint32(len(body) + len(payload))})
	w.buf = append(w.buf, body...)
	w.buf = append(w.buf, payload...)
	w.unlock(wasEmpty, false)
	return nil
}

// writeRequest queues a request frame, encoding its body straight into the
// buffer. Its caller has nothing else to do until the answer comes, so if no
// write is in progress it writes the frame (and anything queued) itself,
// sparing the hand-off to the flusher.
func (w *connWriter) writeRequest(stream uint32, endpoint string, headers Headers, payload []byte) error {
	if err := w.lock(); err != nil {
		return err
	}
	w.buf = appendFrameHeader(w.buf, frameHeader{stream: stream, typ: frameRequest, length: uint32(requestBodySize(endpoint, headers, payload))})
	w.buf = appendRequestBody(w.buf, endpoint, headers, payload)
	w.unlock(false, true)
	return nil
}

// lock takes w.mu once the buffer has room, or returns the connection's
// error (unlocked) once it has failed.
func (w *connWriter) lock() error {
	w.mu.Lock()
	for len(w.buf) > w.maxPending && w.err == nil {
		w.notFull.Wait()
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	return nil
}

// unlock releases w.mu after frames were appended: it writes them now if
// asked to and no write is in progress, or wakes the flusher if the buffer
// was empty before (a write in progress wakes it when it returns).
func (w *connWriter) unlock(wasEmpty, now bool) {
	switch {
	case w.busy:
	case now:
		w.writeLocked()
	case wasEmpty:
		w.notEmpty.Signal()
	}
	w.mu.Unlock()
}

// writeLocked writes the pending buffer; w.mu is held on entry and exit and
// released during the write.
func (w *connWriter) writeLocked() {
	b := w.buf
	w.buf = w.spare[:0]
	w.busy = true
	w.mu.Unlock()
	_, err := w.conn.Write(b)
	w.mu.Lock()
	w.busy = false
	if cap(b) <= 1<<20 {
		w.spare = b[:0]
	} else {
		w.spare = make([]byte, 0, 64<<10)
	}
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("%w: %v", ErrDisconnected, err)
	}
	if len(w.buf) > 0 {
		w.notEmpty.Signal()
	}
	w.notFull.Broadcast()
}

func (w *connWriter) flushLoop() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for (len(w.buf) == 0 || w.busy) && w.err == nil {
			w.notEmpty.Wait()
		}
		if w.err != nil {
			return
		}
		w.writeLocked()
	}
}

// flushPending waits until every queued frame has been written, the
// connection failed, or ctx ended.
func (w *connWriter) flushPending(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.notFull.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	for (len(w.buf) > 0 || w.busy) && w.err == nil && ctx.Err() == nil {
		w.notFull.Wait()
	}
	w.mu.Unlock()
}

// fail makes every later write return err and stops the flusher; frames
// still pending are dropped.
func (w *connWriter) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.notEmpty.Broadcast()
	w.notFull.Broadcast()
}
