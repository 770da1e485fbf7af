package eventbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Coalescing stores many publishers' events of one subject in one JetStream
// message.
//
// Every message of a replicated stream costs each NATS server of the cluster
// a raft append, a write to its store and the reads and writes of the
// message on every hop, whatever its size; a fleet's workers each publish a
// few small KV event batches and a load report every second. So the events
// of a subject whose event name is in Config.CoalesceEvents are published by
// one sender per subject, one message at a time: while a message is being
// stored, the events that arrive are gathered and go out together in the
// next one (an envelope), as many as fit in max_payload. Nothing waits for a
// timer: when the subject is quiet an event is published at once, as itself,
// and a busy subject's events wait at most for the message before theirs.
// The stream keeps each subject's events in the order the eventbus received
// them, as plain messages keep it. A subject's sender ends when it has nothing left to send,
// so that the subjects a publisher names hold no goroutine or memory once
// quiet.
//
// An envelope is a message on the events' subject with the header
// EnvelopeHeader (how many events it holds) and a msg id of its own; its
// payload is the events in order, in the protobuf encoding of a message
// whose field 1 is "repeated switchyard.eventbus.v1.Event". Subscribe hands
// its events out one by one, each with its own subject, payload, headers
// and msg id and the envelope's stream sequence, consumer sequence, time and
// delivery count, all in one SubscribeResponse; every event but the last
// carries wire.HeaderEnvelopeRest (how many events of the same stream
// sequence follow it), and its ack token is a partial one (partialAck): Ack
// ignores it and a nak hands the whole envelope back, so that the envelope
// is acknowledged once its last event is.
//
// What an envelope does not keep is JetStream's deduplication of each
// event's msg id: an event published again through another eventbus (after
// its first one failed) may be stored twice, and an event in an envelope is
// never answered as a duplicate. The events coalesced by default are ones
// whose consumers drop repeats themselves: KV event batches carry event ids
// that the router applies once, and a load report replaces the one before.
// The eventbus's own resends of an envelope (after a stream leader change)
// keep its msg id and are stored once.

// maxCoalesceGap bounds Config.CoalesceGap: it delays events, and a gap
// near a router's report freshness or a publisher's acknowledgement timeout
// would make them late.
const maxCoalesceGap = time.Second

// EnvelopeHeader marks a stored message that holds several events, its
// value their count. Publishers may not set it.
const EnvelopeHeader = "Switchyard-Envelope"

// partialAck starts the ack token of an envelope's event that is not its
// last: Ack ignores it, a nak hands the envelope back.
const partialAck = "~"

// envelopeRoom is what an envelope leaves of max_payload for its own
// headers (EnvelopeHeader and the msg id, well under this).
const envelopeRoom = 1 << 10

// FleetCoalesceEvents is what a fleet of thousands of workers coalesces:
// the events every worker publishes several times a second. Nothing is
// coalesced by default, because an envelope gives up JetStream's per-event
// deduplication: an event its publisher sends again after a lost
// acknowledgement is stored a second time, where alone it would be stored
// once. The router applies a KV event id once and a load report replaces
// the last, so for these two a duplicate is harmless; for a stream whose
// readers count each stored event, it is not.
var FleetCoalesceEvents = []string{wire.KVEventsName, wire.LoadName}

// coalescer gathers the events of the coalesced event names per subject and
// publishes them through the bus (see above).
type coalescer struct {
	bus   *bus
	names map[string]bool
	// room bounds the events queued or being stored, as the publisher's
	// does (maxPendingAcks): a publish past it waits.
	room  *semaphore.Weighted
	limit int64
	// gap is Config.CoalesceGap.
	gap time.Duration

	ctx context.Context
	wg  sync.WaitGroup

	mu sync.Mutex
	// queues are the subjects with events to publish, each with its
	// sender; a queue goes when its sender has emptied it, so that a
	// quiet subject holds nothing.
	queues map[string]*sendQueue
	closed bool // wait was called: no sender starts any more
	// envelopes counts the envelopes stored; events the events they held.
	envelopes, events atomic.Uint64
}

// sendQueue is one subject's events waiting to be published, in units.
type sendQueue struct {
	subject, ns string
	units       []*unit
}

// unit is one message to publish: one event as itself, or an envelope.
type unit struct {
	events  []*eventbusv1.Event
	sizes   []int // proto.Size of each event
	size    int   // encoded size as an envelope's payload
	sealed  bool  // takes no more events
	batches []*mergedBatch
	done    chan struct{}
	ack     pubAck
	err     error
}

// mergedBatch is one publish call's events, in the units that hold them.
type mergedBatch struct {
	units  []*unit // of each event
	weight int64
	left   atomic.Int64 // units not done
	c      *coalescer
}

