package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// deliverBatch and deliverBytes bound one SubscribeResponse: at most that
// many events, and no more payload bytes than deliverBytes unless a single
// event is larger.
const (
	deliverBatch = 256
	deliverBytes = 1 << 20
)

// bus is the event plane over NATS: one JetStream stream per namespace, pull
// consumers for subscriptions. Publishing and consuming use two connections,
// so that publish acknowledgements and deliveries are read in parallel.
type bus struct {
	nc  *nats.Conn          // publishing, stream management
	js  jetstream.JetStream // on nc
	pub *publisher          // on nc
	// coalesce gathers the coalesced events (coalesce.go); nil: none.
	coalesce *coalescer
	subNC    *nats.Conn          // consumers and their acks
	subJS    jetstream.JetStream // on subNC
	log      *slog.Logger
	maxAge   time.Duration // Config.StreamMaxAge
	dedup    time.Duration // Config.DedupWindow
	linger   time.Duration // Config.DeliverLinger
	// replicas is the replica count of the streams the eventbus creates.
	replicas int

	// streams caches the namespaces whose stream this process has created or
	// updated, so that only the first publish pays for it; the value is the
	// stream's replica count (an int).
	streams sync.Map

	// subLost is closed (and replaced) each time subNC is re-established:
	// what JetStream had sent on the lost connection never arrived.
	subMu   sync.Mutex
	subLost chan struct{}
}

func newBus(nc, subNC *nats.Conn, cfg Config, log *slog.Logger) (*bus, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	pub, err := newPublisher(nc, maxPendingAcks, pubAckTimeout)
	if err != nil {
		return nil, err
	}
	// Acknowledgements of what went out before a reconnection may never
	// come: fail those batches now rather than at their deadline.
	reconnected := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		if reconnected != nil {
			reconnected(nc)
		}
		pub.failAll(fmt.Errorf("%w: the NATS connection was lost before JetStream acknowledged the events; publish them again (their msg ids keep them from being stored twice)", ErrUnavailable))
	})
	subJS, err := jetstream.New(subNC)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b := &bus{nc: nc, js: js, pub: pub, subNC: subNC, subJS: subJS, log: log,
		maxAge: cfg.StreamMaxAge, dedup: cfg.dedupWindow(), linger: cfg.deliverLinger(), replicas: max(cfg.StreamReplicas, 1),
		subLost: make(chan struct{}),
	}
	subReconnected := subNC.Opts.ReconnectedCB
	subNC.SetReconnectHandler(func(nc *nats.Conn) {
		if subReconnected != nil {
			subReconnected(nc)
		}
		b.subMu.Lock()
		close(b.subLost)
		b.subLost = make(chan struct{})
		b.subMu.Unlock()
	})
	return b, nil
}

// subConnLost is closed once the consuming connection has been lost and
// re-established after this call.
func (b *bus) subConnLost() <-chan struct{} {
	b.subMu.Lock()
	defer b.subMu.Unlock()
	return b.subLost
}

// errDeliveriesLost ends an ephemeral auto-ack subscription whose consumer
// delivered events that never reached this process.
var errDeliveriesLost = errors.New("events the consumer delivered did not arrive")

// StreamName is the JetStream stream that holds a namespace's events.
func StreamName(namespace string) string { return "EVENTS_" + namespace }

// natsErr wraps a NATS error in the matching domain error.
func natsErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrObjectNotFound):
		return fmt.Errorf("%w: %s: %w", ErrObjectNotFound, op, err)
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("%w: %s: %w", ErrNotFound, op, err)
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return fmt.Errorf("%w: %s: %w", ErrDataLoss, op, err)
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return fmt.Errorf("%w: %s: %w", ErrPayloadTooLarge, op, err)
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		return fmt.Errorf("%w: %s: %w", ErrBufferFull, op, err)
	case errors.Is(err, jetstream.ErrBadRequest):
		return fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
	default:
		// Timeouts, no responders, disconnections, a restarting server: the
		// caller can retry, here or on another eventbus.
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
}

