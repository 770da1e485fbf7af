package eventbus

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

// Limits of the publisher: how many events may wait for their
// acknowledgement at once (publishing beyond waits for room, which is the
// stream's back-pressure), and how long one may wait.
const (
	maxPendingAcks = 8192
	pubAckTimeout  = 10 * time.Second
)

// resendAfter is how long an event of a replicated stream waits for its
// acknowledgement before it is published again, with the same msg id and
// reply subject, and again at this interval until pubAckTimeout. When a
// stream leader dies, the events in flight to it are lost and nothing
// answers them; the stream answers "no responders" while it has no leader.
// Waiting out pubAckTimeout instead cost every leader kill about 10 s of
// publishing (elections take a few seconds). JetStream's deduplication keeps
// a resent event from being stored twice: an event already stored is
// answered as a duplicate with its sequence, one still being stored ("msg
// id in process", error 10158) is answered when it is stored. Events
// without a msg id are never resent.
const resendAfter = time.Second

// errCodeMsgIDInProcess is JetStream's answer to an event whose msg id is
// being stored from an earlier publish (JSStreamDuplicateMessageConflict).
const errCodeMsgIDInProcess = 10158

// publisher publishes batches of events to JetStream and matches their
// acknowledgements, with the work per batch rather than per event that
// jetstream.PublishMsgAsync does.
//
// The events of a batch that go to one single-replica stream share a reply
// subject: such a stream answers the messages a connection publishes in the
// order it received them, so the n-th answer on that subject is the n-th
// event's. (The server caches subject lookups, and a fresh reply subject per
// event costs a cache miss and a cache insert on the stream's goroutine.)
// Only refusals can overtake earlier answers (an overloaded stream's 429, no
// responders), and a refusal fails the whole batch. A replicated stream
// answers a duplicate msg id before the earlier events are committed, so
// there every event has its own reply subject.
type publisher struct {
	nc     *nats.Conn
	prefix string // of every reply subject: an inbox of nc, then "."
	sub    *nats.Subscription
	room   *semaphore.Weighted // events that may be pending
	limit  int64               // room's size
	wait   time.Duration       // for a batch's acknowledgements
	resend time.Duration       // resendAfter; 0: never
	// resendBefore is the constant resendBefore (a field for tests).
	resendBefore time.Duration

	mu         sync.Mutex
	nextKey    uint64
	nextBatch  uint64
	pending    map[uint64]*ackGroup // by reply subject key
	lastResend time.Time
	// order holds the resendable batches in publishing order, ended ones
	// dropped from its head lazily: its head is the oldest pending one.
	order []*pubBatch
	// refused counts the pending batches an event of which was answered
	// "no responders" (noStream): not stored, and to be published again
	// before any later batch (see publish).
	refused int
}

// pubBatch is a published batch waiting for its acknowledgements. Its fields
// are written before done closes and read after.
type pubBatch struct {
	events   []*eventbusv1.Event
	acks     []pubAck
	groups   []*ackGroup
	left     int  // acknowledgements still to come; under publisher.mu
	ended    bool // under publisher.mu
	weight   int64
	deadline time.Time
	err      error // the whole batch failed
	done     chan struct{}
	// resendable tells that some events may be published again (see
	// resendAfter); noStream that one was answered "no responders".
	// Under publisher.mu.
	resendable, noStream bool
	seq                  uint64    // publishing order; under publisher.mu
	sent                 time.Time // when it was published
}

// ackGroup is the events of a batch that share a reply subject (those of one
// namespace, in the order they were published), or a single event.
type ackGroup struct {
	batch   *pubBatch
	key     uint64
	events  []int // indexes in the batch
	next    int   // answers received; under publisher.mu
	ordered bool  // the events of one single-replica stream
}

// pubAck is JetStream's answer for one event.
type pubAck struct {
	seq uint64
	dup bool
	err error
}

// newPublisher subscribes to the acknowledgements of publishes on nc. At
// most maxPending events wait for theirs at once, each for at most timeout.
func newPublisher(nc *nats.Conn, maxPending int64, timeout time.Duration) (*publisher, error) {
	p := &publisher{
		nc: nc, prefix: nc.NewRespInbox() + ".", room: semaphore.NewWeighted(maxPending), limit: maxPending, wait: timeout,
		pending: map[uint64]*ackGroup{}, resend: resendAfter, resendBefore: resendBefore,
	}
	sub, err := nc.Subscribe(p.prefix+"*", p.handleAck)
	if err != nil {
		return nil, fmt.Errorf("subscribe to publish acknowledgements: %w", err)
	}
	// Acknowledgements come at the rate events go out: never drop them.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to publish acknowledgements: %w", err)
	}
	p.sub = sub
	return p, nil
}