func newCoalescer(ctx context.Context, b *bus, names []string, gap time.Duration) *coalescer {
	c := &coalescer{bus: b, names: map[string]bool{}, room: semaphore.NewWeighted(maxPendingAcks), limit: maxPendingAcks,
		gap: gap, ctx: ctx, queues: map[string]*sendQueue{}}
	for _, n := range names {
		c.names[n] = true
	}
	return c
}

// takes reports whether every event of a batch is coalesced (a batch that
// mixes in other events is published as it is). While the NATS connection
// is not up, nothing is: events go out one by one into the connection's
// reconnect buffer, and a publish past it fails at once, naming the buffer,
// rather than waiting in a queue for a message that cannot be stored.
func (c *coalescer) takes(events []*eventbusv1.Event) bool {
	if c == nil || len(c.names) == 0 || len(events) == 0 || c.bus.nc.Status() != nats.CONNECTED {
		return false
	}
	for _, ev := range events {
		if !c.names[wire.EventName(ev.GetSubject())] {
			return false
		}
	}
	return true
}

// maxEnvelope is the largest envelope payload.
func (c *coalescer) maxEnvelope() int { return int(c.bus.nc.MaxPayload()) - envelopeRoom }

// add queues validated events, nss[i] being the namespace of events[i],
// starting a sender for each subject that has none. It waits while the
// queued events would pass the limit.
func (c *coalescer) add(ctx context.Context, nss []string, events []*eventbusv1.Event) (*mergedBatch, error) {
	mb := &mergedBatch{units: make([]*unit, len(events)), weight: min(int64(len(events)), c.limit), c: c}
	if err := c.room.Acquire(ctx, mb.weight); err != nil {
		return nil, err
	}
	limit := c.maxEnvelope()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.room.Release(mb.weight)
		return nil, fmt.Errorf("%w: eventbus is shutting down; publish to another", ErrUnavailable)
	}
	for i, ev := range events {
		q := c.queues[ev.GetSubject()]
		if q == nil {
			q = &sendQueue{subject: ev.GetSubject(), ns: nss[i]}
			c.queues[q.subject] = q
			c.wg.Add(1)
			go c.send(q)
		}
		es := proto.Size(ev)
		n := protowire.SizeTag(1) + protowire.SizeBytes(es)
		var u *unit
		if k := len(q.units); k > 0 && !q.units[k-1].sealed && q.units[k-1].size+n <= limit {
			u = q.units[k-1]
		} else {
			u = &unit{done: make(chan struct{})}
			q.units = append(q.units, u)
		}
		u.events = append(u.events, ev)
		u.sizes = append(u.sizes, es)
		u.size += n
		if u.size >= limit {
			u.sealed = true
		}
		if len(u.batches) == 0 || u.batches[len(u.batches)-1] != mb {
			u.batches = append(u.batches, mb)
			mb.left.Add(1)
		}
		mb.units[i] = u
	}
	c.mu.Unlock()
	return mb, nil
}

// wait waits until every event of the batch is stored (or its unit failed)
// and returns one acknowledgement per event, appended to acks[:0] (a
// stream answering batch after batch reuses one slice), or the first error.
func (mb *mergedBatch) wait(ctx context.Context, acks []pubAck) ([]pubAck, error) {
	acks = slices.Grow(acks[:0], len(mb.units))[:len(mb.units)]
	for i, u := range mb.units {
		select {
		case <-u.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if u.err != nil {
			return nil, u.err
		}
		acks[i] = u.ack
	}
	return acks, nil
}

// send publishes a subject's units one at a time, each once the one before
// is stored and, with a gap, once the gap since the one before has passed
// (unless more than one unit waits: a full unit goes at once, so that the
// subject never falls behind), until the queue is empty; then the queue
// goes (a later event of the subject starts a new one, published after
// these). Once the coalescer's context ended it fails the units instead.
func (c *coalescer) send(q *sendQueue) {
	defer c.wg.Done()
	var last time.Time
	for {
		if !last.IsZero() {
			c.waitGap(q, last)
		}
		c.mu.Lock()
		if len(q.units) == 0 {
			delete(c.queues, q.subject)
			c.mu.Unlock()
			return
		}
		u := q.units[0]
		q.units[0] = nil
		q.units = q.units[1:]
		u.sealed = true
		c.mu.Unlock()
		if c.ctx.Err() != nil {
			c.finish(u, pubAck{}, fmt.Errorf("%w: eventbus is shutting down; publish to another", ErrUnavailable))
			continue
		}
		last = time.Now()
		ack, err := c.store(q, u)
		c.finish(u, ack, err)
	}
}

// waitGap waits until the gap since last has passed, unless the events
// waiting in q fill an envelope or a quarter of the coalescer's room (the
// room is shared by every subject, and a publish past it waits), or the
// coalescer's context ends. The queue stays in place meanwhile, so that the
// subject's events gather in it.
func (c *coalescer) waitGap(q *sendQueue, last time.Time) {
	c.mu.Lock()
	full := len(q.units) > 1 || len(q.units) == 1 && int64(len(q.units[0].events)) >= c.limit/4
	c.mu.Unlock()
	d := time.Until(last.Add(c.gap))
	if c.gap <= 0 || full || d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
	}
}