// ensureStream creates a namespace's stream, or brings an existing one's
// subjects, max age and dedup window to this eventbus's settings, once per
// process. Whatever else an operator set on an existing stream (replicas,
// placement, limits) stays as it is.
func (b *bus) ensureStream(ctx context.Context, ns string) error {
	if _, ok := b.streams.Load(ns); ok {
		return nil
	}
	ctx, cancel := apiContext(ctx)
	defer cancel()
	name := StreamName(ns)
	st, err := b.lookupStream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "Switchyard events of namespace " + ns,
			Subjects:    []string{ns + ".>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      b.maxAge,
			Duplicates:  b.dedup,
			Replicas:    b.replicas,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another eventbus created it first.
			st, err = b.lookupStream(ctx, name)
		}
	}
	if err != nil {
		return natsErr("create stream "+name, err)
	}
	if cfg := st.CachedInfo().Config; !slices.Contains(cfg.Subjects, ns+".>") || cfg.MaxAge != b.maxAge || cfg.Duplicates != b.dedup {
		cfg.Subjects, cfg.MaxAge, cfg.Duplicates = []string{ns + ".>"}, b.maxAge, b.dedup
		if st, err = b.js.UpdateStream(ctx, cfg); err != nil {
			return natsErr("update stream "+name, err)
		}
	}
	cfg := st.CachedInfo().Config
	b.streams.Store(ns, max(cfg.Replicas, 1))
	b.log.Info("stream ready", "stream", name, "subjects", strings.Join(cfg.Subjects, ","), "max_age", cfg.MaxAge.String(), "replicas", cfg.Replicas)
	return nil
}

// publish stores one validated event of namespace ns.
func (b *bus) publish(ctx context.Context, ns string, ev *eventbusv1.Event) (pubAck, error) {
	for attempt := 0; ; attempt++ {
		var acks []pubAck
		pb, err := b.publishBatch(ctx, []string{ns}, []*eventbusv1.Event{ev})
		if err == nil {
			acks, err = b.waitBatch(ctx, pb)
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) && attempt == 0 {
			// The stream went away (a NATS server without its old store):
			// waitBatch forgot it, so the next attempt creates it again.
			continue
		}
		if err != nil {
			return pubAck{}, err
		}
		return acks[0], nil
	}
}

// publishBatch starts storing validated events, nss[i] being the namespace
// of events[i]; waitBatch waits for the outcome.
func (b *bus) publishBatch(ctx context.Context, nss []string, events []*eventbusv1.Event) (*pubBatch, error) {
	for i, ns := range nss {
		if i > 0 && ns == nss[i-1] {
			continue
		}
		if err := b.ensureStream(ctx, ns); err != nil {
			return nil, err
		}
	}
	return b.pub.publish(ctx, nss, events, b.singleReplica)
}

// singleReplica reports whether this process found the namespace's stream
// with a single replica (see publisher).
func (b *bus) singleReplica(ns string) bool { return b.streamReplicas(ns) == 1 }

// streamReplicas is the replica count this process found the namespace's
// stream with, 0 when it has not ensured the stream.
func (b *bus) streamReplicas(ns string) int {
	v, _ := b.streams.Load(ns)
	r, _ := v.(int)
	return r
}

// waitBatch waits for a batch started by publishBatch and returns one
// acknowledgement per event, or the first error.
func (b *bus) waitBatch(ctx context.Context, pb *pubBatch) ([]pubAck, error) {
	acks, err := b.pub.await(ctx, pb)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			for _, ev := range pb.events {
				b.streams.Delete(namespaceOf(ev.GetSubject()))
			}
		}
		return nil, err
	}
	for i, a := range acks {
		if a.err == nil {
			continue
		}
		subject := pb.events[i].GetSubject()
		if errors.Is(a.err, jetstream.ErrNoStreamResponse) {
			b.streams.Delete(namespaceOf(subject))
		}
		return nil, natsErr("publish on "+subject, a.err)
	}
	return acks, nil
}

