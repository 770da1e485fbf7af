package transport

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

// natsPlane is the nats plane: requests on a subject per instance
// endpoint, subject addresses.
var natsPlane = planeSpec{
	name:       PlaneNATS,
	address:    (*commonv1.Transport).GetNats,
	setAddress: func(t *commonv1.Transport, a string) { t.Nats = a },
	validate:   validNATSSubject,
	// A nats server listens on no port of its own: it subscribes at
	// the NATS server. What it would bind is the tcp setting's.
	listen:    func(cfg Config) (string, int) { return cfg.TCP.Host, cfg.TCP.Port },
	newServer: func(cfg Config, o options) Server { return newNATSServer(cfg, o) },
	newClient: func(cfg Config, o options) (Client, error) { return newNATSClient(cfg, o) },
}

// The nats plane. A server subscribes to one subject per endpoint and to
// that subject plus ".ctl" for control. A call publishes a request body (see
// appendRequestBody) with a reply subject under the client's inbox; the
// server publishes every response message there as
//
//	type    uint8              frameData, frameEnd, frameError or frameHeartbeat
//	seq     uint32 big-endian  0, 1, 2, ... per stream, so loss and reordering show
//	payload
//
// The client publishes control messages to "{subject}.ctl":
//
//	type    uint8              frameCancel or frameCredit
//	n       uint32 big-endian  credit granted (0 for cancel)
//	reply   the stream's reply subject
//
// The server heartbeats each open stream every HeartbeatInterval it has not
// otherwise published on it; a client that hears nothing for three intervals
// fails the stream with ErrDisconnected, which is how a killed worker shows.
// Heartbeats carry a reply subject under the server's own inbox: when the
// client has gone (its inbox has no subscriber) the NATS server answers with
// a no-responders status and the handler's context is cancelled, so a
// vanished caller stops the worker's generation here too.
const natsMsgHeaderLen = 5

// natsHeartbeatMisses is how many silent heartbeat intervals break a stream.
const natsHeartbeatMisses = 3

func natsConnect(cfg Config, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(cfg.NATS.URL,
		nats.Name(name),
		nats.Timeout(cfg.Limits.ConnectTimeout),
		nats.RetryOnFailedConnect(false),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: nats %s: %v", ErrCannotConnect, cfg.NATS.URL, err)
	}
	return nc, nil
}

// natsLimit is the largest payload that fits one NATS message after
// overhead bytes, and the limit's description for errors.
func natsLimit(nc *nats.Conn, maxSize, overhead int) (int, string) {
	limit := int(nc.MaxPayload()) - overhead
	if limit < maxSize {
		return limit, "the NATS server's max_payload of " + strconv.FormatInt(nc.MaxPayload(), 10) + " bytes (less framing); use DYN_REQUEST_PLANE=tcp for larger messages"
	}
	return maxSize, "DYN_TCP_MAX_MESSAGE_SIZE"
}

func natsTooLarge(what string, n, limit int, why string) error {
	return fmt.Errorf("%w: %s of %d bytes exceeds the limit of %d bytes set by %s", ErrTooLarge, what, n, limit, why)
}

// natsServer is the nats plane's [Server].
type natsServer struct {
	cfg      Config
	log      *slog.Logger
	hs       handlerSet
	instance string

	nc       *nats.Conn
	subjects map[string]string
	subs     []*nats.Subscription

	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup // heartbeat loop and handlers

	inbox   string // heartbeat replies: no responders means the client is gone
	nextTok uint64

	mu       sync.Mutex
	streams  map[string]*natsServerStream
	byToken  map[string]*natsServerStream
	early    map[string]int64 // reply -> UnixNano of a cancel that overtook its request
	closed   bool
	draining atomic.Bool
	inflight inflight
	once     sync.Once
}

func newNATSServer(cfg Config, o options) *natsServer {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &natsServer{
		cfg:      cfg,
		log:      o.log,
		instance: hex.EncodeToString(b[:]),
		subjects: map[string]string{},
		ctx:      ctx,
		cancel:   cancel,
		stop:     make(chan struct{}),
		streams:  map[string]*natsServerStream{},
		byToken:  map[string]*natsServerStream{},
		early:    map[string]int64{},
	}
}

