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
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("eventbusclient: subscription closed")

// Subscription is a subscription that survives eventbus and NATS restarts: a
// durable one resumes from its consumer's position, an ephemeral one from the
// stream sequence after the last event it received. Events may be delivered
// more than once around a failover (at-least-once); acknowledged events are
// not delivered again.
type Subscription struct {
	c      *Client
	events chan *eventbusv1.DeliveredEvent
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	err      error // why the subscription ended
	consumer string
}

// Subscribe opens a subscription and keeps it open in the background until
// Close or ctx ends. The first attempt's errors that retrying cannot fix
// (InvalidArgument, NotFound) are returned here; later ones by Next.
func (c *Client) Subscribe(ctx context.Context, req *eventbusv1.SubscribeRequest) (*Subscription, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &Subscription{c: c, events: make(chan *eventbusv1.DeliveredEvent, 1024), cancel: cancel, done: make(chan struct{})}
	req = proto.CloneOf(req)
	var stream eventbusv1.EventBusService_SubscribeClient
	err := c.retry(ctx, "subscribe", func() error {
		var err error
		stream, err = s.open(ctx, req)
		return err
	})
	if err != nil {
		cancel()
		return nil, err
	}
	go s.run(ctx, req, stream)
	return s, nil
}

// open starts one Subscribe call and waits for the server to accept it: the
// header it sends once its consumer exists, or its first error.
func (s *Subscription) open(ctx context.Context, req *eventbusv1.SubscribeRequest) (eventbusv1.EventBusService_SubscribeClient, error) {
	stream, err := s.c.raw.Subscribe(ctx, req)
	if err != nil {
		return nil, err
	}
	md, err := stream.Header()
	if err != nil {
		return nil, err
	}
	if len(md.Get(consumerHeader)) == 0 {
		// The call ended without headers: its status says why.
		if _, err := stream.Recv(); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Internal, "eventbusclient: Subscribe answered without naming its consumer")
	}
	return stream, nil
}

// consumerHeader is eventbus.ConsumerHeader, the header in which Subscribe
// names its consumer once it exists.
const consumerHeader = "eventbus-consumer"

// run owns the subscription's streams: it reads each until it fails, then
// reopens it where it left off, until ctx ends or an error is final.
func (s *Subscription) run(ctx context.Context, req *eventbusv1.SubscribeRequest, stream eventbusv1.EventBusService_SubscribeClient) {
	defer close(s.done)
	var lastSeq uint64
	wait := s.c.min
	for {
		err := s.read(ctx, stream, &lastSeq, &wait)
		if ctx.Err() != nil {
			s.finish(ErrClosed)
			return
		}
		if !retryable(err) && !errors.Is(err, io.EOF) {
			s.finish(err)
			return
		}
		s.c.log.Info("subscription interrupted; resuming", "err", err.Error(), "durable", req.GetDurableName(), "last_sequence", lastSeq)
		if req.GetDurableName() == "" && lastSeq > 0 {
			// An ephemeral consumer died with its eventbus: a new one starts
			// after the last event received.
			req.DeliverPolicy = eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE
			req.StartSequence = lastSeq + 1
			req.StartTime = nil
		}
		if !sleep(ctx, wait) {
			s.finish(ErrClosed)
			return
		}
		wait = min(2*wait, s.c.max)
		err = s.c.retry(ctx, "resubscribe", func() error {
			var err error
			stream, err = s.open(ctx, req)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				err = ErrClosed
			}
			s.finish(err)
			return
		}
	}
}

// read forwards one stream's events until it fails.
func (s *Subscription) read(ctx context.Context, stream eventbusv1.EventBusService_SubscribeClient, lastSeq *uint64, wait *time.Duration) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		*wait = s.c.min
		s.mu.Lock()
		s.consumer = resp.GetConsumer()
		s.mu.Unlock()
		for _, ev := range resp.GetEvents() {
			*lastSeq = max(*lastSeq, ev.GetStreamSequence())
			select {
			case s.events <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

func (s *Subscription) finish(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.events)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Next returns the next event. After Close it returns ErrClosed; after a
// final failure, that failure.
func (s *Subscription) Next(ctx context.Context) (*eventbusv1.DeliveredEvent, error) {
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			return nil, s.err
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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

// Close ends the subscription and waits for its goroutine. Events received
// but not yet returned by Next are handed back (nak) for redelivery at once;
// events returned and not acknowledged are delivered again after their ack
// wait.
func (s *Subscription) Close() error {
	s.cancel()
	<-s.done
	var unread []*eventbusv1.DeliveredEvent
	for ev := range s.events {
		if ev.GetAckToken() != "" {
			unread = append(unread, ev)
		}
	}
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