// consumerConfig is the JetStream consumer for a validated subscription of
// a stream with the given replica count.
//
// The consumer has the stream's replicas, ephemeral ones too: JetStream
// gives an ephemeral consumer a single replica unless told otherwise, placed
// on one member, and when that member dies the consumer is gone with it
// while the stream lives on (seen on a 3-node cluster: the router's
// subscription stalled, no error, for as long as the member was down).
func consumerConfig(s subscription, replicas int) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       s.durable,
		FilterSubject: s.filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.ackWait,
		MaxAckPending: s.maxAckPending,
	}
	if replicas > 1 {
		cfg.Replicas = replicas
	}
	if s.filter == s.namespace+".>" {
		// The whole stream: without a filter, JetStream skips matching every
		// event's subject.
		cfg.FilterSubject = ""
	}
	if s.autoAck {
		cfg.AckPolicy = jetstream.AckNonePolicy
		cfg.AckWait = 0
		cfg.MaxAckPending = 0
	}
	if s.durable == "" {
		// Deleted when the subscription ends; this is the fallback when the
		// eventbus dies before it can delete it.
		cfg.InactiveThreshold = time.Minute
	}
	switch s.policy {
	case eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	case eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = s.startSeq
	case eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME:
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		t := s.startTime
		cfg.OptStartTime = &t
	default:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	return cfg
}

// pullExpiry is how long one pull request of a subscription's consumer
// waits, and pullHeartbeat how often JetStream sends an idle heartbeat
// meanwhile; nats.go reports a missed heartbeat after two intervals, so a
// consumer that died with its server (or whose leader did) is noticed within
// about 4 s. (nats.go's defaults, 30 s and half of it, left a subscription
// silent for 30 s; a heartbeat at half of pullExpiry for 10 s, and the
// router's events stalled that long after every stream leader kill.)
const (
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 2 * time.Second
)

// apiTimeout bounds one JetStream API exchange (stream and consumer info,
// create, update), like nats.go's own default for a context without a
// deadline. The contexts here are those of long-lived gRPC streams, and on a
// cluster whose stream leader just died an API request is not answered until
// a new leader is elected, or at all if it was lost meanwhile: without a
// bound of its own the call waits as long as the caller's stream lives (seen:
// a publish stream hung for its client's whole deadline after the leader was
// killed), instead of failing Unavailable so that the client retries.
const apiTimeout = 5 * time.Second

// lookupAttempt bounds one stream info request of lookupStream.
const lookupAttempt = time.Second

// lookupStream gets a stream's info, asking again every lookupAttempt while
// nothing answers, until ctx ends. A replicated stream without a leader
// does not answer, and a request sent then is never answered, even once a
// leader is elected a moment later: one attempt for the whole apiTimeout
// cost up to 5 s after every election (seen twice in a row after a leader
// kill, 10 s of publishing).
func (b *bus) lookupStream(ctx context.Context, name string) (jetstream.Stream, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, lookupAttempt)
		st, err := b.js.Stream(actx, name)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			return st, err
		}
	}
}

// apiContext is ctx bounded by apiTimeout.
func apiContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, apiTimeout)
}

