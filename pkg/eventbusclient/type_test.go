package eventbusclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestEventsNameTheirType publishes through each publishing path (Publish,
// a Publisher's batch, an event with headers of its own) and reads the events
// back from the stream: each carries Switchyard-Type with its payload's fully
// qualified name, Decode of the named type works and Decode of another type
// fails with wire.ErrWrongType.
func TestEventsNameTheirType(t *testing.T) {
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ns = "typetest"
	kv := &workerv1.KvEventBatch{InstanceId: 7, FirstEventId: 1, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}}}
	if _, err := c.Publish(ctx, wire.KVEventsSubject(ns, "backend"), kv, eventbusclient.WithMsgID(wire.KVEventsMsgID(7, 0, 1))); err != nil {
		t.Fatal(err)
	}
	pub := c.NewPublisher(ctx, eventbusclient.PublisherOptions{})
	load, err := eventbusclient.NewEvent(wire.LoadSubject(ns, "backend"), &workerv1.LoadMetrics{InstanceId: 7, RunningRequests: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishBatch(ctx, []*eventbusv1.Event{load}); err != nil {
		t.Fatal(err)
	}
	pub.Close()
	own := map[string]string{"X-Trace": "abc"}
	if _, err := c.Publish(ctx, ns+".other.thing", wrapperspb.String("x"), eventbusclient.WithHeaders(own)); err != nil {
		t.Fatal(err)
	}
	if len(own) != 1 {
		t.Errorf("Publish changed the caller's header map: %v", own)
	}

	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := []string{"switchyard.worker.v1.KvEventBatch", "switchyard.worker.v1.LoadMetrics", "google.protobuf.StringValue"}
	for i, typ := range want {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got := ev.GetHeaders()[wire.HeaderType]; got != typ {
			t.Errorf("event %d on %s: %s = %q, want %q (headers %v)", i, ev.GetSubject(), wire.HeaderType, got, typ, ev.GetHeaders())
		}
		switch i {
		case 0:
			if b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev); err != nil || b.GetInstanceId() != 7 {
				t.Errorf("Decode KvEventBatch = %v, %v", b, err)
			}
			if _, err := eventbusclient.Decode[workerv1.LoadMetrics](ev); !errors.Is(err, wire.ErrWrongType) {
				t.Errorf("Decode of a KvEventBatch as LoadMetrics: %v, want ErrWrongType", err)
			}
		case 1:
			if m, err := eventbusclient.Decode[workerv1.LoadMetrics](ev); err != nil || m.GetRunningRequests() != 2 {
				t.Errorf("Decode LoadMetrics = %v, %v", m, err)
			}
		case 2:
			if ev.GetHeaders()["X-Trace"] != "abc" {
				t.Errorf("the caller's header was lost: %v", ev.GetHeaders())
			}
		}
	}
}