// maxEarlyCancels bounds the cancels remembered for requests not yet seen.
const maxEarlyCancels = 1 << 16

// earlyCancelTTL is how long such a cancel is remembered.
const earlyCancelTTL = time.Minute

// Handle implements [Server].
func (s *natsServer) Handle(endpoint string, h Handler) { s.hs.set(endpoint, h) }

func (s *natsServer) subject(endpoint string) string {
	if s.cfg.NATS.Subject != nil {
		return s.cfg.NATS.Subject(endpoint)
	}
	return "switchyard." + endpoint + "." + s.instance
}

// Start implements [Server]. It returns an error wrapping ErrCannotConnect
// when the NATS server is unreachable.
func (s *natsServer) Start(context.Context) error {
	nc, err := natsConnect(s.cfg, "switchyard-request-plane-server")
	if err != nil {
		return err
	}
	s.nc = nc
	s.inbox = nc.NewRespInbox()
	hb, err := nc.Subscribe(s.inbox+".*", s.onHeartbeatReply)
	if err != nil {
		nc.Close()
		return fmt.Errorf("transport: nats subscribe %q: %w", s.inbox, err)
	}
	s.subs = append(s.subs, hb)
	for _, ep := range s.hs.endpoints() {
		subj := s.subject(ep)
		sub, err := nc.Subscribe(subj, s.onRequest)
		if err != nil {
			nc.Close()
			return fmt.Errorf("transport: nats subscribe %q: %w", subj, err)
		}
		ctl, err := nc.Subscribe(subj+".ctl", s.onControl)
		if err != nil {
			nc.Close()
			return fmt.Errorf("transport: nats subscribe %q: %w", subj+".ctl", err)
		}
		s.subjects[ep] = subj
		s.subs = append(s.subs, sub, ctl)
	}
	// Make the subscriptions visible before the address is advertised.
	if err := nc.FlushTimeout(s.cfg.Limits.ConnectTimeout); err != nil {
		nc.Close()
		return fmt.Errorf("%w: nats flush: %v", ErrCannotConnect, err)
	}
	s.log.Info("transport: nats request plane subscribed", "subjects", s.subjects)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.heartbeatLoop()
	}()
	return nil
}

// Addresses implements [Server].
func (s *natsServer) Addresses(endpoint string) []Address { return []Address{s.Address(endpoint)} }

// Address implements [Server].
func (s *natsServer) Address(endpoint string) Address {
	if subj, ok := s.subjects[endpoint]; ok {
		return Address{Kind: PlaneNATS, Addr: subj}
	}
	return Address{Kind: PlaneNATS, Addr: s.subject(endpoint)}
}

func (s *natsServer) heartbeatLoop() {
	iv := s.cfg.NATS.HeartbeatInterval
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			streams := make([]*natsServerStream, 0, len(s.streams))
			for _, st := range s.streams {
				streams = append(streams, st)
			}
			for reply, at := range s.early {
				if now.UnixNano()-at > int64(earlyCancelTTL) {
					delete(s.early, reply)
				}
			}
			s.mu.Unlock()
			for _, st := range streams {
				if now.UnixNano()-st.lastSent.Load() >= int64(iv)/2 {
					_ = st.publish(frameHeartbeat, nil)
				}
			}
		}
	}
}

func (s *natsServer) reply(reply string, seq uint32, typ byte, p []byte) {
	msg := make([]byte, natsMsgHeaderLen, natsMsgHeaderLen+len(p))
	msg[0] = typ
	binary.BigEndian.PutUint32(msg[1:], seq)
	_ = s.nc.Publish(reply, append(msg, p...))
}