// publish starts publishing a batch of validated events, nss[i] being the
// namespace of events[i]; ordered tells whether a namespace's answers come
// in order (a single-replica stream). It waits while the events pending
// would pass the limit (a batch larger than the limit waits until no other
// is pending). await gives the outcome.
func (p *publisher) publish(ctx context.Context, nss []string, events []*eventbusv1.Event, ordered func(ns string) bool) (*pubBatch, error) {
	b := &pubBatch{
		events: events,
		acks:   make([]pubAck, len(events)),
		left:   len(events),
		weight: min(int64(len(events)), p.limit),
		done:   make(chan struct{}),
	}
	if err := p.room.Acquire(ctx, b.weight); err != nil {
		return nil, err
	}
	b.sent = time.Now()
	b.deadline = b.sent.Add(p.wait)
	// Group the events by namespace (a batch usually has one), with a group
	// per event where answers may come out of order.
	replies := make([]string, len(events))
	group := map[string]*ackGroup{} // nil: not ordered
	for _, ns := range nss {
		if _, seen := group[ns]; !seen {
			group[ns] = nil
			if ordered(ns) {
				group[ns] = &ackGroup{batch: b, ordered: true}
			}
		}
	}
	p.mu.Lock()
	// An event published after an earlier one that has waited for its
	// answer for a while (lost with a dead stream leader, perhaps), or that
	// was answered "no responders" (not stored: the stream had no leader,
	// or its leader's interest had not reached this server yet, as right
	// after a replicated stream is created), would be stored before it once
	// the stream takes events: publish the earlier ones again first, so
	// that the stream keeps the publishing order.
	resendFirst := p.refused > 0
	if oldest := p.oldestPendingLocked(); !oldest.IsZero() && b.sent.Sub(oldest) >= p.resendBefore {
		resendFirst = true
	}
	p.nextBatch++
	b.seq = p.nextBatch
	for i, ns := range nss {
		g := group[ns]
		if g == nil {
			g = &ackGroup{batch: b}
			b.resendable = b.resendable || events[i].GetMsgId() != ""
		}
		if g.key == 0 {
			p.nextKey++
			g.key = p.nextKey
			b.groups = append(b.groups, g)
			p.pending[g.key] = g
		}
		g.events = append(g.events, i)
	}
	if b.resendable {
		p.order = append(p.order, b)
	}
	p.mu.Unlock()
	if len(events) == 0 {
		p.settle(b, nil)
		return b, nil
	}
	if resendFirst {
		p.resendPending(b.seq, true)
	}
	for _, g := range b.groups {
		reply := p.prefix + strconv.FormatUint(g.key, 36)
		for _, i := range g.events {
			replies[i] = reply
		}
	}

	// nc copies a message into its buffer before PublishMsg returns, so one
	// message and header map serve the whole batch.
	m := &nats.Msg{Header: nats.Header{}}
	var id [1]string
	for i, ev := range events {
		fillMsg(m, ev, replies[i], &id)
		if err := p.nc.PublishMsg(m); err != nil {
			if errors.Is(err, nats.ErrReconnectBufExceeded) {
				err = fmt.Errorf("NATS is reconnecting and its reconnect buffer (--nats-reconnect-buffer, %d bytes) is full; publish again once it is back: %w",
					p.nc.Opts.ReconnectBufSize, err)
			}
			p.settle(b, natsErr("publish on "+ev.GetSubject(), err))
			return b, nil
		}
	}
	return b, nil
}

// fillMsg makes m (with a non-nil header map) the NATS message of ev, the
// msg id's header value held in id.
func fillMsg(m *nats.Msg, ev *eventbusv1.Event, reply string, id *[1]string) {
	m.Subject, m.Reply, m.Data = ev.GetSubject(), reply, ev.GetPayload()
	clear(m.Header)
	if id[0] = ev.GetMsgId(); id[0] != "" {
		m.Header[jetstream.MsgIDHeader] = id[:]
	}
	for k, v := range ev.GetHeaders() {
		m.Header.Set(k, v)
	}
}

