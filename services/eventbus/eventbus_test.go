package eventbus_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	busclient "github.com/switchyard-llm/switchyard/pkg/eventbus"
	"github.com/switchyard-llm/switchyard/pkg/flagenv"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// guard bounds every wait of a test so that a bug fails it instead of
// hanging it; it is not a timing assertion.
const guard = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

// publishN publishes values from..to-1 as UInt64Value events on subject,
// with msg ids "<subject>-<value>", and returns their stream sequences.
func publishN(ctx context.Context, t *testing.T, c *busclient.Client, subject string, from, to int) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := from; i < to; i++ {
		resp, err := c.Publish(ctx, subject, wrapperspb.UInt64(uint64(i)), busclient.WithMsgID(fmt.Sprintf("%s-%d", subject, i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		seqs = append(seqs, resp.GetSequence())
	}
	return seqs
}

// next reads n events, decoding their values; with ack it acknowledges each.
func next(ctx context.Context, t *testing.T, sub *busclient.Subscription, n int, ack bool) ([]uint64, []*eventbusv1.DeliveredEvent) {
	t.Helper()
	typed := busclient.NewTyped[wrapperspb.UInt64Value](sub)
	var vals []uint64
	var evs []*eventbusv1.DeliveredEvent
	for range n {
		v, ev, err := typed.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(vals), n, err)
		}
		vals = append(vals, v.GetValue())
		evs = append(evs, ev)
		if ack {
			if err := sub.Ack(ctx, ev); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	return vals, evs
}

func seq(from, to int) []uint64 {
	var out []uint64
	for i := from; i < to; i++ {
		out = append(out, uint64(i))
	}
	return out
}

func TestPublishSubscribeInOrder(t *testing.T) {
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
	p := c.NewPublisher(ctx, busclient.PublisherOptions{MaxInFlight: 4})
	defer p.Close()
	var batches []*busclient.Batch
	for i := 50; i < 100; i += 10 {
		var evs []*eventbusv1.Event
		for j := i; j < i+10; j++ {
			ev, err := busclient.NewEvent("vllm-agg.backend.kv_cache_update", wrapperspb.UInt64(uint64(j)))
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
	if info.GetMessages() != 101 || info.GetFirstSequence() != 1 || info.GetLastSequence() != 101 || info.GetStream() != eventbus.StreamName("vllm-agg") {
		t.Errorf("stream info = %v; want 101 messages, sequences 1-101", info)
	}
}

func TestReplay(t *testing.T) {
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

func TestUnacknowledgedEventsAreRedelivered(t *testing.T) {
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{
		Namespace: "ns", DurableName: "slow", AckWait: durationpb.New(200 * time.Millisecond),
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
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	const n = 300
	req := &eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "group", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, MaxAckPending: 4}
	var subs []*busclient.Subscription
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
				v, err := busclient.Decode[wrapperspb.UInt64Value](ev)
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

func TestNATSRestartLosesNoAcknowledgedEvent(t *testing.T) {
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
	pub := c.NewPublisher(ctx, busclient.PublisherOptions{})
	defer pub.Close()
	var batches []*busclient.Batch
	for i := 100; i < 150; i += 10 {
		var evs []*eventbusv1.Event
		for j := i; j < i+10; j++ {
			ev, err := busclient.NewEvent("ns.comp.ev", wrapperspb.UInt64(uint64(j)))
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
			resp, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(uint64(i)), busclient.WithMsgID(fmt.Sprintf("ns.comp.ev-%d", i)))
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
		resp, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(uint64(i)), busclient.WithMsgID(fmt.Sprintf("ns.comp.ev-%d", i)))
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

func portOf(t *testing.T, url string) int {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(url[strings.LastIndex(url, ":")+1:], "%d", &port); err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	return port
}

func TestFailoverToAnotherEventbus(t *testing.T) {
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
	pub := c.NewPublisher(ctx, busclient.PublisherOptions{MaxInFlight: 8})
	defer pub.Close()
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		var pending []*busclient.Batch
		for i := 0; i < n/2; i += batch {
			var evs []*eventbusv1.Event
			for j := i; j < i+batch; j++ {
				ev, err := busclient.NewEvent("ns.comp.ev", wrapperspb.UInt64(uint64(j)))
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

func TestObjectStore(t *testing.T) {
	ctx := testCtx(t)
	ns, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	size := 50 << 20
	if testing.Short() {
		size = 4 << 20
	}
	blob := make([]byte, size)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(blob)
	info, err := c.PutObject(ctx, "snapshots", "model/weights.bin", bytes.NewReader(blob), busclient.PutObjectOptions{
		Description: "test blob", Metadata: map[string]string{"kind": "test"}, SHA256: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetSize() != uint64(size) || info.GetSha256() != hex.EncodeToString(sum[:]) {
		t.Fatalf("put info = size %d sha256 %s", info.GetSize(), info.GetSha256())
	}
	var out bytes.Buffer
	if _, err := c.GetObject(ctx, "snapshots", "model/weights.bin", &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatal("round-tripped object differs")
	}
	list, err := c.ListObjects(ctx, "snapshots")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].GetName() != "model/weights.bin" || list[0].GetMetadata()["kind"] != "test" {
		t.Errorf("list = %v", list)
	}

	// A put whose data does not match the sha256 it announces is refused.
	_, err = c.PutObject(ctx, "snapshots", "liar", strings.NewReader("data"), busclient.PutObjectOptions{SHA256: strings.Repeat("0", 64)})
	if status.Code(err) != codes.DataLoss {
		t.Errorf("put with a wrong sha256: %v; want DataLoss", err)
	}

	// Corrupt one chunk behind the eventbus's back: the sha256 catches it.
	corruptObject(ctx, t, ns.ClientURL(), "snapshots", "model/weights.bin")
	out.Reset()
	_, err = c.GetObject(ctx, "snapshots", "model/weights.bin", &out)
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("get of a corrupt object: %v; want DataLoss naming sha256", err)
	}

	if err := c.DeleteObject(ctx, "snapshots", "model/weights.bin"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetObject(ctx, "snapshots", "model/weights.bin", &out)
	if status.Code(err) != codes.NotFound {
		t.Errorf("get after delete: %v; want NotFound", err)
	}
}

// directJetStream connects to NATS at url past the eventbus; the test's
// cleanup closes the connection.
func directJetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// corruptObject flips one byte of an object's first chunk directly in NATS.
func corruptObject(ctx context.Context, t *testing.T, url, bucket, name string) {
	t.Helper()
	js := directJetStream(t, url)
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	subject := fmt.Sprintf("$O.%s.C.%s", bucket, info.NUID)
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var chunks [][]byte
	for range info.Chunks {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, append([]byte(nil), m.Data()...))
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		t.Fatal(err)
	}
	chunks[0][0] ^= 0xff
	for _, ch := range chunks {
		if _, err := js.Publish(ctx, subject, ch); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInput(t *testing.T) {
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	raw := c.Raw()
	if _, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(1)); err != nil {
		t.Fatal(err)
	}
	subscribe := func(req *eventbusv1.SubscribeRequest) error {
		stream, err := raw.Subscribe(ctx, req)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	publish := func(subject string, payload []byte) error {
		_, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: subject, Payload: payload}})
		return err
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"wildcard subject", func() error { return publish("ns.comp.*", nil) }, codes.InvalidArgument, "wildcard"},
		{"full wildcard subject", func() error { return publish("ns.>", nil) }, codes.InvalidArgument, "wildcard"},
		{"empty token", func() error { return publish("ns..ev", nil) }, codes.InvalidArgument, "empty token"},
		{"trailing dot", func() error { return publish("ns.comp.", nil) }, codes.InvalidArgument, "empty token"},
		{"too few tokens", func() error { return publish("ns.comp", nil) }, codes.InvalidArgument, "{namespace}.{component}.{event_name}"},
		{"whitespace", func() error { return publish("ns.comp.e v", nil) }, codes.InvalidArgument, "whitespace"},
		{"payload over max_payload", func() error { return publish("ns.comp.ev", make([]byte, 1<<20+1)) }, codes.InvalidArgument, "max_payload of 1048576 bytes"},
		{"payload and headers over max_payload", func() error {
			_, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "ns.comp.ev", Payload: make([]byte, 1<<20), MsgId: "id"}})
			return err
		}, codes.InvalidArgument, "max_payload of 1048576 bytes"},
		{"reserved header", func() error {
			_, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "ns.comp.ev", Headers: map[string]string{"Nats-Expected-Stream": "x"}}})
			return err
		}, codes.InvalidArgument, "reserved"},
		{"bad event in a batch", func() error {
			stream, err := raw.PublishStream(ctx)
			if err != nil {
				return err
			}
			if err := stream.Send(&eventbusv1.PublishStreamRequest{BatchId: 7, Events: []*eventbusv1.Event{{Subject: "ns.comp.ev"}, {Subject: "ns.*.ev"}}}); err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, codes.InvalidArgument, "batch 7, event 1"},
		{"unknown durable", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "ghost", Bind: true})
		}, codes.NotFound, `durable "ghost" does not exist`},
		{"sequence policy without sequence", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE})
		}, codes.InvalidArgument, "needs start_sequence"},
		{"time policy without time", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME})
		}, codes.InvalidArgument, "needs start_time"},
		{"all with a sequence", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, StartSequence: 3})
		}, codes.InvalidArgument, "takes neither"},
		{"unknown policy", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: 42})
		}, codes.InvalidArgument, "deliver policy 42 is unknown"},
		{"invalid start time", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME, StartTime: &timestamppb.Timestamp{Nanos: -1}})
		}, codes.InvalidArgument, "start_time"},
		{"filter outside the namespace", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", FilterSubject: "other.>"})
		}, codes.InvalidArgument, "outside namespace"},
		{"namespace with a dot", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "a.b"})
		}, codes.InvalidArgument, "namespace"},
		{"delete unknown durable", func() error {
			_, err := raw.DeleteConsumer(ctx, &eventbusv1.DeleteConsumerRequest{Namespace: "ns", DurableName: "ghost"})
			return err
		}, codes.NotFound, `durable "ghost" does not exist`},
		{"forged ack token", func() error {
			_, err := raw.Ack(ctx, &eventbusv1.AckRequest{AckTokens: []string{"ns.comp.ev"}})
			return err
		}, codes.InvalidArgument, "ack token"},
		{"unknown namespace info", func() error {
			_, err := raw.GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "nowhere"})
			return err
		}, codes.NotFound, "no stream"},
		{"unknown bucket", func() error {
			_, err := raw.ListObjects(ctx, &eventbusv1.ListObjectsRequest{Bucket: "nowhere"})
			return err
		}, codes.NotFound, `bucket "nowhere"`},
		{"object put without header", func() error {
			stream, err := raw.PutObject(ctx)
			if err != nil {
				return err
			}
			if err := stream.Send(&eventbusv1.PutObjectRequest{Part: &eventbusv1.PutObjectRequest_Chunk{Chunk: []byte("x")}}); err != nil {
				return err
			}
			_, err = stream.CloseAndRecv()
			return err
		}, codes.InvalidArgument, "header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st, _ := status.FromError(err)
			if st.Code() != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v; want %s containing %q", err, tc.code, tc.msg)
			}
		})
	}
}

