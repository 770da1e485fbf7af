package eventbus_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestSoakThroughFaults publishes without pause from several publishers
// through two eventbus replicas while one replica and the nats-server are
// restarted again and again, and reads everything back through a consumer
// group of two with explicit acks. In the end every event is stored exactly
// once and every event reached the group. With -short it runs a few seconds
// and two faults; make test-long runs it for a minute.
func TestSoakThroughFaults(t *testing.T) {
	t.Parallel()
	duration, every := time.Minute, 2*time.Second
	if testing.Short() {
		duration, every = 2500*time.Millisecond, time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+2*time.Minute)
	defer cancel()

	store := t.TempDir()
	ns := eventbustest.StartNATSAt(t, -1, store)
	natsURL := ns.ClientURL()
	natsPort := portOf(t, natsURL)
	stable := eventbustest.StartEventbus(t, eventbustest.Config(natsURL))
	// The other replica is restarted on the address it first got, so that
	// clients find it again.
	flakyAddr := "127.0.0.1:0"
	startFlaky := func() *eventbus.Service {
		cfg := eventbustest.Config(natsURL)
		cfg.Server.GRPCAddr = flakyAddr
		svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
		if err != nil {
			t.Fatalf("start eventbus: %v", err)
		}
		return svc
	}
	flaky := startFlaky()
	flakyAddr = flaky.Addr().String()
	defer func() {
		if flaky != nil {
			_ = flaky.Stop()
		}
	}()
	c := eventbustest.Client(t, flakyAddr, stable.Addr().String())

	// A consumer group of two, acknowledging every event.
	var mu sync.Mutex
	received := map[string]int{}
	var readers sync.WaitGroup
	rctx, stopReading := context.WithCancel(ctx)
	for range 2 {
		// Events delivered as NATS went down are only redelivered after
		// the ack wait: keep it short.
		sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{
			Namespace: "soak", DurableName: "group", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL,
			AckWait: durationpb.New(time.Second),
		})
		if err != nil {
			t.Fatal(err)
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer sub.Close()
			var unacked []*eventbusv1.DeliveredEvent
			for {
				ev, err := sub.Next(rctx)
				if err != nil {
					return
				}
				mu.Lock()
				received[string(ev.GetPayload())]++
				mu.Unlock()
				// Acks go in batches; one lost to a fault only means a
				// redelivery.
				if unacked = append(unacked, ev); len(unacked) == 100 {
					_ = sub.Ack(rctx, unacked...)
					unacked = unacked[:0]
				}
			}
		}()
	}

	// Publishers: batches of 50 with their own msg ids, up to 4 in flight.
	var published sync.Map // payload -> sequence
	var writers sync.WaitGroup
	wctx, stopWriting := context.WithCancel(ctx)
	for g := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
			defer p.Close()
			type sent struct {
				b   *eventbusclient.Batch
				evs []*eventbusv1.Event
			}
			var pending []sent
			settle := func(s sent) bool {
				acks, err := s.b.Wait(ctx)
				if err != nil {
					t.Errorf("publisher %d: batch failed for good: %v", g, err)
					return false
				}
				for i, a := range acks {
					published.Store(string(s.evs[i].GetPayload()), a.GetSequence())
				}
				return true
			}
			for n := 0; wctx.Err() == nil; n++ {
				evs := make([]*eventbusv1.Event, 50)
				for i := range evs {
					id := fmt.Sprintf("%d-%d-%d", g, n, i)
					evs[i] = &eventbusv1.Event{Subject: "soak.comp.ev", Payload: []byte(id), MsgId: id}
				}
				b, err := p.Send(ctx, evs)
				if err != nil {
					t.Errorf("publisher %d: %v", g, err)
					return
				}
				pending = append(pending, sent{b, evs})
				if len(pending) == 4 {
					if !settle(pending[0]) {
						return
					}
					pending = pending[1:]
				}
			}
			for _, s := range pending {
				if !settle(s) {
					return
				}
			}
		}()
	}

	// Faults: the flaky replica or the nats-server goes down and comes back.
	faults := 0
	for deadline := time.Now().Add(duration); time.Now().Before(deadline) && !t.Failed(); faults++ {
		time.Sleep(every / 2)
		if faults%2 == 0 {
			_ = flaky.Stop()
			flaky = nil
			time.Sleep(every / 4)
			flaky = startFlaky()
		} else {
			eventbustest.StopNATS(ns)
			time.Sleep(every / 4)
			ns = eventbustest.StartNATSAt(t, natsPort, store)
		}
		time.Sleep(time.Duration(rand.Int64N(int64(every / 4))))
	}
	stopWriting()
	writers.Wait()
	if t.Failed() {
		stopReading()
		readers.Wait()
		return
	}

	total := 0
	published.Range(func(any, any) bool { total++; return true })
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "soak"})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetMessages() != uint64(total) {
		t.Errorf("stream holds %d events; %d were published, each to be stored once", info.GetMessages(), total)
	}
	// The group reads everything, some events more than once.
	for {
		mu.Lock()
		n := len(received)
		mu.Unlock()
		if n >= total || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopReading()
	readers.Wait()
	missing := 0
	published.Range(func(k, _ any) bool {
		if received[k.(string)] == 0 {
			missing++
		}
		return true
	})
	if missing > 0 || len(received) != total {
		t.Errorf("the group received %d distinct events, %d of the published ones missing; want all %d", len(received), missing, total)
	}
	t.Logf("%d faults, %d events published and stored once, read back by a group of two", faults, total)
}
