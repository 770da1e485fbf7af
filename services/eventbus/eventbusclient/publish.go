package eventbusclient

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

// Batch is a batch of events handed to a Publisher.
type Batch struct {
	id     uint64
	events []*eventbusv1.Event
	done   chan struct{}
	acks   []*eventbusv1.PublishAck
	err    error
}

// Wait waits until the batch is stored and returns one acknowledgement per
// event, in order.
func (b *Batch) Wait(ctx context.Context) ([]*eventbusv1.PublishAck, error) {
	select {
	case <-b.done:
		return b.acks, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Publisher publishes batches over one PublishStream, pipelined: Send returns
// at once and Batch.Wait waits for the acknowledgements. When the stream
// breaks (an eventbus or NATS restart) it reopens it, on another eventbus if
// need be, and sends again every batch not yet acknowledged; message ids make
// the resent events idempotent.
type Publisher struct {
	c      *Client
	noIDs  bool
	queue  chan *Batch
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	nextID   uint64
	inflight []*Batch // sent and not yet acknowledged, in order
	closed   bool

	// sendMu lets Close wait for Sends in progress before it fails the
	// batches left in the queue.
	sendMu sync.RWMutex
}

// ErrPublisherClosed fails batches still pending when a Publisher closes.
var ErrPublisherClosed = errors.New("eventbusclient: publisher closed")

// PublisherOptions tunes a Publisher.
type PublisherOptions struct {
	// MaxInFlight bounds the batches sent and not yet acknowledged; Send
	// blocks beyond it. Zero means 16.
	MaxInFlight int
	// NoMsgIDs leaves events without a message id as they are instead of
	// giving them one. JetStream then skips deduplication, which is faster,
	// but a batch resent after a failover may be stored twice.
	NoMsgIDs bool
}

// NewPublisher starts a publisher. Close stops it.
func (c *Client) NewPublisher(ctx context.Context, opts PublisherOptions) *Publisher {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 16
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{c: c, noIDs: opts.NoMsgIDs, queue: make(chan *Batch, opts.MaxInFlight), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

// Send queues a batch. Events without a message id are given one, unless
// the publisher was made with NoMsgIDs.
func (p *Publisher) Send(ctx context.Context, events []*eventbusv1.Event) (*Batch, error) {
	copied := false
	for i, ev := range events {
		if ev.GetMsgId() != "" || p.noIDs {
			continue
		}
		if !copied {
			events = append([]*eventbusv1.Event(nil), events...)
			copied = true
		}
		events[i] = &eventbusv1.Event{Subject: ev.GetSubject(), Payload: ev.GetPayload(), Headers: ev.GetHeaders(), MsgId: nuid.Next()}
	}
	p.sendMu.RLock()
	defer p.sendMu.RUnlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrPublisherClosed
	}
	p.nextID++
	b := &Batch{id: p.nextID, events: events, done: make(chan struct{})}
	p.mu.Unlock()
	select {
	case p.queue <- b:
		return b, nil
	case <-p.done:
		return nil, ErrPublisherClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PublishBatch sends a batch and waits for it.
func (p *Publisher) PublishBatch(ctx context.Context, events []*eventbusv1.Event) ([]*eventbusv1.PublishAck, error) {
	b, err := p.Send(ctx, events)
	if err != nil {
		return nil, err
	}
	return b.Wait(ctx)
}

// Close stops the publisher; batches not yet acknowledged fail with
// ErrPublisherClosed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	<-p.done
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	for {
		select {
		case b := <-p.queue:
			b.err = ErrPublisherClosed
			close(b.done)
		default:
			return nil
		}
	}
}

// run owns the stream: it opens it, sends batches (first those to resend),
// and on failure starts again.
func (p *Publisher) run(ctx context.Context) {
	defer close(p.done)
	defer p.failAll(ErrPublisherClosed)
	wait := p.c.min
	for ctx.Err() == nil {
		err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if !retryable(err) {
			// The server refused a batch for good: fail what was in flight
			// (the refused batch among them) and go on with the next ones.
			p.failAll(err)
			continue
		}
		p.c.log.Info("publish stream interrupted; resending unacknowledged batches", "err", err.Error())
		if !sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, p.c.max)
	}
}

// session runs one PublishStream until it fails.
func (p *Publisher) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := p.c.raw.PublishStream(sctx)
	if err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- p.receive(stream) }()
	fail := func(err error) error {
		cancel()
		<-recvErr
		return err
	}
	p.mu.Lock()
	resend := append([]*Batch(nil), p.inflight...)
	p.mu.Unlock()
	for _, b := range resend {
		if err := stream.Send(&eventbusv1.PublishStreamRequest{BatchId: b.id, Events: b.events}); err != nil {
			return fail(err)
		}
	}
	for {
		select {
		case b := <-p.queue:
			p.mu.Lock()
			p.inflight = append(p.inflight, b)
			p.mu.Unlock()
			if err := stream.Send(&eventbusv1.PublishStreamRequest{BatchId: b.id, Events: b.events}); err != nil {
				return fail(err)
			}
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}

// receive completes in-flight batches in order as their answers arrive.
func (p *Publisher) receive(stream eventbusv1.EventBusService_PublishStreamClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		p.mu.Lock()
		if len(p.inflight) == 0 || p.inflight[0].id != resp.GetBatchId() {
			p.mu.Unlock()
			return status.Errorf(codes.Internal, "eventbusclient: answer for batch %d out of order", resp.GetBatchId())
		}
		b := p.inflight[0]
		p.inflight = p.inflight[1:]
		p.mu.Unlock()
		if len(resp.GetAcks()) != len(b.events) {
			b.err = fmt.Errorf("eventbusclient: batch %d: %d acks for %d events", b.id, len(resp.GetAcks()), len(b.events))
		}
		b.acks = resp.GetAcks()
		close(b.done)
	}
}

// failAll fails every batch in flight.
func (p *Publisher) failAll(err error) {
	p.mu.Lock()
	batches := p.inflight
	p.inflight = nil
	p.mu.Unlock()
	for _, b := range batches {
		b.err = err
		close(b.done)
	}
}