// TestExistingStreamKeepsOperatorSettings checks that the eventbus brings an
// existing stream to its own subjects, max age and dedup window and leaves
// everything else an operator set alone.
func TestExistingStreamKeepsOperatorSettings(t *testing.T) {
	ctx := testCtx(t)
	ns := eventbustest.StartNATS(t)
	js := directJetStream(t, ns.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: eventbus.StreamName("ops"), Subjects: []string{"ops.comp.>"}, Description: "kept by ops",
		MaxMsgs: 1000, MaxAge: 5 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	cfg := eventbustest.Config(ns.ClientURL())
	cfg.DedupWindow = 30 * time.Second
	svc := eventbustest.StartEventbus(t, cfg)
	c := eventbustest.Client(t, svc.Addr().String())
	if _, err := c.Publish(ctx, "ops.other.ev", wrapperspb.String("outside the old subjects")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, eventbus.StreamName("ops"))
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	got := fmt.Sprintf("subjects %v, max age %s, duplicates %s, description %q, max msgs %d",
		sc.Subjects, sc.MaxAge, sc.Duplicates, sc.Description, sc.MaxMsgs)
	if want := `subjects [ops.>], max age 1h0m0s, duplicates 30s, description "kept by ops", max msgs 1000`; got != want {
		t.Errorf("stream config: %s; want %s", got, want)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d events; want 1", n)
	}
}

func TestEmbeddedNATS(t *testing.T) {
	var cfg eventbus.Config
	cfg.Server = eventbustest.Config("").Server
	cfg.Server.MetricsAddr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedNATSPort = -1
	cfg.StreamMaxAge = time.Hour
	svc := eventbustest.StartEventbus(t, cfg)
	if !strings.HasPrefix(svc.NATSURL(), "nats://127.0.0.1:") {
		t.Errorf("embedded NATS URL %q", svc.NATSURL())
	}
	c := eventbustest.Client(t, svc.Addr().String())
	ctx := testCtx(t)
	resp, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSequence() != 1 {
		t.Errorf("first sequence %d; want 1", resp.GetSequence())
	}
	// The eventbus's own metrics are on /metrics.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	mresp, err := hc.Get("http://" + svc.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	body, err := io.ReadAll(mresp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := `switchyard_eventbus_published_events_total{duplicate="false",namespace="ns"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() eventbus.Config {
		c := eventbustest.Config("nats://localhost:4222")
		return c
	}
	tests := []struct {
		name   string
		modify func(*eventbus.Config)
		want   string
	}{
		{"valid external", func(*eventbus.Config) {}, ""},
		{"valid embedded", func(c *eventbus.Config) { c.NATSServer = ""; c.DataDir = "d" }, ""},
		{"embedded without data dir", func(c *eventbus.Config) { c.NATSServer = "" }, "--data-dir"},
		{"bad scheme", func(c *eventbus.Config) { c.NATSServer = "http://x:1" }, "valid schemes"},
		{"host and port", func(c *eventbus.Config) { c.NATSServer = "nats-0:4222,nats-1:4222" }, ""},
		{"several urls", func(c *eventbus.Config) { c.NATSServer = "nats://a:4222, tls://b:4222" }, ""},
		{"not a url", func(c *eventbus.Config) { c.NATSServer = "nats://" }, "NATS_SERVER"},
		{"token and user", func(c *eventbus.Config) { c.NATSToken = "t"; c.NATSUser = "u"; c.NATSPassword = "p" }, "NATS_TOKEN"},
		{"user without password", func(c *eventbus.Config) { c.NATSUser = "u" }, "NATS_PASSWORD"},
		{"credentials for embedded", func(c *eventbus.Config) { c.NATSServer = ""; c.DataDir = "d"; c.NATSToken = "t" }, "external server only"},
		{"zero max age", func(c *eventbus.Config) { c.StreamMaxAge = 0 }, "--stream-max-age"},
		{"no linger", func(c *eventbus.Config) { c.DeliverLinger = -1 }, ""},
		{"linger too long", func(c *eventbus.Config) { c.DeliverLinger = 2 * time.Second }, "--deliver-linger"},
		{"dedup window", func(c *eventbus.Config) { c.DedupWindow = 10 * time.Second }, ""},
		{"negative dedup window", func(c *eventbus.Config) { c.DedupWindow = -time.Second }, "--dedup-window"},
		{"dedup window past max age", func(c *eventbus.Config) { c.StreamMaxAge = time.Minute }, "--dedup-window"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.modify(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v; want error containing %q", err, tc.want)
			}
		})
	}
}

