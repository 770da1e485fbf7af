package eventbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// CorePrefix is put before an event's subject when it travels on NATS Core
// (PublishRequest.core, SubscribeRequest.core); see wire.CorePrefix.
const CorePrefix = wire.CorePrefix

// coreBuffer bounds the events a core subscription holds for a slow
// subscriber; past it NATS drops events (at most once), which core
// consumers notice as gaps in event ids and fill from the workers.
const coreBuffer = 65536

// publishCore publishes validated events on NATS Core. nc copies each
// message before PublishMsg returns, so one message serves the batch.
func (b *bus) publishCore(events []*eventbusv1.Event) error {
	m := &nats.Msg{Header: nats.Header{}}
	var id [1]string
	for _, ev := range events {
		fillMsg(m, ev, "", &id)
		m.Subject = wire.CoreSubject(ev.GetSubject())
		if err := b.nc.PublishMsg(m); err != nil {
			if errors.Is(err, nats.ErrReconnectBufExceeded) {
				err = fmt.Errorf("NATS is reconnecting and its reconnect buffer (--nats-reconnect-buffer, %d bytes) is full: %w", b.nc.Opts.ReconnectBufSize, err)
			}
			return natsErr("core publish on "+ev.GetSubject(), err)
		}
	}
	return nil
}

// subscribeCore delivers the NATS Core events of a validated core
// subscription through send until ctx ends, stopping closes or send fails.
func (b *bus) subscribeCore(ctx context.Context, s subscription, stopping <-chan struct{}, ready func(consumer string) error, send func(consumer string, evs []*eventbusv1.DeliveredEvent) error) error {
	ch := make(chan *nats.Msg, coreBuffer)
	sub, err := b.subNC.ChanSubscribe(wire.CoreSubject(s.filter), ch)
	if err != nil {
		return natsErr("core subscribe", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The subscription exists on the server once a flush returns; only
	// then may the caller rely on getting what is published next.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = b.subNC.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return natsErr("core subscribe", err)
	}
	const consumer = "core"
	if err := ready(consumer); err != nil {
		return err
	}
	var evs []*eventbusv1.DeliveredEvent
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stopping:
			return fmt.Errorf("%w: eventbus is shutting down; subscribe to another", ErrUnavailable)
		case m := <-ch:
			evs = append(evs[:0], coreEvent(m))
			// Whatever else is already here goes in the same message.
			for len(evs) < 256 {
				select {
				case m := <-ch:
					evs = append(evs, coreEvent(m))
					continue
				default:
				}
				break
			}
			if err := send(consumer, evs); err != nil {
				return err
			}
			evs = make([]*eventbusv1.DeliveredEvent, 0, 16)
		}
	}
}

func coreEvent(m *nats.Msg) *eventbusv1.DeliveredEvent {
	return &eventbusv1.DeliveredEvent{Subject: strings.TrimPrefix(m.Subject, CorePrefix), Payload: m.Data,
		Headers: userHeaders(m.Header), MsgId: m.Header.Get(nats.MsgIdHdr), Time: timestamppb.Now()}
}

// validateCoreSubscribe checks what a core subscription may not have.
func validateCoreSubscribe(req *eventbusv1.SubscribeRequest) error {
	switch {
	case req.GetDurableName() != "" || req.GetBind():
		return invalidf("a core subscription has no durable_name or bind: NATS Core keeps nothing")
	case req.GetDeliverPolicy() != eventbusv1.DeliverPolicy_DELIVER_POLICY_UNSPECIFIED && req.GetDeliverPolicy() != eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW:
		return invalidf("a core subscription delivers new events only, not deliver policy %s", req.GetDeliverPolicy())
	case req.GetAckWait() != nil || req.GetMaxAckPending() != 0:
		return invalidf("a core subscription takes no ack_wait or max_ack_pending: nothing is acknowledged")
	}
	return nil
}
