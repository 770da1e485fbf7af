package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
)

// streamsPerConn is how many in-flight streams a pooled connection takes
// before the client opens another (up to PoolSize). Multiplexing a few
// streams per connection lets their writes coalesce; spreading beyond that
// keeps one connection's reader from becoming the bottleneck.
const streamsPerConn = 16

// tcpClient is the tcp plane's [Client].
type tcpClient struct {
	cfg    TCPConfig
	lim    Limits
	log    *slog.Logger
	dialer net.Dialer

	mu     sync.Mutex
	pools  map[string]*tcpPool
	closed bool
	wg     sync.WaitGroup // connection readers
}

// tcpPool is the set of connections to one server address.
type tcpPool struct {
	mu    sync.Mutex
	conns []*tcpClientConn
}

func newTCPClient(cfg Config, o options) *tcpClient {
	return &tcpClient{
		cfg:    cfg.TCP,
		lim:    cfg.Limits,
		log:    o.log,
		dialer: net.Dialer{Timeout: cfg.Limits.ConnectTimeout},
		pools:  make(map[string]*tcpPool),
	}
}

// maxFramePayload bounds any frame's payload: the message limit plus room
// for the endpoint and headers.
func maxFramePayload(maxMessage int) int { return maxMessage + maxHeaderBytes + 8 }

// Call implements [Client].
func (c *tcpClient) Call(ctx context.Context, addr Address, endpoint string, headers Headers, payload []byte) (Stream, error) {
	headers = withTrace(ctx, headers)
	if addr.Kind != PlaneTCP {
		return nil, fmt.Errorf("transport: tcp client cannot call a %q address", addr.Kind)
	}
	if len(payload) > c.lim.MaxMessageSize {
		return nil, tooLarge("request payload", len(payload), c.lim.MaxMessageSize)
	}
	if err := checkRequestMeta(endpoint, headers); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pool, err := c.pool(addr.Addr)
	if err != nil {
		return nil, err
	}
	var cc *tcpClientConn
	var s *muxStream
	// A pooled connection can die between being picked and being used;
	// nothing was sent on it, so one more pick is safe.
	for attempt := 0; ; attempt++ {
		if cc, err = c.conn(ctx, pool, addr.Addr); err != nil {
			return nil, err
		}
		s = newMuxStream(ctx, cc, c.lim.ChannelBuffer, c.lim.RequestTimeout)
		if err = cc.register(s); err == nil {
			break
		}
		if attempt == 1 {
			return nil, err
		}
	}
	if err := cc.w.writeRequest(s.id, endpoint, headers, payload); err != nil {
		cc.release(s)
		return nil, err
	}
	s.watchContext()
	return s, nil
}

func (c *tcpClient) pool(addr string) (*tcpPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	p := c.pools[addr]
	if p == nil {
		p = &tcpPool{}
		c.pools[addr] = p
	}
	return p, nil
}

// conn picks the least-loaded live connection, dialing a new one when all
// are busy and the pool has room.
func (c *tcpClient) conn(ctx context.Context, p *tcpPool, addr string) (*tcpClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *tcpClientConn
	live := p.conns[:0]
	for _, cc := range p.conns {
		if cc.dead.Load() {
			continue
		}
		live = append(live, cc)
		if best == nil || cc.active.Load() < best.active.Load() {
			best = cc
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
	if best != nil && (best.active.Load() < streamsPerConn || len(p.conns) >= c.cfg.PoolSize) {
		return best, nil
	}
	nc, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrCannotConnect, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	cc := &tcpClientConn{
		conn:    nc,
		w:       newConnWriter(nc, 4<<20),
		streams: make(map[uint32]*muxStream),
		maxIn:   maxFramePayload(c.lim.MaxMessageSize),
		log:     c.log,
	}
	go func() {
		defer c.wg.Done()
		cc.readLoop()
	}()
	p.conns = append(p.conns, cc)
	return cc, nil
}

// Close implements [Client].
func (c *tcpClient) Close() error {
	c.mu.Lock()
	c.closed = true
	pools := c.pools
	c.pools = map[string]*tcpPool{}
	c.mu.Unlock()
	for _, p := range pools {
		p.mu.Lock()
		for _, cc := range p.conns {
			cc.close(fmt.Errorf("%w: client closed", ErrClosed))
		}
		p.mu.Unlock()
	}
	c.wg.Wait()
	return nil
}

// tcpClientConn is one pooled connection carrying many streams.
type tcpClientConn struct {
	conn  net.Conn
	w     *connWriter
	maxIn int
	log   *slog.Logger

	active atomic.Int32
	dead   atomic.Bool

	mu      sync.Mutex
	streams map[uint32]*muxStream
	nextID  uint32
	err     error
}

func (cc *tcpClientConn) register(s *muxStream) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return cc.err
	}
	cc.nextID++
	s.id = cc.nextID
	cc.streams[s.id] = s
	cc.active.Add(1)
	return nil
}

// release implements streamLink.
func (cc *tcpClientConn) release(s *muxStream) {
	cc.mu.Lock()
	if cc.streams[s.id] == s {
		delete(cc.streams, s.id)
		cc.active.Add(-1)
	}
	cc.mu.Unlock()
}

// sendCredit implements streamLink.
func (cc *tcpClientConn) sendCredit(s *muxStream, n uint32) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	_ = cc.w.writeFrame(s.id, frameCredit, b[:], nil)
}

// sendCancel implements streamLink.
func (cc *tcpClientConn) sendCancel(s *muxStream) {
	_ = cc.w.writeFrame(s.id, frameCancel, nil, nil)
}

func (cc *tcpClientConn) readLoop() {
	r := bufio.NewReaderSize(cc.conn, 64<<10)
	var hdr [frameHeaderSize]byte
	for {
		h, p, err := readFrame(r, hdr[:], cc.maxIn)
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				err = fmt.Errorf("%w: %v", ErrDisconnected, err)
			}
			cc.close(err)
			<-cc.w.done
			return
		}
		switch h.typ {
		case frameData, frameEnd, frameError:
		default:
			cc.close(fmt.Errorf("%w: %v: client got frame type %d", ErrDisconnected, errProtocol, h.typ))
			<-cc.w.done
			return
		}
		cc.mu.Lock()
		s := cc.streams[h.stream]
		cc.mu.Unlock()
		if s == nil {
			continue // cancelled or closed locally; late frames are expected
		}
		if !s.deliver(inFrame{typ: h.typ, data: p}) {
			cc.log.Warn("transport: server overran a stream window", "remote", cc.conn.RemoteAddr().String())
		}
	}
}

// close fails the connection and every stream on it.
func (cc *tcpClientConn) close(err error) {
	cc.dead.Store(true)
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = err
	}
	streams := cc.streams
	cc.streams = map[uint32]*muxStream{}
	cc.mu.Unlock()
	cc.w.fail(err)
	_ = cc.conn.Close()
	for _, s := range streams {
		s.breakWith(err)
	}
}