// consumer finds or creates the consumer of a validated subscription.
func (b *bus) consumer(ctx context.Context, s subscription) (jetstream.Consumer, error) {
	stream := StreamName(s.namespace)
	if err := b.ensureStreamFor(ctx, s); err != nil {
		return nil, err
	}
	ctx, cancel := apiContext(ctx)
	defer cancel()
	if s.bind {
		c, err := b.subJS.Consumer(ctx, stream, s.durable)
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("%w: durable %q does not exist in namespace %q", ErrNotFound, s.durable, s.namespace)
		}
		return c, natsErr("get consumer", err)
	}
	if s.durable != "" {
		c, err := b.subJS.Consumer(ctx, stream, s.durable)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				b.streams.Delete(s.namespace)
			}
			return nil, natsErr("get consumer", err)
		}
	}
	cfg := consumerConfig(s, b.streamReplicas(s.namespace))
	var c jetstream.Consumer
	var err error
	if s.durable == "" {
		// Named here, so that asking again is idempotent: on a cluster that
		// is electing a leader the request may never be answered, and one
		// attempt for the whole apiTimeout cost up to 5 s after an election
		// (as lookupStream); a second request with the same name and
		// configuration gets the consumer the first one created.
		cfg.Name = nuid.Next()
		for {
			actx, cancel := context.WithTimeout(ctx, lookupAttempt)
			c, err = b.subJS.CreateConsumer(actx, stream, cfg)
			cancel()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				break
			}
		}
	} else {
		c, err = b.subJS.CreateConsumer(ctx, stream, cfg)
	}
	if errors.Is(err, jetstream.ErrConsumerExists) || errors.Is(err, jetstream.ErrConsumerNameAlreadyInUse) {
		// Another member of the group created it first.
		c, err = b.subJS.Consumer(ctx, stream, s.durable)
	}
	if err != nil {
		return nil, natsErr("create consumer", err)
	}
	return c, nil
}

// ensureStreamFor ensures the stream of a subscription that does not bind to
// an existing durable.
func (b *bus) ensureStreamFor(ctx context.Context, s subscription) error {
	if s.bind {
		return nil
	}
	return b.ensureStream(ctx, s.namespace)
}