// await waits for a batch's acknowledgements, until ctx ends or the batch's
// deadline passes, and returns them; each may hold JetStream's refusal of
// its event.
//
// Meanwhile it publishes again, every resendAfter, the events of replicated
// streams that have a msg id and no answer yet (see resendAfter).
func (p *publisher) await(ctx context.Context, b *pubBatch) ([]pubAck, error) {
	t := time.NewTimer(time.Until(b.deadline))
	defer t.Stop()
	var tick <-chan time.Time
	p.mu.Lock()
	resendable := b.resendable && p.resend > 0
	p.mu.Unlock()
	if resendable {
		tk := time.NewTicker(p.resend)
		defer tk.Stop()
		tick = tk.C
	}
wait:
	for {
		select {
		case <-b.done:
			break wait
		case <-ctx.Done():
			p.settle(b, ctx.Err())
		case <-t.C:
			p.mu.Lock()
			noStream := b.noStream
			p.mu.Unlock()
			err := fmt.Errorf("%w: JetStream did not acknowledge the batch within %s", ErrUnavailable, p.wait)
			if noStream {
				// Answered "no responders" throughout: the stream may be gone
				// (waitBatch forgets it, so that it is created again).
				err = fmt.Errorf("%w: JetStream did not acknowledge the batch within %s: %w", ErrUnavailable, p.wait, jetstream.ErrNoStreamResponse)
			}
			p.settle(b, err)
		case <-tick:
			p.resendPending(0, false)
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.acks, nil
}

// resendBefore is how long the oldest pending event of a replicated stream
// may have waited for its answer before a new batch is published without
// publishing it again first (see publish).
const resendBefore = 250 * time.Millisecond

// oldestPendingLocked is when the oldest pending resendable batch was
// published; zero when there is none. p.mu is held.
func (p *publisher) oldestPendingLocked() time.Time {
	for len(p.order) > 0 && p.order[0].ended {
		p.order[0] = nil
		p.order = p.order[1:]
	}
	if len(p.order) == 0 {
		return time.Time{}
	}
	return p.order[0].sent
}

// resendPending publishes again, in the order they were first published,
// the events pending for at least resendAfter (with before, those of the
// batches published before batch seq before, however recent) that are alone
// in their group (a replicated stream's), have a msg id and no answer yet,
// with the same reply subject: the first answer counts, later ones are
// ignored. Every pending batch is resent, not only the one being awaited: a
// batch resent later than the next ones, once a new leader is there, would
// be stored after them (its events out of order in the stream). An awaiting
// handler's tick does it at most once per half resendAfter.
func (p *publisher) resendPending(before uint64, force bool) {
	type resend struct {
		ev    *eventbusv1.Event
		reply string
		batch uint64
		index int
	}
	var out []resend
	now := time.Now()
	p.mu.Lock()
	if !force {
		if now.Sub(p.lastResend) < p.resend/2 {
			p.mu.Unlock()
			return
		}
		p.lastResend = now
	}
	for key, g := range p.pending {
		b := g.batch
		if b.ended || !b.resendable || g.ordered || g.next > 0 || len(g.events) != 1 {
			continue
		}
		if force && b.seq >= before || !force && now.Sub(b.sent) < p.resend {
			continue
		}
		if ev := b.events[g.events[0]]; ev.GetMsgId() != "" {
			out = append(out, resend{ev, p.prefix + strconv.FormatUint(key, 36), b.seq, g.events[0]})
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b resend) int {
		if c := cmp.Compare(a.batch, b.batch); c != 0 {
			return c
		}
		return cmp.Compare(a.index, b.index)
	})
	m := &nats.Msg{Header: nats.Header{}}
	var id [1]string
	for _, r := range out {
		fillMsg(m, r.ev, r.reply, &id)
		if err := p.nc.PublishMsg(m); err != nil {
			// Reconnecting, with a full buffer: the next tick tries again,
			// the deadline gives up.
			return
		}
	}
}

// settle ends a batch that is still pending with err; it does nothing to a
// batch that has ended.
func (p *publisher) settle(b *pubBatch, err error) {
	p.mu.Lock()
	if b.ended {
		p.mu.Unlock()
		return
	}
	p.endLocked(b)
	p.mu.Unlock()
	b.err = err
	p.finish(b)
}

// endLocked marks a batch ended and forgets its reply subjects; the caller
// then finishes it.
func (p *publisher) endLocked(b *pubBatch) {
	b.ended = true
	if b.noStream {
		p.refused--
	}
	for _, g := range b.groups {
		delete(p.pending, g.key)
	}
}

// failAll ends every pending batch with err: after a reconnection, the
// acknowledgements of what was sent before may never come. Their events may
// still have been stored; a retry with the same msg ids stores them once.
func (p *publisher) failAll(err error) {
	p.mu.Lock()
	var batches []*pubBatch
	for _, g := range p.pending {
		if !g.batch.ended {
			p.endLocked(g.batch)
			batches = append(batches, g.batch)
		}
	}
	p.mu.Unlock()
	for _, b := range batches {
		b.err = err
		p.finish(b)
	}
}

// finish releases an ended batch's room and wakes its waiter.
func (p *publisher) finish(b *pubBatch) {
	p.room.Release(b.weight)
	close(b.done)
}

// handleAck takes one answer, on the subscription's goroutine.
func (p *publisher) handleAck(m *nats.Msg) {
	key, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, p.prefix), 36, 64)
	if err != nil {
		return
	}
	seq, dup, aerr := decodeAck(m)
	p.mu.Lock()
	g := p.pending[key]
	if g == nil || g.next >= len(g.events) {
		// A batch that ended (its waiter gave up), or an answer too many.
		p.mu.Unlock()
		return
	}
	b := g.batch
	if !g.ordered && b.resendable {
		// A replicated stream's event that may be resent: "no responders"
		// (no leader right now) and "msg id in process" (an earlier copy is
		// being stored and will be answered) are not its outcome.
		var apiErr *jetstream.APIError
		switch {
		case errors.Is(aerr, jetstream.ErrNoStreamResponse) && b.events[g.events[g.next]].GetMsgId() != "":
			if !b.noStream {
				b.noStream = true
				p.refused++
			}
			p.mu.Unlock()
			return
		case errors.As(aerr, &apiErr) && apiErr.ErrorCode == errCodeMsgIDInProcess:
			p.mu.Unlock()
			return
		}
	}
	b.acks[g.events[g.next]] = pubAck{seq: seq, dup: dup, err: aerr}
	g.next++
	b.left--
	last := b.left == 0
	if last {
		p.endLocked(b)
	}
	p.mu.Unlock()
	if last {
		p.finish(b)
	}
}

