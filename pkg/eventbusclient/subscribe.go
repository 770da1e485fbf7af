package eventbusclient

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("eventbus: subscription closed")

// Subscription is a subscription that survives eventbus and NATS restarts: a
// durable one resumes from its consumer's position, an ephemeral one from the
// stream sequence after the last event it received. Events may be delivered
// more than once around a failover (at-least-once); acknowledged events are
// not delivered again.
//
// A Subscription has no goroutine of its own: Next reads the stream and, when
// it breaks, opens it again. Next is not safe for concurrent use; Close may
// be called at any time.
type Subscription struct {
	c      *Client
	ctx    context.Context // the subscription's life; Close cancels it
	cancel context.CancelFunc

	// nextMu is held by Next for its whole call, and by Close to wait for it.
	nextMu       sync.Mutex
	req          *eventbusv1.SubscribeRequest
	stream       eventbusv1.EventBusService_SubscribeClient // nil: to (re)open
	streamCancel context.CancelFunc
	buf          []*eventbusv1.DeliveredEvent // received, not yet returned
	lastSeq      uint64
	bo           *backoff.Backoff // the wait before the next reopening
	err          error            // final error, once there is one

	mu       sync.Mutex
	consumer string
}

// Subscribe opens a subscription. Errors that retrying cannot fix
// (InvalidArgument, NotFound) are returned here; later ones by Next. The
// subscription lasts until Close or until ctx ends.
func (c *Client) Subscribe(ctx context.Context, req *eventbusv1.SubscribeRequest) (*Subscription, error) {
	sctx, cancel := context.WithCancel(ctx)
	s := &Subscription{c: c, ctx: sctx, cancel: cancel, req: proto.CloneOf(req), bo: c.backoff()}
	if err := c.retry(sctx, "subscribe", func() error { return s.open(sctx) }); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// open starts one Subscribe call and waits for the server to accept it: the
// header it sends once its consumer exists, or its first error.
func (s *Subscription) open(ctx context.Context) error {
	sctx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	stream, err := s.c.raw.Subscribe(sctx, s.req)
	if err == nil {
		err = accepted(stream)
	}
	if err != nil {
		cancel()
		return err
	}
	s.stream, s.streamCancel = stream, cancel
	return nil
}

// accepted waits for the header that names the consumer.
func accepted(stream eventbusv1.EventBusService_SubscribeClient) error {
	md, err := stream.Header()
	if err != nil {
		return err
	}
	if len(md.Get(consumerHeader)) == 0 {
		// The call ended without headers: its status says why.
		if _, err := stream.Recv(); err != nil {
			return err
		}
		return status.Error(codes.Internal, "eventbus: Subscribe answered without naming its consumer")
	}
	return nil
}

// consumerHeader is eventbus.ConsumerHeader, the header in which Subscribe
// names its consumer once it exists.
const consumerHeader = "eventbus-consumer"

// Next returns the next event, reopening the subscription where it left off
// when the stream breaks. After Close it returns ErrClosed; after a failure
// that retrying cannot fix, that failure. When ctx ends while Next waits, the
// stream is reopened on the next call.
func (s *Subscription) Next(ctx context.Context) (*eventbusv1.DeliveredEvent, error) {
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	for {
		if len(s.buf) > 0 {
			ev := s.buf[0]
			s.buf[0] = nil
			s.buf = s.buf[1:]
			return ev, nil
		}
		if s.err != nil {
			return nil, s.err
		}
		if s.ctx.Err() != nil {
			return nil, s.fail(ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.stream == nil {
			if err := s.reopen(ctx); err != nil {
				return nil, err
			}
			continue
		}
		stop := context.AfterFunc(ctx, s.streamCancel)
		resp, err := s.stream.Recv()
		stop()
		if err == nil {
			s.bo.Reset()
			s.mu.Lock()
			s.consumer = resp.GetConsumer()
			s.mu.Unlock()
			for _, ev := range resp.GetEvents() {
				s.lastSeq = max(s.lastSeq, ev.GetStreamSequence())
			}
			s.buf = resp.GetEvents()
			continue
		}
		s.streamCancel()
		s.stream = nil
		switch {
		case s.ctx.Err() != nil:
			return nil, s.fail(ErrClosed)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !retryable(err) && !errors.Is(err, io.EOF):
			return nil, s.fail(err)
		}
		s.c.log.Info("subscription interrupted; resuming", "err", err.Error(), "durable", s.req.GetDurableName(), "last_sequence", s.lastSeq)
		if s.req.GetDurableName() == "" && s.lastSeq > 0 {
			// An ephemeral consumer died with its eventbus: a new one starts
			// after the last event received.
			s.req.DeliverPolicy = eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE
			s.req.StartSequence = s.lastSeq + 1
			s.req.StartTime = nil
		}
	}
}

// reopen waits out the backoff and opens the stream again, retrying until
// it succeeds, ctx or the subscription ends, or the error is final.
func (s *Subscription) reopen(ctx context.Context) error {
	both, cancel := context.WithCancel(s.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if backoff.Sleep(both, s.bo.Next()) != nil {
		return s.endErr(ctx)
	}
	if err := s.c.retry(both, "resubscribe", func() error { return s.open(both) }); err != nil {
		if both.Err() != nil {
			return s.endErr(ctx)
		}
		return s.fail(err)
	}
	return nil
}

// endErr is why a wait ended early: the subscription closed, or ctx ended.
func (s *Subscription) endErr(ctx context.Context) error {
	if s.ctx.Err() != nil {
		return s.fail(ErrClosed)
	}
	return ctx.Err()
}

func (s *Subscription) fail(err error) error {
	s.err = err
	return err
}

// Consumer is the name of the subscription's consumer, once an event arrived.
func (s *Subscription) Consumer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumer
}

// Ack acknowledges events of this subscription.
func (s *Subscription) Ack(ctx context.Context, evs ...*eventbusv1.DeliveredEvent) error {
	return s.c.Ack(ctx, evs...)
}

// Close ends the subscription. Events received but not yet returned by Next
// are handed back (nak) for redelivery at once, including those still on
// their way: when no Next is in progress, Close first reads what the server
// already sent, until the stream is quiet for a moment. Events returned by
// Next and not acknowledged are delivered again after their ack wait.
func (s *Subscription) Close() error {
	if s.nextMu.TryLock() {
		s.drain()
	} else {
		s.cancel() // ends the Next in progress
		s.nextMu.Lock()
	}
	defer s.nextMu.Unlock()
	s.cancel()
	if s.streamCancel != nil {
		s.streamCancel()
	}
	s.stream = nil
	s.err = ErrClosed
	var unread []*eventbusv1.DeliveredEvent
	for _, ev := range s.buf {
		if ev.GetAckToken() != "" {
			unread = append(unread, ev)
		}
	}
	s.buf = nil
	if len(unread) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.c.raw.Ack(ctx, &eventbusv1.AckRequest{Nak: true, AckTokens: tokens(unread)}, grpc.WaitForReady(false)); err != nil {
		s.c.log.Debug("unread events not handed back; they come back after their ack wait", "events", len(unread), "err", err.Error())
	}
	return nil
}

// Drain bounds: Close reads until the stream has been quiet for drainQuiet,
// or for drainMax at most.
const (
	drainQuiet = 20 * time.Millisecond
	drainMax   = 500 * time.Millisecond
)

// drain moves what the open stream already carries into buf, then cancels
// the stream. It runs with nextMu held. Its reader goroutine ends when the
// stream is cancelled, and drain waits for it.
func (s *Subscription) drain() {
	if s.stream == nil || s.req.GetAutoAck() {
		return
	}
	stream := s.stream
	got := make(chan []*eventbusv1.DeliveredEvent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case got <- resp.GetEvents():
			case <-s.ctx.Done():
				return
			}
		}
	}()
	quiet := time.NewTimer(drainQuiet)
	defer quiet.Stop()
	limit := time.NewTimer(drainMax)
	defer limit.Stop()
read:
	for {
		select {
		case evs := <-got:
			s.buf = append(s.buf, evs...)
			quiet.Reset(drainQuiet)
		case <-quiet.C:
			break read
		case <-limit.C:
			break read
		case <-done:
			break read
		}
	}
	s.cancel()
	<-done
}

func tokens(evs []*eventbusv1.DeliveredEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetAckToken()
	}
	return out
}

// Typed is a subscription whose payloads decode to P.
type Typed[T any, P interface {
	*T
	proto.Message
}] struct {
	*Subscription
}

// NewTyped wraps a subscription for payloads of type P.
func NewTyped[T any, P interface {
	*T
	proto.Message
}](s *Subscription) Typed[T, P] {
	return Typed[T, P]{s}
}

// Next returns the next event and its decoded payload.
func (t Typed[T, P]) Next(ctx context.Context) (P, *eventbusv1.DeliveredEvent, error) {
	ev, err := t.Subscription.Next(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := Decode[T, P](ev)
	return m, ev, err
}