// subscribe delivers a validated subscription's events through send until
// ctx ends, stopping closes, send fails or the consumer goes away; ready is
// called once the consumer receives. Events taken from NATS but not sent are
// handed back (NAK) so that they are delivered again at once rather than
// after ack wait.
//
// An auto-ack consumer (AckNone) never delivers an event twice, so an event
// JetStream sent toward this process that never arrived is gone for it:
// lost with the NATS server the consuming connection was on (SIGKILLed, with
// the consumer's messages in its buffers), or dropped by nats.go as a slow
// consumer. nats.go then reconnects and pulls again from the same consumer,
// which carries on after what was lost (seen on a 3-node cluster: the router
// missed one KV event of 4,664 after the member the eventbus was connected
// to was killed). Two signs show it: the connection was re-established, and
// the consumer sequence, which counts every delivery, jumps. An ephemeral
// auto-ack subscription then ends with UNAVAILABLE, and the client
// subscribes again after the last event it received (a new consumer
// delivers the lost ones); a durable one cannot go back and logs the loss.
func (b *bus) subscribe(ctx context.Context, s subscription, stopping <-chan struct{}, ready func(consumer string) error, send func(consumer string, evs []*eventbusv1.DeliveredEvent) error) (err error) {
	var connLost <-chan struct{} // nil: not watched
	if s.autoAck && s.durable == "" {
		connLost = b.subConnLost()
	}
	cons, err := b.consumer(ctx, s)
	if err != nil {
		return err
	}
	name := cons.CachedInfo().Name
	if s.durable == "" {
		defer func() {
			// Apart, bounded: on a cluster without a leader the request
			// waits its whole timeout, and the client would wait for it
			// before subscribing again.
			go func() {
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if derr := b.subJS.DeleteConsumer(dctx, StreamName(s.namespace), name); derr != nil {
					b.log.Debug("ephemeral consumer not deleted; it expires on its own", "consumer", name, "err", derr.Error())
				}
			}()
		}()
	}
	msgs := make(chan jetstream.Msg, deliverBatch)
	done := make(chan struct{})
	fatal := make(chan error, 1)
	handBack := func(m jetstream.Msg) {
		if !s.autoAck {
			_ = m.Nak()
		}
	}
	var (
		lastDelivery uint64 // the highest consumer sequence received (auto-ack)
		skipped      bool   // a jump was seen: nothing more is handed on
	)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if s.autoAck {
			// Only this callback (nats.go's delivery goroutine) reads and
			// writes lastDelivery and skipped.
			if skipped {
				return
			}
			if md, ok := parseAckSubject(m.Reply()); ok {
				if lastDelivery != 0 && md.consumerSeq > lastDelivery+1 {
					lost := fmt.Errorf("%w: deliveries %d..%d of consumer %s", errDeliveriesLost, lastDelivery+1, md.consumerSeq-1, name)
					if s.durable == "" {
						skipped = true
						select {
						case fatal <- lost:
						default:
						}
						return
					}
					b.log.Warn("a durable auto-ack consumer delivered events that did not arrive; they are lost to it", "err", lost.Error())
				}
				lastDelivery = max(lastDelivery, md.consumerSeq)
			}
		}
		select {
		case <-done:
			handBack(m)
			return
		default:
		}
		select {
		case msgs <- m:
		case <-done:
			handBack(m)
		}
	}, jetstream.PullMaxMessages(8*deliverBatch), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// A missed heartbeat ends the subscription too: the consumer may be
		// gone with a dead member (or its leader may be), and nats.go would
		// pull from it again and again without a word. The client
		// resubscribes (from its last sequence), which finds or recreates
		// the consumer wherever the cluster now has it.
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
			errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBadRequest) ||
			errors.Is(err, jetstream.ErrNoHeartbeat) {
			select {
			case fatal <- err:
			default:
			}
			return
		}
		b.log.Debug("consumer hiccup; it retries", "consumer", name, "err", err.Error())
	}))
	if err != nil {
		return natsErr("consume", err)
	}
	defer func() {
		close(done)
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
			cc.Stop()
		}
		for {
			select {
			case m := <-msgs:
				handBack(m)
			default:
				return
			}
		}
	}()
	b.log.Debug("subscription started", "consumer", name, "filter", s.filter, "durable", s.durable != "")
	if err := ready(name); err != nil {
		return err
	}
	batch := make([]jetstream.Msg, 0, deliverBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	var carry jetstream.Msg // taken from msgs, too big for the last batch
	for {
		if carry == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-stopping:
				return fmt.Errorf("%w: eventbus is shutting down; resubscribe to another", ErrUnavailable)
			case err := <-fatal:
				if errors.Is(err, errDeliveriesLost) {
					b.log.Info("ending an auto-ack subscription that lost events in flight; the client resubscribes after the last one it received", "err", err.Error())
					return fmt.Errorf("%w: %w; subscribe again after the last event received", ErrUnavailable, err)
				}
				if errors.Is(err, jetstream.ErrStreamNotFound) {
					// Not a missed heartbeat: the publishers' next batch
					// would wait for the stream (and a batch published late
					// is stored after earlier ones lost meanwhile).
					b.streams.Delete(s.namespace)
				}
				return natsErr("consumer "+name, err)
			case <-connLost:
				b.log.Info("ending an auto-ack subscription: its NATS connection was re-established, and events in flight on it may be lost", "consumer", name)
				return fmt.Errorf("%w: the eventbus's NATS connection was re-established and events in flight on it may be lost; subscribe again after the last event received", ErrUnavailable)
			case carry = <-msgs:
			}
		}
		batch = append(batch[:0], carry)
		size := len(carry.Data())
		carry = nil
		// Gather what is waiting. When nothing is, send at once unless
		// JetStream said that more events are on their way (a replay, a
		// burst): then wait for them a little, so that a burst goes out in
		// few large responses rather than many of one or two events each.
		deadline := time.Now().Add(b.linger)
	gather:
		for len(batch) < deliverBatch {
			var m jetstream.Msg
			select {
			case m = <-msgs:
			default:
				md, ok := parseAckSubject(batch[len(batch)-1].Reply())
				wait := time.Until(deadline)
				if !ok || md.pending == 0 || wait <= 0 {
					break gather
				}
				linger.Reset(wait)
				select {
				case m = <-msgs:
					linger.Stop()
				case <-linger.C:
					break gather
				case <-ctx.Done():
					break gather // the send fails, or the next round returns
				case <-stopping:
					break gather
				}
			}
			if size += len(m.Data()); size > deliverBytes {
				carry = m
				break
			}
			batch = append(batch, m)
		}
		if err := send(name, b.deliveredBatch(batch, s.autoAck)); err != nil {
			for _, m := range batch {
				handBack(m)
			}
			if carry != nil {
				handBack(carry)
			}
			return err
		}
	}
}

