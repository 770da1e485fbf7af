package eventbus_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestPublishSubscribeInOrder(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "vllm-agg", FilterSubject: "vllm-agg.backend.kv_cache_update"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	seqs := publishN(ctx, t, c, "vllm-agg.backend.kv_cache_update", 0, 50)
	// An event on another subject of the namespace is filtered out.
	if _, err := c.Publish(ctx, "vllm-agg.backend.other", wrapperspb.UInt64(999)); err != nil {
		t.Fatal(err)
	}
	// The second half through the pipelined batch publisher.
	p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
	defer p.Close()
	var batches []*eventbusclient.Batch
	for i := 50; i < 100; i += 10 {
		var evs []*eventbusv1.Event
		for j := i; j < i+10; j++ {
			ev, err := eventbusclient.NewEvent("vllm-agg.backend.kv_cache_update", wrapperspb.UInt64(uint64(j)))
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		b, err := p.Send(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	for _, b := range batches {
		acks, err := b.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acks {
			seqs = append(seqs, a.GetSequence())
		}
	}
	vals, evs := next(ctx, t, sub, 100, true)
	if diff := cmp.Diff(seq(0, 100), vals); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	var gotSeqs []uint64
	for _, ev := range evs {
		gotSeqs = append(gotSeqs, ev.GetStreamSequence())
	}
	if diff := cmp.Diff(seqs, gotSeqs); diff != "" {
		t.Errorf("stream sequences (-published +delivered):\n%s", diff)
	}
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "vllm-agg"})
	if err != nil {
		t.Fatal(err)
	}
	// The KV events of a busy moment may share stream messages
	// (coalesce.go): at most 101 messages, the last the last batch's.
	if last := seqs[len(seqs)-1]; info.GetMessages() > 101 || info.GetFirstSequence() != 1 || info.GetLastSequence() != last ||
		info.GetMessages() != last || info.GetStream() != eventbus.StreamName("vllm-agg") {
		t.Errorf("stream info = %v; want at most 101 messages, sequences 1-%d", info, last)
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	publishN(ctx, t, c, "ns.comp.ev", 0, 10)
	// The stored time of event 6 (sequence 7), to replay from.
	all, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	_, evs := next(ctx, t, all, 10, false)
	all.Close()
	at := evs[6].GetTime()

	tests := []struct {
		name string
		req  *eventbusv1.SubscribeRequest
		want []uint64
	}{
		{"from the start", &eventbusv1.SubscribeRequest{DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL}, seq(0, 10)},
		{"from a sequence", &eventbusv1.SubscribeRequest{DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE, StartSequence: 4}, seq(3, 10)},
		{"from a time", &eventbusv1.SubscribeRequest{DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME, StartTime: at}, seq(6, 10)},
		{"new only", &eventbusv1.SubscribeRequest{DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW}, seq(100, 101)},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Namespace = "ns"
			tc.req.DurableName = fmt.Sprintf("replay-%d", i)
			sub, err := c.Subscribe(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if tc.want[0] == 100 {
				publishN(ctx, t, c, "ns.comp.ev", 100, 101)
			}
			got, _ := next(ctx, t, sub, len(tc.want), true)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replayed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDurableResumesWhereItLeftOff(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	req := &eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "worker", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL}
	publishN(ctx, t, c, "ns.comp.ev", 0, 10)
	sub, err := c.Subscribe(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := next(ctx, t, sub, 5, true)
	sub.Close()
	publishN(ctx, t, c, "ns.comp.ev", 10, 15)

	// Bind: the durable must exist, and keeps its position.
	req.Bind = true
	sub, err = c.Subscribe(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	more, _ := next(ctx, t, sub, 10, true)
	// Events the first subscriber had received but not read were handed
	// back and come again, possibly out of their original order.
	slices.Sort(more)
	if diff := cmp.Diff(seq(0, 15), append(got, more...)); diff != "" {
		t.Errorf("events across the reconnection (-want +got):\n%s", diff)
	}
	if _, err := c.Raw().DeleteConsumer(ctx, &eventbusv1.DeleteConsumerRequest{Namespace: "ns", DurableName: "worker"}); err != nil {
		t.Errorf("delete consumer: %v", err)
	}
}

// TestUnacknowledgedEventsAreRedelivered: an event not acknowledged within
// its ack wait comes again, a nak brings it back at once, and an ack ends
// it. The ack wait (a second) leaves a loaded machine time to get each ack
// to JetStream before it runs out, which would be a redelivery of its own.
func TestUnacknowledgedEventsAreRedelivered(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{
		Namespace: "ns", DurableName: "slow", AckWait: durationpb.New(time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publishN(ctx, t, c, "ns.comp.ev", 0, 2)

	first, evs := next(ctx, t, sub, 2, false) // not acknowledged
	if err := sub.Ack(ctx, evs[1]); err != nil {
		t.Fatal(err)
	}
	again, evs := next(ctx, t, sub, 1, false)
	if first[0] != 0 || again[0] != 0 || evs[0].GetNumDelivered() != 2 {
		t.Fatalf("redelivered value %d (delivery %d); want 0 (delivery 2)", again[0], evs[0].GetNumDelivered())
	}
	// A nak brings it back at once; then it is acknowledged for good.
	if err := c.Nak(ctx, evs[0]); err != nil {
		t.Fatal(err)
	}
	_, evs = next(ctx, t, sub, 1, true)
	if evs[0].GetNumDelivered() != 3 {
		t.Errorf("after nak: delivery %d; want 3", evs[0].GetNumDelivered())
	}
	publishN(ctx, t, c, "ns.comp.ev", 2, 3)
	if vals, _ := next(ctx, t, sub, 1, true); vals[0] != 2 {
		t.Errorf("after the ack, next value %d; want 2 (no further redelivery)", vals[0])
	}
}

func TestConsumerGroupSplitsEvents(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const n = 300
	req := &eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "group", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, MaxAckPending: 4}
	var subs []*eventbusclient.Subscription
	for range 2 {
		sub, err := c.Subscribe(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs = append(subs, sub)
	}
	seen := make(chan uint64, n)
	var wg sync.WaitGroup
	counts := make([]int, len(subs))
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := sub.Next(stop)
				if err != nil {
					return
				}
				if err := sub.Ack(ctx, ev); err != nil {
					t.Errorf("ack: %v", err)
					return
				}
				v, err := eventbusclient.Decode[wrapperspb.UInt64Value](ev)
				if err != nil {
					t.Errorf("decode: %v", err)
					return
				}
				counts[i]++
				seen <- v.GetValue()
			}
		}()
	}
	publishN(ctx, t, c, "ns.comp.ev", 0, n)
	got := map[uint64]int{}
	for len(got) < n {
		select {
		case v := <-seen:
			got[v]++
		case <-ctx.Done():
			t.Fatalf("group received %d distinct events of %d", len(got), n)
		}
	}
	// Everything is acknowledged: nothing more arrives once both are idle.
	cancel()
	wg.Wait()
	close(seen)
	for v := range seen {
		got[v]++
	}
	for v, k := range got {
		if k != 1 {
			t.Errorf("event %d delivered %d times", v, k)
		}
	}
	t.Logf("split: %v", counts)
	if counts[0] == 0 || counts[1] == 0 {
		t.Errorf("split %v: each member should receive a share", counts)
	}
}

func TestLargeEventsAreDeliveredInBoundedBatches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "big", AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// Ten events near max_payload: far over gRPC's default 4 MiB message
	// limit together, so the eventbus must split its answers.
	const n = 10
	p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{})
	defer p.Close()
	var bts []*eventbusclient.Batch
	for i := range n {
		payload := bytes.Repeat([]byte{byte(i)}, 1000<<10)
		bt, err := p.Send(ctx, []*eventbusv1.Event{{Subject: "big.comp.blob", Payload: payload}})
		if err != nil {
			t.Fatal(err)
		}
		bts = append(bts, bt)
	}
	for _, bt := range bts {
		if _, err := bt.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if len(ev.GetPayload()) != 1000<<10 || ev.GetPayload()[0] != byte(i) {
			t.Fatalf("event %d: %d bytes starting with %d", i, len(ev.GetPayload()), ev.GetPayload()[0])
		}
	}
}

// TestReplayIsDeliveredInFullBatches checks that a subscription waits for
// the events JetStream reports pending instead of answering with whatever
// arrived first: a replay of 1000 events comes in full responses of 256
// (the eventbus's batch limit) and one for the rest.
func TestReplayIsDeliveredInFullBatches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns := eventbustest.StartNATS(t)
	cfg := eventbustest.Config(ns.ClientURL())
	cfg.DeliverLinger = time.Second // the largest: only a full batch or the last event ends one
	svc := eventbustest.StartEventbus(t, cfg)
	c := eventbustest.Client(t, svc.Addr().String())
	const n = 1000
	evs := make([]*eventbusv1.Event, n)
	for i := range evs {
		evs[i] = &eventbusv1.Event{Subject: "replay.comp.ev", Payload: []byte(strconv.Itoa(i))}
	}
	p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{})
	defer p.Close()
	if _, err := p.PublishBatch(ctx, evs); err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := eventbusv1.NewEventBusServiceClient(conn).Subscribe(sctx, &eventbusv1.SubscribeRequest{
		Namespace: "replay", AutoAck: true, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL,
	})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for got := 0; got < n; {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		for i, ev := range resp.GetEvents() {
			if string(ev.GetPayload()) != strconv.Itoa(got+i) || ev.GetStreamSequence() != uint64(got+i+1) {
				t.Fatalf("event %d: payload %q, sequence %d", got+i, ev.GetPayload(), ev.GetStreamSequence())
			}
		}
		got += len(resp.GetEvents())
		sizes = append(sizes, len(resp.GetEvents()))
	}
	if want := []int{256, 256, 256, 232}; !slices.Equal(sizes, want) {
		t.Errorf("responses of %v events; want %v", sizes, want)
	}
}

func TestClientSubscribeReportsFinalErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	_, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "ghost", Bind: true})
	if status.Code(err) != codes.NotFound {
		t.Errorf("bind to an unknown durable: %v; want NotFound", err)
	}
	_, err = c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("sequence policy without a sequence: %v; want InvalidArgument", err)
	}
}
