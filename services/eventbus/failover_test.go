package eventbus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestNATSRestartLosesNoAcknowledgedEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	store := t.TempDir()
	ns := eventbustest.StartNATSAt(t, -1, store)
	url := ns.ClientURL()
	svc := eventbustest.StartEventbus(t, eventbustest.Config(url))
	c := eventbustest.Client(t, svc.Addr().String())

	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "survivor", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	before := publishN(ctx, t, c, "ns.comp.ev", 0, 20)
	got, _ := next(ctx, t, sub, 10, true)

	eventbustest.StopNATS(ns)
	// Publishes while NATS is down are retried until it is back: unary ones
	// by the client, pipelined batches by the publisher.
	pub := c.NewPublisher(ctx, eventbusclient.PublisherOptions{})
	defer pub.Close()
	var batches []*eventbusclient.Batch
	for i := 100; i < 150; i += 10 {
		var evs []*eventbusv1.Event
		for j := i; j < i+10; j++ {
			ev, err := eventbusclient.NewEvent("ns.comp.ev", wrapperspb.UInt64(uint64(j)))
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		bt, err := pub.Send(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, bt)
	}
	// A publish whose caller gives up while NATS is down: it may or may not
	// be stored once NATS is back (the eventbus buffers it); retried later
	// with the same msg id, it is stored once either way.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Raw().Publish(short, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "ns.comp.ev", MsgId: "ambiguous"}})
	cancel()
	if err == nil {
		t.Fatal("publish succeeded while NATS was down")
	}
	var during []uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 20; i < 30; i++ {
			resp, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(uint64(i)), eventbusclient.WithMsgID(fmt.Sprintf("ns.comp.ev-%d", i)))
			if err != nil {
				t.Errorf("publish %d across the restart: %v", i, err)
				return
			}
			during = append(during, resp.GetSequence())
		}
	}()
	eventbustest.StartNATSAt(t, portOf(t, url), store)
	<-done
	if t.Failed() {
		return
	}
	// Retrying every publish is deduplicated: same sequences, nothing stored
	// twice.
	for i := 0; i < 30; i++ {
		resp, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(uint64(i)), eventbusclient.WithMsgID(fmt.Sprintf("ns.comp.ev-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]uint64(nil), before...), during...)[i]
		if !resp.GetDuplicate() || resp.GetSequence() != want {
			t.Errorf("retry of %d: sequence %d duplicate %v; want %d duplicate", i, resp.GetSequence(), resp.GetDuplicate(), want)
		}
	}
	for _, bt := range batches {
		if _, err := bt.Wait(ctx); err != nil {
			t.Fatalf("batch across the restart: %v", err)
		}
	}
	if _, err := c.PublishEvent(ctx, &eventbusv1.Event{Subject: "ns.comp.ev", MsgId: "ambiguous"}); err != nil {
		t.Fatal(err)
	}
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetMessages() != 81 {
		t.Errorf("stream holds %d events; want 81, each stored once", info.GetMessages())
	}
	// The durable subscription carries on: every event arrives (some of the
	// ones in flight during the restart possibly twice).
	seen := map[uint64]bool{}
	for _, v := range got {
		seen[v] = true
	}
	for len(seen) < 80 {
		vals, _ := next(ctx, t, sub, 1, true)
		seen[vals[0]] = true
	}
}

func TestFailoverToAnotherEventbus(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := eventbustest.StartNATS(t)
	a := eventbustest.StartEventbus(t, eventbustest.Config(ns.ClientURL()))
	b := eventbustest.StartEventbus(t, eventbustest.Config(ns.ClientURL()))
	c := eventbustest.Client(t, a.Addr().String(), b.Addr().String())

	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "follower", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const n, batch = 400, 10
	// Unary publishes and pipelined batches both cross the failover; the
	// publisher resends the batches it has no answer for, and their message
	// ids keep them from being stored twice.
	pub := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 8})
	defer pub.Close()
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		var pending []*eventbusclient.Batch
		for i := 0; i < n/2; i += batch {
			var evs []*eventbusv1.Event
			for j := i; j < i+batch; j++ {
				ev, err := eventbusclient.NewEvent("ns.comp.ev", wrapperspb.UInt64(uint64(j)))
				if err != nil {
					t.Error(err)
					return
				}
				evs = append(evs, ev)
			}
			bt, err := pub.Send(ctx, evs)
			if err != nil {
				t.Errorf("send batch %d: %v", i, err)
				return
			}
			pending = append(pending, bt)
			if _, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(uint64(n/2+i/batch))); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
		for _, bt := range pending {
			if _, err := bt.Wait(ctx); err != nil {
				t.Errorf("batch: %v", err)
			}
		}
	}()
	want := n/2 + n/2/batch
	seen := map[uint64]bool{}
	for len(seen) < want {
		vals, _ := next(ctx, t, sub, 1, true)
		seen[vals[0]] = true
		if len(seen) == want/4 {
			// Kill the eventbus serving the subscription (the first address).
			if err := a.Stop(); err != nil {
				t.Errorf("stop eventbus a: %v", err)
			}
		}
	}
	<-pubDone
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetMessages() != uint64(want) {
		t.Errorf("stream holds %d events; want %d (each stored once)", info.GetMessages(), want)
	}
}