// deliveredBatch converts JetStream messages, allocating the events and
// their times once for the batch; an envelope's events are handed out one
// by one (see coalesce.go), all in this batch.
func (b *bus) deliveredBatch(batch []jetstream.Msg, autoAck bool) []*eventbusv1.DeliveredEvent {
	evs := make([]*eventbusv1.DeliveredEvent, 0, len(batch))
	vals := make([]eventbusv1.DeliveredEvent, len(batch))
	times := make([]timestamppb.Timestamp, len(batch))
	for i, m := range batch {
		ev := &vals[i]
		ev.Subject, ev.Payload = m.Subject(), m.Data()
		hdr := m.Headers()
		if id := hdr[jetstream.MsgIDHeader]; len(id) > 0 {
			ev.MsgId = id[0]
		}
		if md, ok := parseAckSubject(m.Reply()); ok {
			ev.StreamSequence, ev.ConsumerSequence, ev.NumDelivered = md.streamSeq, md.consumerSeq, md.delivered
			t := &times[i]
			t.Seconds, t.Nanos = md.timestamp/1e9, int32(md.timestamp%1e9)
			ev.Time = t
		}
		if !autoAck {
			ev.AckToken = m.Reply()
		}
		if count := hdr[EnvelopeHeader]; len(count) > 0 {
			inner, err := openEnvelope(count[0], m.Data())
			if err == nil {
				evs = append(evs, envelopeEvents(ev, inner)...)
				continue
			}
			// Not one this eventbus wrote: handed on as it is.
			b.log.Warn("a stored message marked as an envelope does not decode; delivered as it is", "subject", ev.Subject, "sequence", ev.StreamSequence, "err", err.Error())
		}
		ev.Headers = userHeaders(hdr)
		evs = append(evs, ev)
	}
	return evs
}

// envelopeEvents are the delivered events of an envelope delivered as env.
func envelopeEvents(env *eventbusv1.DeliveredEvent, inner []*eventbusv1.Event) []*eventbusv1.DeliveredEvent {
	out := make([]*eventbusv1.DeliveredEvent, len(inner))
	vals := make([]eventbusv1.DeliveredEvent, len(inner))
	for j, e := range inner {
		ev := &vals[j]
		ev.Subject, ev.Payload, ev.MsgId, ev.Headers = e.GetSubject(), e.GetPayload(), e.GetMsgId(), e.GetHeaders()
		ev.StreamSequence, ev.ConsumerSequence, ev.NumDelivered, ev.Time = env.StreamSequence, env.ConsumerSequence, env.NumDelivered, env.Time
		ev.AckToken = env.AckToken
		if rest := len(inner) - 1 - j; rest > 0 {
			if ev.Headers == nil {
				ev.Headers = map[string]string{}
			}
			ev.Headers[wire.HeaderEnvelopeRest] = strconv.Itoa(rest)
			if ev.AckToken != "" {
				ev.AckToken = partialAck + env.AckToken
			}
		}
		out[j] = ev
	}
	return out
}