func (s *natsServer) onRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	req, err := parseRequestBody(m.Data)
	if err != nil {
		s.reply(m.Reply, 0, frameError, appendErrorBody(nil, &HandlerError{Code: CodeUnknown, Message: err.Error()}))
		return
	}
	h, herr := s.hs.get(req.Endpoint)
	if herr != nil {
		s.reply(m.Reply, 0, frameError, appendErrorBody(nil, herr))
		return
	}
	if len(req.Payload) > s.cfg.Limits.MaxMessageSize {
		s.reply(m.Reply, 0, frameError, appendErrorBody(nil, &HandlerError{Code: CodeTooLarge, Message: tooLarge("request payload", len(req.Payload), s.cfg.Limits.MaxMessageSize).Error()}))
		return
	}
	if s.draining.Load() || !s.inflight.add() {
		s.reply(m.Reply, 0, frameError, appendErrorBody(nil, drainingError()))
		return
	}
	// The payload aliases the message, which nats.go does not reuse.
	ctx, cancel := context.WithCancel(s.ctx)
	limit, why := natsLimit(s.nc, s.cfg.Limits.MaxMessageSize, natsMsgHeaderLen)
	st := &natsServerStream{srv: s, reply: m.Reply, ctx: ctx, cancel: cancel, win: newWindow(s.cfg.Limits.ChannelBuffer), max: limit, why: why}
	st.lastSent.Store(time.Now().UnixNano())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		s.inflight.done()
		return
	}
	if _, ok := s.early[m.Reply]; ok {
		// The request and control subjects are separate subscriptions,
		// so a quick cancel can arrive first; honour it.
		delete(s.early, m.Reply)
		s.mu.Unlock()
		cancel()
		s.inflight.done()
		return
	}
	s.nextTok++
	st.token = strconv.FormatUint(s.nextTok, 36)
	s.streams[m.Reply] = st
	s.byToken[st.token] = st
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer s.inflight.done()
		err := runHandler(ctx, h, req, st)
		s.mu.Lock()
		delete(s.streams, m.Reply)
		delete(s.byToken, st.token)
		s.mu.Unlock()
		cancelled := ctx.Err() != nil
		cancel()
		if cancelled {
			return
		}
		if err != nil {
			_ = st.publish(frameError, appendErrorBody(nil, toHandlerError(err)))
			return
		}
		_ = st.publish(frameEnd, nil)
	}()
}

// onHeartbeatReply cancels a stream whose client inbox has no subscriber.
func (s *natsServer) onHeartbeatReply(m *nats.Msg) {
	if m.Header.Get("Status") != "503" {
		return
	}
	tok := m.Subject[len(s.inbox)+1:]
	s.mu.Lock()
	st := s.byToken[tok]
	s.mu.Unlock()
	if st != nil {
		s.log.Debug("transport: nats client gone; cancelling handler", "reply", st.reply)
		st.cancel()
	}
}

func (s *natsServer) onControl(m *nats.Msg) {
	if len(m.Data) < natsMsgHeaderLen {
		return
	}
	reply := string(m.Data[natsMsgHeaderLen:])
	s.mu.Lock()
	st := s.streams[reply]
	if st == nil && m.Data[0] == frameCancel && len(s.early) < maxEarlyCancels {
		s.early[reply] = time.Now().UnixNano()
	}
	s.mu.Unlock()
	if st == nil {
		return
	}
	switch m.Data[0] {
	case frameCancel:
		st.cancel()
	case frameCredit:
		st.win.add(int64(binary.BigEndian.Uint32(m.Data[1:])))
	}
}

// Drain implements [Server].
func (s *natsServer) Drain(ctx context.Context) error {
	s.draining.Store(true)
	err := s.inflight.wait(ctx)
	s.Close()
	return err
}

// Close implements [Server]. Open streams end with a CodeDisconnected
// error, which matches ErrDisconnected.
func (s *natsServer) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		streams := s.streams
		s.streams = map[string]*natsServerStream{}
		s.byToken = map[string]*natsServerStream{}
		s.mu.Unlock()
		for _, sub := range s.subs {
			_ = sub.Unsubscribe()
		}
		close(s.stop)
		if s.nc != nil && !s.nc.IsClosed() {
			for _, st := range streams {
				st.closeWith(&HandlerError{Code: CodeDisconnected, Message: "server closed"})
			}
		}
		s.cancel()
		s.wg.Wait()
		if s.nc != nil {
			_ = s.nc.Flush()
			s.nc.Close()
		}
	})
	s.wg.Wait()
	return nil
}

