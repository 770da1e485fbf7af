package eventbus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestConcurrentPublishersGetTheirOwnSequences publishes from several
// publishers at once, in batches that mix namespaces, and checks that every
// acknowledgement names the sequence its own event was stored at, and that a
// resent batch is answered with the same sequences, as duplicates.
func TestConcurrentPublishersGetTheirOwnSequences(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const publishers, batches, size = 6, 10, 40
	namespaces := []string{"cp0", "cp1", "cp2"}
	batchOf := func(g, b int) []*eventbusv1.Event {
		evs := make([]*eventbusv1.Event, size)
		for i := range evs {
			id := fmt.Sprintf("%d-%d-%d", g, b, i)
			evs[i] = &eventbusv1.Event{Subject: namespaces[(g+b+i/7)%len(namespaces)] + ".comp.ev", Payload: []byte(id), MsgId: id}
		}
		return evs
	}
	var mu sync.Mutex
	acked := map[string]uint64{} // namespace/payload -> sequence
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
			defer p.Close()
			var sent [][]*eventbusv1.Event
			var pending []*eventbusclient.Batch
			for b := range batches {
				evs := batchOf(g, b)
				bt, err := p.Send(ctx, evs)
				if err != nil {
					t.Error(err)
					return
				}
				sent, pending = append(sent, evs), append(pending, bt)
			}
			for k, bt := range pending {
				acks, err := bt.Wait(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, a := range acks {
					ev := sent[k][i]
					if a.GetDuplicate() {
						t.Errorf("event %s: first publish answered as a duplicate", ev.GetPayload())
					}
					acked[namespaceOf(ev.GetSubject())+"/"+string(ev.GetPayload())] = a.GetSequence()
				}
				mu.Unlock()
			}
			// Resending a batch gives the same sequences, as duplicates.
			acks, err := p.PublishBatch(ctx, batchOf(g, 0))
			if err != nil {
				t.Error(err)
				return
			}
			for i, a := range acks {
				ev := sent[0][i]
				mu.Lock()
				want := acked[namespaceOf(ev.GetSubject())+"/"+string(ev.GetPayload())]
				mu.Unlock()
				if !a.GetDuplicate() || a.GetSequence() != want {
					t.Errorf("resent event %s: sequence %d, duplicate %v; want %d, true", ev.GetPayload(), a.GetSequence(), a.GetDuplicate(), want)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every stored event is where its acknowledgement said.
	total := 0
	for _, ns := range namespaces {
		info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		for range info.GetMessages() {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want, ok := acked[ns+"/"+string(ev.GetPayload())]; !ok || want != ev.GetStreamSequence() {
				t.Errorf("%s: event %s stored at %d; its acknowledgement said %d", ns, ev.GetPayload(), ev.GetStreamSequence(), want)
			}
		}
		_ = sub.Close()
		total += int(info.GetMessages())
	}
	if total != publishers*batches*size || len(acked) != total {
		t.Errorf("%d events stored, %d acknowledged; want %d", total, len(acked), publishers*batches*size)
	}
}

func namespaceOf(subject string) string {
	ns, _, _ := strings.Cut(subject, ".")
	return ns
}

func TestPublisherFailsOnlyTheRefusedBatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	p := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
	defer p.Close()
	batches := [][]*eventbusv1.Event{
		{{Subject: "ns.comp.ev", Payload: []byte("1")}},
		{{Subject: "ns.comp.ev", Payload: []byte("2")}, {Subject: "ns.comp.*", Payload: []byte("bad")}},
		{{Subject: "ns.comp.ev", Payload: []byte("3")}},
	}
	var sent []*eventbusclient.Batch
	for _, evs := range batches {
		bt, err := p.Send(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, bt)
	}
	var codesGot []codes.Code
	for _, bt := range sent {
		_, err := bt.Wait(ctx)
		codesGot = append(codesGot, status.Code(err))
	}
	if diff := cmp.Diff([]codes.Code{codes.OK, codes.InvalidArgument, codes.OK}, codesGot); diff != "" {
		t.Errorf("batch outcomes (-want +got):\n%s", diff)
	}
	info, err := c.Raw().GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetMessages() != 2 {
		t.Errorf("stream holds %d events; want 2 (nothing of the refused batch)", info.GetMessages())
	}
}

func TestPublisherStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	pctx, cancel := context.WithCancel(ctx)
	p := c.NewPublisher(pctx, eventbusclient.PublisherOptions{})
	defer p.Close()
	if _, err := p.PublishBatch(ctx, []*eventbusv1.Event{{Subject: "ns.comp.ev"}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Once the publisher has noticed, sends fail instead of hanging.
	for {
		bt, err := p.Send(ctx, []*eventbusv1.Event{{Subject: "ns.comp.ev"}})
		if errors.Is(err, eventbusclient.ErrPublisherClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bt.Wait(ctx); err != nil && !errors.Is(err, eventbusclient.ErrPublisherClosed) {
			t.Fatalf("batch sent while stopping: %v", err)
		}
	}
}
