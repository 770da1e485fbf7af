package eventbus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestAutoAckSubscriptionRecoversLostDeliveries makes JetStream deliver an
// event of an auto-ack subscription's consumer somewhere else: a second
// client pulls one event from the same consumer, as a delivery lost with the
// NATS server the eventbus was connected to looks from the consumer's side
// (delivered, consumer sequence counted, never acknowledged because auto-ack
// needs none, never delivered again). On a 3-node cluster this cost the
// router one KV event after a member was killed. The subscriber must still
// receive every event: the eventbus sees the consumer sequence jump, ends
// the subscription, and the client subscribes again after the last event
// it received.
func TestAutoAckSubscriptionRecoversLostDeliveries(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const subject = "lost.backend.kv_cache_update"
	publishN(ctx, t, c, subject, 0, 3)
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "lost", FilterSubject: subject,
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	next(ctx, t, sub, 3, false)

	// The thief's pull request waits behind the eventbus's; JetStream
	// serves waiting pull requests in turn, so one of the next events goes
	// to it.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	inbox := nats.NewInbox()
	stolen, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	pull := fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", eventbus.StreamName("lost"), sub.Consumer())
	if err := nc.PublishRequest(pull, inbox, []byte(`{"batch":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the request
		t.Fatal(err)
	}
	// JetStream hands an event to the waiting requests in turn, but the
	// eventbus may have pulled again in between: publish one event at a
	// time until one goes to the second client (bounded), so that the
	// theft does not rest on the order of the server's waiting requests.
	published := 3
	var md *nats.MsgMetadata
	for range 20 {
		publishN(ctx, t, c, subject, published, published+1)
		published++
		m, err := stolen.NextMsg(2 * time.Second)
		if errors.Is(err, nats.ErrTimeout) {
			continue // the eventbus got this one
		}
		if err != nil {
			t.Fatalf("the second client's pull: %v", err)
		}
		if len(m.Data) == 0 {
			t.Fatalf("the second client got a status, not an event: %v", m.Header)
		}
		if md, err = m.Metadata(); err != nil {
			t.Fatal(err)
		}
		break
	}
	if md == nil {
		t.Fatalf("none of %d events went to the second client", published-3)
	}
	// The eventbus sees the consumer sequence jump at the next delivery.
	publishN(ctx, t, c, subject, published, published+1)
	published++
	t.Logf("JetStream delivered stream sequence %d (consumer sequence %d) to the second client", md.Sequence.Stream, md.Sequence.Consumer)

	// Every event reaches the subscriber, in stream order; the one it
	// received twice (before and after resubscribing), if any, is a
	// duplicate it may see.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []uint64
	for last := uint64(3); last < uint64(published); {
		ev, err := sub.Next(rctx)
		if err != nil {
			t.Fatalf("after stream sequences %v: %v (stream sequence %d was delivered elsewhere and never recovered)", got, err, md.Sequence.Stream)
		}
		seq := ev.GetStreamSequence()
		got = append(got, seq)
		if seq > last+1 {
			t.Fatalf("stream sequences %v: %d to %d missing", got, last+1, seq-1)
		}
		last = max(last, seq)
	}
	t.Logf("the subscriber received stream sequences %v after the first three", got)
}