// natsServerStream is the nats plane's [ResponseWriter].
type natsServerStream struct {
	srv    *natsServer
	reply  string
	token  string
	ctx    context.Context
	cancel context.CancelFunc
	win    *window
	max    int
	why    string

	mu       sync.Mutex
	seq      uint32
	ended    bool
	lastSent atomic.Int64
}

// Send implements [ResponseWriter]. A payload over the NATS server's
// max_payload fails at once with ErrTooLarge.
func (st *natsServerStream) Send(p []byte) error {
	if len(p) > st.max {
		return natsTooLarge("response payload", len(p), st.max, st.why)
	}
	if err := st.win.acquire(st.ctx); err != nil {
		return err
	}
	return st.publish(frameData, p)
}

func (st *natsServerStream) publish(typ byte, p []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended {
		return fmt.Errorf("%w: stream ended", ErrClosed)
	}
	if typ == frameEnd || typ == frameError {
		st.ended = true
	}
	msg := make([]byte, natsMsgHeaderLen, natsMsgHeaderLen+len(p))
	msg[0] = typ
	binary.BigEndian.PutUint32(msg[1:], st.seq)
	st.seq++
	st.lastSent.Store(time.Now().UnixNano())
	out := &nats.Msg{Subject: st.reply, Data: append(msg, p...)}
	if typ == frameHeartbeat {
		out.Reply = st.srv.inbox + "." + st.token
	}
	if err := st.srv.nc.PublishMsg(out); err != nil {
		return fmt.Errorf("%w: nats publish: %v", ErrDisconnected, err)
	}
	return nil
}

func (st *natsServerStream) closeWith(he *HandlerError) {
	_ = st.publish(frameError, appendErrorBody(nil, he))
}

// natsClient is the nats plane's [Client].
type natsClient struct {
	cfg    Config
	log    *slog.Logger
	nc     *nats.Conn
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	streams map[string]*natsClientStream
	next    uint64
	closed  bool

	stop chan struct{}
	wg   sync.WaitGroup // watchdog
}

// natsClientStream is a muxStream plus the dispatcher's sequence check.
type natsClientStream struct {
	ms      *muxStream
	nextSeq uint32
}

func newNATSClient(cfg Config, o options) (*natsClient, error) {
	nc, err := natsConnect(cfg, "switchyard-request-plane-client")
	if err != nil {
		return nil, err
	}
	c := &natsClient{cfg: cfg, log: o.log, nc: nc, prefix: nc.NewRespInbox(), streams: map[string]*natsClientStream{}, stop: make(chan struct{})}
	sub, err := nc.Subscribe(c.prefix+".*", c.dispatch)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("transport: nats subscribe inbox: %w", err)
	}
	// Credit bounds what each stream may have in flight; the subscription
	// must never drop what credit allowed.
	_ = sub.SetPendingLimits(-1, -1)
	c.sub = sub
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.watchdog()
	}()
	return c, nil
}