// decodeAck reads JetStream's answer to one publish.
func decodeAck(m *nats.Msg) (seq uint64, dup bool, err error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		// No responders: no stream captures the subject (any more).
		return 0, false, jetstream.ErrNoStreamResponse
	}
	if seq, dup, ok := scanPubAck(m.Data); ok {
		return seq, dup, nil
	}
	var r struct {
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
		Error     *jetstream.APIError `json:"error"`
	}
	switch {
	case json.Unmarshal(m.Data, &r) != nil:
		return 0, false, jetstream.ErrInvalidJSAck
	case r.Error != nil:
		return 0, false, r.Error
	case r.Stream == "":
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return r.Seq, r.Duplicate, nil
}

// scanPubAck reads the common acknowledgement, a flat JSON object such as
// {"stream":"EVENTS_ns","seq":12,"duplicate":true}, without allocating. It
// gives up (ok false) on anything else: an error, escapes, nested values,
// fractions, malformed JSON; decodeAck then uses encoding/json.
func scanPubAck(data []byte) (seq uint64, dup, ok bool) {
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return 0, false, false
	}
	var gotStream, gotSeq bool
	for s := data[1 : len(data)-1]; len(s) > 0; {
		key, rest, ok := scanString(s)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return 0, false, false
		}
		rest = rest[1:]
		// A value is a string, or a literal running to the next comma.
		var str, lit []byte
		isStr := len(rest) > 0 && rest[0] == '"'
		if isStr {
			if str, rest, ok = scanString(rest); !ok {
				return 0, false, false
			}
		} else {
			end := bytes.IndexByte(rest, ',')
			if end < 0 {
				end = len(rest)
			}
			lit, rest = rest[:end], rest[end:]
		}
		if len(rest) > 0 {
			if rest[0] != ',' || len(rest) == 1 {
				return 0, false, false
			}
			rest = rest[1:]
		}
		s = rest
		switch {
		case string(key) == "stream":
			if !isStr || len(str) == 0 || gotStream {
				return 0, false, false
			}
			gotStream = true
		case string(key) == "seq":
			n, ok := scanUint(lit)
			if !ok || gotSeq {
				return 0, false, false
			}
			seq, gotSeq = n, true
		case string(key) == "duplicate":
			switch {
			case string(lit) == "true":
				dup = true
			case string(lit) == "false":
				dup = false
			default:
				return 0, false, false
			}
		case foldsTo(key, "stream", "seq", "duplicate", "error"):
			// An error, or a key that encoding/json would match without
			// regard to case.
			return 0, false, false
		default:
			// Other fields (domain, and whatever later servers add) are
			// skipped when they are plain strings, integers or literals.
			if _, isUint := scanUint(lit); !isStr && !isUint && string(lit) != "true" && string(lit) != "false" && string(lit) != "null" {
				return 0, false, false
			}
		}
	}
	if !gotStream || !gotSeq {
		return 0, false, false
	}
	return seq, dup, true
}

// foldsTo reports whether key equals one of names, ignoring case.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// scanString reads a JSON string without escapes at the start of s and
// returns its contents and what follows.
func scanString(s []byte) (str, rest []byte, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[1:i], s[i+1:], true
		case c == '\\' || c < ' ' || c >= 0x80:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// scanUint reads a decimal non-negative integer that fits in a uint64,
// without leading zeros (as JSON writes it).
func scanUint[T string | []byte](s T) (uint64, bool) {
	if len(s) == 0 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