// store publishes one unit and waits for JetStream's answer: a unit of one
// event as that event, a larger one as an envelope.
func (c *coalescer) store(q *sendQueue, u *unit) (pubAck, error) {
	ev := u.events[0]
	if len(u.events) > 1 {
		payload := make([]byte, 0, u.size)
		// add sized every event, and nothing changes an event once
		// received: the sizes it cached serve the encoding.
		enc := proto.MarshalOptions{UseCachedSize: true}
		for i, e := range u.events {
			var err error
			payload = protowire.AppendTag(payload, 1, protowire.BytesType)
			payload = protowire.AppendVarint(payload, uint64(u.sizes[i]))
			if payload, err = enc.MarshalAppend(payload, e); err != nil {
				return pubAck{}, fmt.Errorf("%w: encode an envelope: %w", ErrInvalid, err)
			}
		}
		ev = &eventbusv1.Event{Subject: q.subject, Payload: payload, MsgId: "envelope-" + nuid.Next(),
			Headers: map[string]string{EnvelopeHeader: strconv.Itoa(len(u.events))}}
	}
	for attempt := 0; ; attempt++ {
		pb, err := c.bus.publishBatch(c.ctx, []string{q.ns}, []*eventbusv1.Event{ev})
		var acks []pubAck
		if err == nil {
			acks, err = c.bus.waitBatch(c.ctx, pb)
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) && attempt == 0 {
			// The stream went away: waitBatch forgot it, so the next
			// attempt creates it again (as bus.publish does).
			continue
		}
		if err != nil {
			return pubAck{}, err
		}
		a := acks[0]
		if len(u.events) > 1 {
			// Its events were stored by this message once, even when a
			// resend of it was answered as a duplicate.
			a.dup = false
			c.envelopes.Add(1)
			c.events.Add(uint64(len(u.events)))
		}
		return a, nil
	}
}

// finish records a unit's outcome, wakes its waiters and frees the room of
// the batches it completes.
func (c *coalescer) finish(u *unit, ack pubAck, err error) {
	u.ack, u.err = ack, err
	close(u.done)
	for _, mb := range u.batches {
		if mb.left.Add(-1) == 0 {
			c.room.Release(mb.weight)
		}
	}
}

// wait waits for the senders to end, once the coalescer's context ended;
// no sender starts after it (a publish is refused).
func (c *coalescer) wait() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}

// StoredMsgIDs is the msg ids of the events one stored stream message
// holds: its own for a plain message, each event's, in order, for an
// envelope. Consumers of the eventbus never see envelopes (Subscribe hands
// their events out one by one); a reader of the stream straight from NATS
// (an operator's tool, a test counting what was stored) reads them with it.
func StoredMsgIDs(header nats.Header, data []byte) ([]string, error) {
	count := header.Get(EnvelopeHeader)
	if count == "" {
		return []string{header.Get(jetstream.MsgIDHeader)}, nil
	}
	evs, err := openEnvelope(count, data)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.GetMsgId()
	}
	return ids, nil
}

// openEnvelope decodes an envelope's events; count is its EnvelopeHeader.
func openEnvelope(count string, data []byte) ([]*eventbusv1.Event, error) {
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("envelope count %q", count)
	}
	evs := make([]*eventbusv1.Event, 0, n)
	vals := make([]eventbusv1.Event, n)
	for len(data) > 0 {
		num, typ, tn := protowire.ConsumeTag(data)
		if tn < 0 || num != 1 || typ != protowire.BytesType {
			return nil, errors.New("envelope: not a list of events")
		}
		b, bn := protowire.ConsumeBytes(data[tn:])
		if bn < 0 || len(evs) == n {
			return nil, errors.New("envelope: truncated, or more events than its count")
		}
		ev := &vals[len(evs)]
		if err := proto.Unmarshal(b, ev); err != nil {
			return nil, fmt.Errorf("envelope: %w", err)
		}
		evs = append(evs, ev)
		data = data[tn+bn:]
	}
	if len(evs) != n {
		return nil, fmt.Errorf("envelope holds %d events, its header says %d", len(evs), n)
	}
	return evs, nil
}