// Call implements [Client]. A request over the NATS server's max_payload
// fails at once with ErrTooLarge; a subject nobody serves fails Recv with
// ErrCannotConnect (no responders).
func (c *natsClient) Call(ctx context.Context, addr Address, endpoint string, headers Headers, payload []byte) (Stream, error) {
	headers = withTrace(ctx, headers)
	if addr.Kind != PlaneNATS {
		return nil, fmt.Errorf("transport: nats client cannot call a %q address", addr.Kind)
	}
	if err := checkRequestMeta(endpoint, headers); err != nil {
		return nil, err
	}
	overhead := requestBodySize(endpoint, headers, nil)
	if limit, why := natsLimit(c.nc, c.cfg.Limits.MaxMessageSize, overhead); len(payload) > limit {
		return nil, natsTooLarge("request payload", len(payload), limit, why)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ms := newMuxStream(ctx, c, c.cfg.Limits.ChannelBuffer, c.cfg.Limits.RequestTimeout)
	ms.route = addr.Addr + ".ctl"
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.next++
	ms.key = strconv.FormatUint(c.next, 36)
	c.streams[ms.key] = &natsClientStream{ms: ms}
	c.mu.Unlock()
	body := make([]byte, 0, overhead+len(payload))
	body = appendRequestBody(body, endpoint, headers, payload)
	if err := c.nc.PublishRequest(addr.Addr, c.prefix+"."+ms.key, body); err != nil {
		c.release(ms)
		if errors.Is(err, nats.ErrMaxPayload) {
			return nil, fmt.Errorf("%w: nats publish: %v (the NATS server's max_payload is %d bytes; use DYN_REQUEST_PLANE=tcp for larger messages)", ErrTooLarge, err, c.nc.MaxPayload())
		}
		return nil, fmt.Errorf("%w: nats publish: %v", ErrCannotConnect, err)
	}
	ms.watchContext()
	return ms, nil
}

func (c *natsClient) dispatch(m *nats.Msg) {
	key := m.Subject[len(c.prefix)+1:]
	c.mu.Lock()
	cs := c.streams[key]
	c.mu.Unlock()
	if cs == nil {
		return
	}
	ms := cs.ms
	ms.lastSeen.Store(time.Now().UnixNano())
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		ms.breakWith(fmt.Errorf("%w: no responders on nats subject %q", ErrCannotConnect, ms.route[:len(ms.route)-len(".ctl")]))
		return
	}
	if len(m.Data) < natsMsgHeaderLen {
		ms.breakWith(fmt.Errorf("%w: %v: short nats message", ErrDisconnected, errProtocol))
		return
	}
	seq := binary.BigEndian.Uint32(m.Data[1:])
	if seq != cs.nextSeq {
		ms.breakWith(fmt.Errorf("%w: nats message lost or reordered: got sequence %d, want %d", ErrDisconnected, seq, cs.nextSeq))
		return
	}
	cs.nextSeq++
	typ := m.Data[0]
	if typ == frameHeartbeat {
		// Liveness only: the request timeout still waits for a response,
		// as on the other planes.
		return
	}
	ms.deliver(inFrame{typ: typ, data: m.Data[natsMsgHeaderLen:]})
}

// watchdog fails streams whose server has gone silent.
func (c *natsClient) watchdog() {
	iv := c.cfg.NATS.HeartbeatInterval
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			limit := int64(iv) * natsHeartbeatMisses
			c.mu.Lock()
			for _, cs := range c.streams {
				ms := cs.ms
				if ms.gotFirst.Load() && now.UnixNano()-ms.lastSeen.Load() > limit {
					ms.breakWith(fmt.Errorf("%w: no message or heartbeat from the server for %v", ErrDisconnected, time.Duration(limit)))
				}
			}
			c.mu.Unlock()
		}
	}
}

func (c *natsClient) control(s *muxStream, typ byte, n uint32) {
	msg := make([]byte, natsMsgHeaderLen, natsMsgHeaderLen+len(c.prefix)+1+len(s.key))
	msg[0] = typ
	binary.BigEndian.PutUint32(msg[1:], n)
	msg = append(msg, c.prefix...)
	msg = append(msg, '.')
	msg = append(msg, s.key...)
	_ = c.nc.Publish(s.route, msg)
}

// sendCredit implements streamLink.
func (c *natsClient) sendCredit(s *muxStream, n uint32) { c.control(s, frameCredit, n) }

// sendCancel implements streamLink.
func (c *natsClient) sendCancel(s *muxStream) { c.control(s, frameCancel, 0) }

// release implements streamLink.
func (c *natsClient) release(s *muxStream) {
	c.mu.Lock()
	delete(c.streams, s.key)
	c.mu.Unlock()
}

// Close implements [Client].
func (c *natsClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	streams := c.streams
	c.streams = map[string]*natsClientStream{}
	c.mu.Unlock()
	for _, cs := range streams {
		cs.ms.breakWith(fmt.Errorf("%w: client closed", ErrClosed))
		c.sendCancel(cs.ms)
	}
	_ = c.nc.Flush()
	close(c.stop)
	c.wg.Wait()
	_ = c.sub.Unsubscribe()
	c.nc.Close()
	return nil
}
