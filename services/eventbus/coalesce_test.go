package eventbus_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestCoalescedBatch publishes one batch of ten events on a subject of a
// coalesced event name (kv_cache_update) and on one of another name, and
// reads them back: the first is stored as one envelope (one stream
// message, one sequence), handed out as its ten events in order with their
// own msg ids and headers, the rest header and partial ack tokens on all but
// the last; a nak of a partial token hands the whole envelope back. The
// other is stored as ten messages, one per event.
func TestCoalescedBatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	svc := startCoalescing(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const n = 10
	for _, tc := range []struct {
		name, ns, event string
		coalesced       bool
	}{
		{"kv events", "cokv", wire.KVEventsName, true},
		{"load reports", "coload", wire.LoadName, true},
		{"other events", "coother", "other_event", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subject := tc.ns + ".backend." + tc.event
			evs := make([]*eventbusv1.Event, n)
			for i := range evs {
				evs[i] = &eventbusv1.Event{Subject: subject, Payload: []byte(strconv.Itoa(i)), MsgId: fmt.Sprintf("%s-%d", tc.ns, i),
					Headers: map[string]string{"X-Index": strconv.Itoa(i)}}
			}
			p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{})
			defer p.Close()
			acks, err := p.PublishBatch(ctx, evs)
			if err != nil {
				t.Fatal(err)
			}
			info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: tc.ns})
			if err != nil {
				t.Fatal(err)
			}
			wantMsgs := uint64(n)
			if tc.coalesced {
				wantMsgs = 1
			}
			if info.GetMessages() != wantMsgs {
				t.Errorf("stream holds %d messages, want %d", info.GetMessages(), wantMsgs)
			}
			for i, a := range acks {
				want := acks[0].GetSequence() + uint64(i)
				if tc.coalesced {
					want = acks[0].GetSequence()
				}
				if a.GetSequence() != want || a.GetDuplicate() {
					t.Errorf("ack %d: sequence %d duplicate %v, want %d, false", i, a.GetSequence(), a.GetDuplicate(), want)
				}
			}

			sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: tc.ns, FilterSubject: subject, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			read := func(delivered uint64) []*eventbusv1.DeliveredEvent {
				t.Helper()
				var got []*eventbusv1.DeliveredEvent
				for i := range n {
					ev, err := sub.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, ev)
					rest := ev.GetHeaders()[wire.HeaderEnvelopeRest]
					wantRest, wantSettled := "", ev.GetStreamSequence()
					if tc.coalesced && i < n-1 {
						wantRest, wantSettled = strconv.Itoa(n-1-i), ev.GetStreamSequence()-1
					}
					if string(ev.GetPayload()) != strconv.Itoa(i) || ev.GetMsgId() != evs[i].GetMsgId() || ev.GetHeaders()["X-Index"] != strconv.Itoa(i) ||
						ev.GetStreamSequence() != acks[i].GetSequence() || ev.GetNumDelivered() != delivered || rest != wantRest || eventbusclient.Settled(ev) != wantSettled {
						t.Errorf("event %d: payload %q msg id %q headers %v sequence %d delivered %d settled %d; want payload %d, msg id %q, sequence %d, delivered %d, rest %q, settled %d",
							i, ev.GetPayload(), ev.GetMsgId(), ev.GetHeaders(), ev.GetStreamSequence(), ev.GetNumDelivered(), eventbusclient.Settled(ev),
							i, evs[i].GetMsgId(), acks[i].GetSequence(), delivered, wantRest, wantSettled)
					}
				}
				return got
			}
			got := read(1)
			if !tc.coalesced {
				if err := sub.Ack(ctx, got...); err != nil {
					t.Fatal(err)
				}
				return
			}
			// The partial tokens acknowledge nothing; a nak of one hands
			// the envelope back whole.
			if err := sub.Ack(ctx, got[:n-1]...); err != nil {
				t.Fatalf("ack of the partial tokens: %v", err)
			}
			if err := c.Nak(ctx, got[0]); err != nil {
				t.Fatalf("nak of a partial token: %v", err)
			}
			got = read(2)
			if err := sub.Ack(ctx, got...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCoalescedPublishersLoseNothing has many publishers send KV event
// batches on one subject at once, pipelined, and load reports with unary
// publishes, and reads the stream back: every event is there once, each
// publisher's in the order it sent them, in no more stream messages than
// events.
func TestCoalescedPublishersLoseNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	svc := startCoalescing(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const ns, publishers, batches, size = "colose", 8, 30, 3
	kv, load := wire.KVEventsSubject(ns, "backend"), wire.LoadSubject(ns, "backend")
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
			defer p.Close()
			var pending []*eventbusclient.Batch
			for b := range batches {
				evs := make([]*eventbusv1.Event, size)
				for i := range evs {
					id := fmt.Sprintf("%d/%d", g, b*size+i)
					evs[i] = &eventbusv1.Event{Subject: kv, Payload: []byte(id), MsgId: id}
				}
				bt, err := p.Send(ctx, evs)
				if err != nil {
					t.Error(err)
					return
				}
				pending = append(pending, bt)
			}
			for _, bt := range pending {
				if _, err := bt.Wait(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range batches {
				if _, err := c.Raw().Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: load, Payload: fmt.Appendf(nil, "%d/%d", g, i)}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, tc := range []struct {
		subject string
		per     int
	}{{kv, batches * size}, {load, batches}} {
		sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns, FilterSubject: tc.subject, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		next := make([]int, publishers)
		for range publishers * tc.per {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var g, i int
			if _, err := fmt.Sscanf(string(ev.GetPayload()), "%d/%d", &g, &i); err != nil || g < 0 || g >= publishers {
				t.Fatalf("%s: event %q", tc.subject, ev.GetPayload())
			}
			if i != next[g] {
				t.Errorf("%s: publisher %d: event %d after %d", tc.subject, g, i, next[g]-1)
			}
			next[g] = i + 1
		}
		sub.Close()
		for g, k := range next {
			if k != tc.per {
				t.Errorf("%s: publisher %d: %d events read, want %d", tc.subject, g, k, tc.per)
			}
		}
	}
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if events := uint64(publishers * (batches*size + batches)); info.GetMessages() > events {
		t.Errorf("stream holds %d messages for %d events", info.GetMessages(), events)
	}
	t.Logf("%d events in %d stream messages", publishers*(batches*size+batches), info.GetMessages())
}

// TestEnvelopeHeadersReserved refuses events that set the headers the
// eventbus marks envelopes and their events with.
func TestEnvelopeHeadersReserved(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	svc := startCoalescing(t)
	c := eventbustest.Client(t, svc.Addr().String())
	for _, h := range []string{"Switchyard-Envelope", wire.HeaderEnvelopeRest, "switchyard-envelope-x"} {
		_, err := c.Raw().Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "cohdr.backend." + wire.KVEventsName, Payload: []byte("x"), Headers: map[string]string{h: "2"}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("header %s: %v, want InvalidArgument", h, err)
		}
	}
}

// TestCoalescerHoldsNothingWhenQuiet publishes on many subjects of a
// coalesced event name: once every publish is answered, the coalescer
// drops each subject's queue and sender, so that a publisher of many
// subjects leaves nothing behind.
func TestCoalescerHoldsNothingWhenQuiet(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	svc := startCoalescing(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const subjects = 50
	for i := range subjects {
		ev := &eventbusv1.Event{Subject: wire.KVEventsSubject("coquiet", fmt.Sprintf("c%d", i)), Payload: []byte("x")}
		if _, err := c.Raw().Publish(ctx, &eventbusv1.PublishRequest{Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, guard, "the coalescer to drop every quiet subject", func() bool { return svc.CoalescingSubjects() == 0 })
}

// startCoalescing starts an eventbus on a NATS server of its own that
// coalesces the events a fleet coalesces (eventbus.FleetCoalesceEvents).
func startCoalescing(t *testing.T) *eventbus.Service {
	t.Helper()
	ns := eventbustest.StartNATS(t)
	cfg := eventbustest.Config(ns.ClientURL())
	cfg.CoalesceEvents = eventbus.FleetCoalesceEvents
	return eventbustest.StartEventbus(t, cfg)
}

// TestPublishStreamAnswersBatchesOfEverySize sends batches of changing
// sizes on one publishing stream, pipelined, on a coalesced subject and on
// another: each batch is answered with one acknowledgement per event, and
// each acknowledgement names the stream message that holds its event, in
// order, as read back.
func TestPublishStreamAnswersBatchesOfEverySize(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	svc := startCoalescing(t)
	c := eventbustest.Client(t, svc.Addr().String())
	sizes := []int{3, 1, 5, 1, 2, 8, 1}
	for _, tc := range []struct{ name, ns, event string }{
		{"coalesced", "cosizes", wire.KVEventsName},
		{"plain", "plainsizes", "other_event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subject := tc.ns + ".backend." + tc.event
			p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{})
			defer p.Close()
			var sent []*eventbusclient.Batch
			total := 0
			for _, n := range sizes {
				evs := make([]*eventbusv1.Event, n)
				for i := range evs {
					evs[i] = &eventbusv1.Event{Subject: subject, Payload: []byte(strconv.Itoa(total)), MsgId: fmt.Sprintf("%s-%d", tc.ns, total)}
					total++
				}
				b, err := p.Send(ctx, evs)
				if err != nil {
					t.Fatal(err)
				}
				sent = append(sent, b)
			}
			var acks []*eventbusv1.PublishAck
			for i, b := range sent {
				got, err := b.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != sizes[i] {
					t.Fatalf("batch %d: %d acknowledgements for %d events", i, len(got), sizes[i])
				}
				acks = append(acks, got...)
			}
			sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: tc.ns, FilterSubject: subject, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			for i := range total {
				ev, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(ev.GetPayload()) != strconv.Itoa(i) || ev.GetStreamSequence() != acks[i].GetSequence() || acks[i].GetDuplicate() {
					t.Errorf("event %d: payload %q in message %d; acknowledged as message %d (duplicate %v)",
						i, ev.GetPayload(), ev.GetStreamSequence(), acks[i].GetSequence(), acks[i].GetDuplicate())
				}
			}
		})
	}
}

// TestCoalesceGapKeepsEveryEvent has an eventbus with a coalesce gap of a
// second take one event of a coalesced subject, then twenty more sent at
// once, each its own batch on one stream: the first is stored at once
// (nothing waits before a quiet subject's first message), the others after
// the gap, in fewer messages than events; every event is there, in the
// order sent, each acknowledgement naming the message that holds it. (How
// much the gap gathers depends on how the events are spread in time, which
// a test does not control; fleet-bench shows it.)
func TestCoalesceGapKeepsEveryEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := eventbustest.StartNATS(t)
	cfg := eventbustest.Config(ns.ClientURL())
	cfg.CoalesceEvents, cfg.CoalesceGap = eventbus.FleetCoalesceEvents, time.Second
	svc := eventbustest.StartEventbus(t, cfg)
	c := eventbustest.Client(t, svc.Addr().String())
	const namespace, n = "cogap", 20
	subject := wire.KVEventsSubject(namespace, "backend")
	event := func(i int) []*eventbusv1.Event {
		return []*eventbusv1.Event{{Subject: subject, Payload: []byte(strconv.Itoa(i)), MsgId: fmt.Sprintf("%s-%d", namespace, i)}}
	}
	p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: n})
	defer p.Close()
	first, err := p.PublishBatch(ctx, event(0))
	if err != nil {
		t.Fatal(err)
	}
	sent := make([]*eventbusclient.Batch, n)
	for i := range sent {
		if sent[i], err = p.Send(ctx, event(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	acks := []*eventbusv1.PublishAck{first[0]}
	for _, b := range sent {
		got, err := b.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, got...)
	}
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetMessages() >= n+1 {
		t.Errorf("%d events stored in %d messages, want fewer", n+1, info.GetMessages())
	}
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: namespace, FilterSubject: subject, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range n + 1 {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(ev.GetPayload()) != strconv.Itoa(i) || ev.GetStreamSequence() != acks[i].GetSequence() {
			t.Errorf("event %d: payload %q in message %d, acknowledged as message %d", i, ev.GetPayload(), ev.GetStreamSequence(), acks[i].GetSequence())
		}
	}
	if acks[0].GetSequence() != 1 || acks[1].GetSequence() == 1 {
		t.Errorf("the first two events in messages %d and %d; want the first alone in message 1", acks[0].GetSequence(), acks[1].GetSequence())
	}
}
