package eventbus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestCoreEvents publishes on NATS Core, single and batched: a core
// subscriber gets every event in order, a stream subscriber gets none of
// them (nothing is stored), and core subscriptions refuse stream options.
func TestCoreEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())

	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "corens", FilterSubject: "corens.*.kv_cache_update", Core: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub := c.NewPublisher(ctx, eventbusclient.PublisherOptions{Core: true})
	defer pub.Close()
	const n = 50
	for i := 0; i < n; i += 10 {
		var evs []*eventbusv1.Event
		for j := i; j < i+10; j++ {
			evs = append(evs, &eventbusv1.Event{Subject: "corens.backend.kv_cache_update", Payload: []byte(fmt.Sprint(j)), Headers: map[string]string{"X-N": fmt.Sprint(j)}})
		}
		acks, err := pub.PublishBatch(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acks {
			if a.GetSequence() != 0 {
				t.Fatalf("core ack has sequence %d; want 0", a.GetSequence())
			}
		}
	}
	if _, err := c.Raw().Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "corens.backend.kv_cache_update", Payload: []byte(fmt.Sprint(n))}, Core: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= n; i++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(ev.GetPayload()); got != fmt.Sprint(i) || ev.GetSubject() != "corens.backend.kv_cache_update" || ev.GetStreamSequence() != 0 {
			t.Fatalf("event %d: payload %q subject %q sequence %d", i, got, ev.GetSubject(), ev.GetStreamSequence())
		}
		if i < n && ev.GetHeaders()["X-N"] != fmt.Sprint(i) {
			t.Fatalf("event %d: headers %v", i, ev.GetHeaders())
		}
	}
	if _, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "corens"}); status.Code(err) != codes.NotFound {
		t.Fatalf("stream of a core-only namespace: %v; want NotFound (nothing stored)", err)
	}

	for name, req := range map[string]*eventbusv1.SubscribeRequest{
		"durable":  {Namespace: "corens", Core: true, DurableName: "d"},
		"replay":   {Namespace: "corens", Core: true, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL},
		"ack wait": {Namespace: "corens", Core: true, AckWait: durationpb.New(time.Second)},
	} {
		if _, err := c.Subscribe(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", name, err)
		}
	}
}