// userHeaders is an event's headers without the ones NATS reserves; nil when
// there are none (the common case: the msg id alone).
func userHeaders(hdr nats.Header) map[string]string {
	if _, id := hdr[jetstream.MsgIDHeader]; len(hdr) == 0 || len(hdr) == 1 && id {
		return nil
	}
	var out map[string]string
	for k, vs := range hdr {
		if strings.HasPrefix(k, "Nats-") || len(vs) == 0 {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = vs[0]
	}
	return out
}

// ackMeta is what the ack subject of a JetStream message tells about it.
type ackMeta struct {
	delivered, streamSeq, consumerSeq uint64
	timestamp                         int64 // Unix nanoseconds
	pending                           uint64
}

// parseAckSubject reads an ack subject without allocating. The old form is
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>; the
// new one adds <domain>.<account hash> after $JS.ACK and may end with more
// tokens.
func parseAckSubject(reply string) (ackMeta, bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return ackMeta{}, false
	}
	var tokens [12]string
	n := 0
	for more := true; more && n < len(tokens); n++ {
		tokens[n], rest, more = strings.Cut(rest, ".")
	}
	// n counts the tokens after $JS.ACK: 7 (old form), or 9 and more.
	var nums []string
	switch {
	case n == 7:
		nums = tokens[2:7]
	case n >= 9:
		nums = tokens[4:9]
	default:
		return ackMeta{}, false
	}
	var v [5]uint64
	for i, tok := range nums {
		if v[i], ok = scanUint(tok); !ok {
			return ackMeta{}, false
		}
	}
	if v[3] > math.MaxInt64 {
		return ackMeta{}, false
	}
	return ackMeta{delivered: v[0], streamSeq: v[1], consumerSeq: v[2], timestamp: int64(v[3]), pending: v[4]}, true
}

// ack acknowledges (or with nak, hands back) validated ack tokens and waits
// until NATS has them. A partial token (an envelope's event before its last)
// acknowledges nothing; its nak hands the envelope back.
func (b *bus) ack(ctx context.Context, tokens []string, nak bool) error {
	body := []byte("+ACK")
	if nak {
		body = []byte("-NAK")
	}
	for _, t := range tokens {
		t, partial := strings.CutPrefix(t, partialAck)
		if partial && !nak {
			continue
		}
		if err := b.subNC.Publish(t, body); err != nil {
			return natsErr("ack", err)
		}
	}
	return natsErr("ack flush", b.subNC.FlushWithContext(ctx))
}

// deleteConsumer deletes a durable consumer.
func (b *bus) deleteConsumer(ctx context.Context, ns, durable string) error {
	err := b.js.DeleteConsumer(ctx, StreamName(ns), durable)
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: durable %q does not exist in namespace %q", ErrNotFound, durable, ns)
	}
	return natsErr("delete consumer", err)
}

// streamInfo describes a namespace's stream.
func (b *bus) streamInfo(ctx context.Context, ns string) (*eventbusv1.GetStreamInfoResponse, error) {
	st, err := b.js.Stream(ctx, StreamName(ns))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: namespace %q has no stream yet; it is created on first publish or subscribe", ErrNotFound, ns)
	}
	if err != nil {
		return nil, natsErr("stream info", err)
	}
	info := st.CachedInfo()
	resp := &eventbusv1.GetStreamInfoResponse{
		Stream:        info.Config.Name,
		Subjects:      info.Config.Subjects,
		Messages:      info.State.Msgs,
		Bytes:         info.State.Bytes,
		FirstSequence: info.State.FirstSeq,
		LastSequence:  info.State.LastSeq,
		Consumers:     int64(info.State.Consumers),
		NumSubjects:   info.State.NumSubjects,
	}
	if !info.State.FirstTime.IsZero() {
		resp.FirstTime = timestamppb.New(info.State.FirstTime)
	}
	if !info.State.LastTime.IsZero() {
		resp.LastTime = timestamppb.New(info.State.LastTime)
	}
	return resp, nil
}