func TestNATSCredentials(t *testing.T) {
	start := func(t *testing.T, opts *natsserver.Options) string {
		t.Helper()
		opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoSigs = "127.0.0.1", -1, true, t.TempDir(), true
		ns, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(func() { eventbustest.StopNATS(ns) })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return ns.ClientURL()
	}
	tests := []struct {
		name    string
		server  natsserver.Options
		user    string
		pass    string
		token   string
		wantErr bool
	}{
		{"user and password", natsserver.Options{Username: "eb", Password: "secret"}, "eb", "secret", "", false},
		{"wrong password", natsserver.Options{Username: "eb", Password: "secret"}, "eb", "guess", "", true},
		{"token", natsserver.Options{Authorization: "tok"}, "", "", "tok", false},
		{"missing token", natsserver.Options{Authorization: "tok"}, "", "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := eventbustest.Config(start(t, &tc.server))
			cfg.NATSUser, cfg.NATSPassword, cfg.NATSToken = tc.user, tc.pass, tc.token
			svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
			if tc.wantErr {
				if err == nil {
					svc.Stop()
					t.Fatal("started with wrong credentials")
				}
				if !strings.Contains(err.Error(), "connect to NATS") {
					t.Errorf("error %q does not say what failed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Stop()
			c := eventbustest.Client(t, svc.Addr().String())
			if _, err := c.Publish(testCtx(t), "ns.comp.ev", wrapperspb.String("authenticated")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("NATS_SERVER", "nats://nats.example:4222")
	t.Setenv("NATS_TOKEN", "from-env")
	var cfg eventbus.Config
	fs := flag.NewFlagSet("eventbus", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--data-dir", "/var/lib/eventbus", "--nats-token", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := flagenv.Set(fs, eventbus.EnvPrefix, eventbus.EnvVars); err != nil {
		t.Fatal(err)
	}
	want := struct {
		GRPCAddr, MetricsAddr, NATSServer, NATSToken, DataDir string
		StreamMaxAge, DedupWindow, DeliverLinger              time.Duration
	}{":7002", ":9102", "nats://nats.example:4222", "from-flag", "/var/lib/eventbus", time.Hour, eventbus.DefaultDedupWindow, eventbus.DefaultDeliverLinger}
	got := want
	got.GRPCAddr, got.MetricsAddr, got.NATSServer, got.NATSToken, got.DataDir = cfg.Server.GRPCAddr, cfg.Server.MetricsAddr, cfg.NATSServer, cfg.NATSToken, cfg.DataDir
	got.StreamMaxAge, got.DedupWindow, got.DeliverLinger = cfg.StreamMaxAge, cfg.DedupWindow, cfg.DeliverLinger
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestLargeEventsAreDeliveredInBoundedBatches(t *testing.T) {
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
	p := c.NewPublisher(ctx, busclient.PublisherOptions{})
	defer p.Close()
	var bts []*busclient.Batch
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
	p := c.NewPublisher(ctx, busclient.PublisherOptions{})
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

func TestEmbeddedNATSPortInUse(t *testing.T) {
	ns := eventbustest.StartNATS(t)
	var cfg eventbus.Config
	cfg.Server = eventbustest.Config("").Server
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedNATSPort = portOf(t, ns.ClientURL())
	cfg.StreamMaxAge = time.Hour
	svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
	if err == nil {
		svc.Stop()
		t.Fatal("started an embedded nats-server on a port in use")
	}
	if !strings.Contains(err.Error(), "listen") {
		t.Errorf("error %q does not say the port is in use", err)
	}
}

// TestConcurrentPublishersGetTheirOwnSequences publishes from several
// publishers at once, in batches that mix namespaces, and checks that every
// acknowledgement names the sequence its own event was stored at, and that a
// resent batch is answered with the same sequences, as duplicates.
func TestConcurrentPublishersGetTheirOwnSequences(t *testing.T) {
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
			p := c.NewPublisher(ctx, busclient.PublisherOptions{MaxInFlight: 4})
			defer p.Close()
			var sent [][]*eventbusv1.Event
			var pending []*busclient.Batch
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
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	p := c.NewPublisher(ctx, busclient.PublisherOptions{MaxInFlight: 4})
	defer p.Close()
	batches := [][]*eventbusv1.Event{
		{{Subject: "ns.comp.ev", Payload: []byte("1")}},
		{{Subject: "ns.comp.ev", Payload: []byte("2")}, {Subject: "ns.comp.*", Payload: []byte("bad")}},
		{{Subject: "ns.comp.ev", Payload: []byte("3")}},
	}
	var sent []*busclient.Batch
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
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	pctx, cancel := context.WithCancel(ctx)
	p := c.NewPublisher(pctx, busclient.PublisherOptions{})
	defer p.Close()
	if _, err := p.PublishBatch(ctx, []*eventbusv1.Event{{Subject: "ns.comp.ev"}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Once the publisher has noticed, sends fail instead of hanging.
	for {
		bt, err := p.Send(ctx, []*eventbusv1.Event{{Subject: "ns.comp.ev"}})
		if errors.Is(err, busclient.ErrPublisherClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bt.Wait(ctx); err != nil && !errors.Is(err, busclient.ErrPublisherClosed) {
			t.Fatalf("batch sent while stopping: %v", err)
		}
	}
}
