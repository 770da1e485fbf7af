package eventbusclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
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

// PublisherOptions tunes a Publisher.
type PublisherOptions struct {
	// MaxInFlight bounds the batches sent and not yet acknowledged; Send
	// blocks beyond it. Zero means 16.
	MaxInFlight int
	// NoMsgIDs leaves events without a message id as they are instead of
	// giving them one. JetStream then skips deduplication, which is faster,
	// but a batch resent after a failover may be stored twice.
	NoMsgIDs bool
	// Core publishes on NATS Core instead of the stream (see
	// eventbus.proto): nothing is stored, an event reaches only the
	// subscribers connected at the time, and acknowledgements carry
	// sequence 0. It implies NoMsgIDs.
	Core bool
}

// Publisher publishes batches over one PublishStream, pipelined: Send writes
// the batch to the stream and returns, and Batch.Wait waits for its
// acknowledgements. When the stream breaks (an eventbus or NATS restart) the
// publisher reopens it, on another eventbus if need be, and sends again every
// batch not yet acknowledged; message ids make the resent events idempotent.
type Publisher struct {
	c      *Client
	noIDs  bool
	core   bool
	slots  chan struct{} // one per batch in flight
	cancel context.CancelFunc
	done   chan struct{}

	// sendMu serializes adding a batch to inflight with writing it to the
	// stream, so that batches go out in the order of inflight.
	sendMu sync.Mutex

	mu       sync.Mutex
	stream   eventbusv1.EventBusService_PublishStreamClient // nil while reconnecting
	nextID   uint64
	inflight []*Batch // sent (or to resend) and not yet acknowledged, in order
	closed   bool

	interval atomic.Int64 // the newest publish_interval answered, nanoseconds
}

// Interval is the least time the eventbus last asked between two batches
// of this publisher that it may hold and merge (publish_interval in its
// answers; 0: publish at once). The eventbus asks for one while its
// publishers together send more batches than it takes at its target rate.
func (p *Publisher) Interval() time.Duration { return time.Duration(p.interval.Load()) }

// ErrPublisherClosed fails batches still pending when a Publisher closes.
var ErrPublisherClosed = errors.New("eventbus: publisher closed")

// NewPublisher starts a publisher. Close stops it, and so does the end of
// ctx.
func (c *Client) NewPublisher(ctx context.Context, opts PublisherOptions) *Publisher {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 16
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{c: c, noIDs: opts.NoMsgIDs || opts.Core, core: opts.Core, slots: make(chan struct{}, opts.MaxInFlight), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

// Send sends a batch, waiting while MaxInFlight batches are unacknowledged.
// Events without a message id are given one, unless the publisher was made
// with NoMsgIDs. A batch that cannot be written now (the stream is
// reconnecting) is written when it is back.
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
	select {
	case p.slots <- struct{}{}:
	case <-p.done:
		return nil, ErrPublisherClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, ErrPublisherClosed
	}
	p.nextID++
	b := &Batch{id: p.nextID, events: events, done: make(chan struct{})}
	p.inflight = append(p.inflight, b)
	stream := p.stream
	p.mu.Unlock()
	if stream != nil {
		// An error means the stream broke: run sees it too, reconnects and
		// sends the batch again.
		_ = stream.Send(&eventbusv1.PublishStreamRequest{BatchId: b.id, Events: b.events, Core: p.core})
	}
	return b, nil
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
	p.failAll(ErrPublisherClosed)
	return nil
}

// run owns the stream: it opens it, sends the batches waiting for it, reads
// the answers, and when the stream fails starts again.
func (p *Publisher) run(ctx context.Context) {
	defer close(p.done)
	defer func() {
		// Closed, or the context given to NewPublisher ended: nothing more
		// will be sent.
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.failAll(ErrPublisherClosed)
	}()
	bo := p.c.backoff()
	for ctx.Err() == nil {
		acked, err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if acked {
			bo.Reset()
		}
		if !retryable(err) {
			// The server refused a batch for good. It answers every batch
			// before the one it refuses, so the refused one is the oldest
			// unanswered: fail it, and send the others again.
			p.failOldest(err)
			continue
		}
		p.c.log.Info("publish stream interrupted; resending unacknowledged batches", "err", err.Error())
		if backoff.Sleep(ctx, bo.Next()) != nil {
			return
		}
	}
}

// session runs one PublishStream until it fails; acked says whether any
// batch was acknowledged on it.
func (p *Publisher) session(ctx context.Context) (acked bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := p.c.raw.PublishStream(sctx)
	if err != nil {
		return false, err
	}
	// Attach the stream and resend what is waiting, under sendMu so that no
	// Send slips in between.
	p.sendMu.Lock()
	p.mu.Lock()
	p.stream = stream
	resend := append([]*Batch(nil), p.inflight...)
	p.mu.Unlock()
	for _, b := range resend {
		if err := stream.Send(&eventbusv1.PublishStreamRequest{BatchId: b.id, Events: b.events, Core: p.core}); err != nil {
			break // Recv below reports why
		}
	}
	p.sendMu.Unlock()
	defer func() {
		p.mu.Lock()
		p.stream = nil
		p.mu.Unlock()
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return acked, err
		}
		p.mu.Lock()
		if len(p.inflight) == 0 || p.inflight[0].id != resp.GetBatchId() {
			p.mu.Unlock()
			return acked, status.Errorf(codes.Internal, "eventbus: answer for batch %d out of order", resp.GetBatchId())
		}
		b := p.inflight[0]
		p.inflight = p.inflight[1:]
		p.mu.Unlock()
		acked = true
		p.interval.Store(int64(resp.GetPublishInterval().AsDuration()))
		if len(resp.GetAcks()) != len(b.events) {
			b.err = fmt.Errorf("eventbus: batch %d: %d acks for %d events", b.id, len(resp.GetAcks()), len(b.events))
		}
		b.acks = resp.GetAcks()
		p.complete(b)
	}
}

// complete finishes a batch and frees its slot.
func (p *Publisher) complete(b *Batch) {
	close(b.done)
	<-p.slots
}

// failOldest fails the oldest batch in flight.
func (p *Publisher) failOldest(err error) {
	p.mu.Lock()
	if len(p.inflight) == 0 {
		p.mu.Unlock()
		return
	}
	b := p.inflight[0]
	p.inflight = p.inflight[1:]
	p.mu.Unlock()
	b.err = err
	p.complete(b)
}

// failAll fails every batch in flight.
func (p *Publisher) failAll(err error) {
	p.mu.Lock()
	batches := p.inflight
	p.inflight = nil
	p.mu.Unlock()
	for _, b := range batches {
		b.err = err
		p.complete(b)
	}
}
