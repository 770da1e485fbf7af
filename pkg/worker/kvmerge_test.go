package worker_test

import (
	"context"
	"testing"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// startHeldKV starts a worker of e whose KV publish interval is an hour,
// so that only its shutdown or a load report falling due ends a wait.
func startHeldKV(ctx context.Context, t *testing.T, e env) *worker.Worker {
	t.Helper()
	cfg := e.config(t)
	cfg.KVPublishInterval = time.Hour
	w, err := worker.Start(ctx, cfg, echo(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// subscribeKV reads the KV events of e's workers from the start of the
// stream.
func subscribeKV(ctx context.Context, t *testing.T, e env) *eventbusclient.Subscription {
	t.Helper()
	sub, err := e.bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "test", FilterSubject: "test.backend." + wire.KVEventsName,
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestKVPublishIntervalMergesInOrder: with a publish interval (an hour
// here, so that only the shutdown ends the wait) the worker's first batch
// goes out at once; the next ones wait and, at the shutdown, go out as one
// batch holding their events in order with their ids; nothing is lost.
func TestKVPublishIntervalMergesInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := startHeldKV(ctx, t, e)
	shut := false
	defer func() {
		if !shut {
			_ = w.Shutdown(context.Background())
		}
	}()
	sub := subscribeKV(ctx, t, e)
	defer sub.Close()
	const n = 6
	publish := func(hash uint64) {
		w.PublishKVEvents(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{
			Stored: &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: hash, LocalHash: hash}}}}}}})
	}
	next := func() *workerv1.KvEventBatch {
		t.Helper()
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	publish(1)
	if b := next(); b.FirstEventId != 1 || len(b.Events) != 1 {
		t.Fatalf("first batch: first id %d, %d events; want 1, 1", b.FirstEventId, len(b.Events))
	}
	for h := uint64(2); h <= n; h++ {
		publish(h)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	shut = true
	b := next()
	if b.FirstEventId != 2 || len(b.Events) != n-1 || b.InstanceId != w.InstanceID() {
		t.Fatalf("merged batch: instance %x, first id %d, %d events; want %x, 2, %d", b.InstanceId, b.FirstEventId, len(b.Events), w.InstanceID(), n-1)
	}
	for i, ev := range b.Events {
		if got := ev.GetStored().GetBlocks()[0].GetSequenceHash(); got != uint64(i+2) {
			t.Errorf("merged event %d: block %d, want %d", i, got, i+2)
		}
	}
	if queued, published, lost := w.KVEventCounts(); queued != n || published != n || lost != 0 {
		t.Errorf("KV events queued %d, published %d, lost %d; want %d, %d, 0", queued, published, lost, n, n)
	}
}

// TestKVPublishIntervalCarriesLoad: with a publish interval (an hour) the
// load report that falls due goes out at once, in the same message as the
// KV batches held so far: they are stored merged, right before it.
func TestKVPublishIntervalCarriesLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := startHeldKV(ctx, t, e)
	defer w.Shutdown(context.Background())
	sub, err := e.bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "test", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publish := func(hash uint64) {
		w.PublishKVEvents(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{
			Stored: &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: hash, LocalHash: hash}}}}}}})
	}
	kvSubject, loadSubject := "test.backend."+wire.KVEventsName, "test.backend."+wire.LoadName
	// next reads the next KV batch or load report.
	next := func() *eventbusv1.DeliveredEvent {
		t.Helper()
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s := ev.GetSubject(); s == kvSubject || s == loadSubject {
				return ev
			}
		}
	}
	publish(1)
	if ev := next(); ev.GetSubject() != kvSubject {
		t.Fatalf("first event on %s, want the first KV batch", ev.GetSubject())
	}
	for h := uint64(2); h <= 4; h++ {
		publish(h)
	}
	w.SetLoad(func() *workerv1.LoadMetrics { return &workerv1.LoadMetrics{KvBlocksTotal: 100} })
	kv, load := next(), next()
	if kv.GetSubject() != kvSubject || load.GetSubject() != loadSubject || load.GetStreamSequence() != kv.GetStreamSequence()+1 {
		t.Fatalf("after the load fell due: %s (sequence %d), then %s (%d); want the held KV batches, then the load report right after",
			kv.GetSubject(), kv.GetStreamSequence(), load.GetSubject(), load.GetStreamSequence())
	}
	b, err := eventbusclient.Decode[workerv1.KvEventBatch](kv)
	if err != nil || b.FirstEventId != 2 || len(b.Events) != 3 {
		t.Fatalf("held batches: %v, %v; want ids 2-4 in one batch", b, err)
	}
	m, err := eventbusclient.Decode[workerv1.LoadMetrics](load)
	if err != nil || m.GetKvBlocksTotal() != 100 || m.GetInstanceId() != w.InstanceID() {
		t.Fatalf("load report %v, %v", m, err)
	}
}

// TestKVPublishIntervalAskedByTheEventbus: a worker with no publish interval
// of its own, on an eventbus whose publishers send more batches a second
// than its target, is asked for one and holds and merges its KV batches
// (a stored batch holds several events); every event is stored once, in
// order, with its id.
func TestKVPublishIntervalAskedByTheEventbus(t *testing.T) {
	t.Parallel()
	etcd, reg := registrytest.Start(t)
	ns := eventbustest.StartNATS(t)
	bcfg := eventbustest.Config(ns.ClientURL())
	bcfg.PublishRateTarget = 5 // the load reports alone send 20 a second
	svc := eventbustest.StartEventbus(t, bcfg)
	e := env{regAddr: reg.Addr, busAddr: svc.Addr().String(), bus: eventbustest.Client(t, svc.Addr().String()), etcd: etcd, reg: reg}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := worker.Start(ctx, e.config(t), echo(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background()) // a second Shutdown does nothing
	sub := subscribeKV(ctx, t, e)

	// The reader hands the stored batches over until the subscription ends.
	batches := make(chan *workerv1.KvEventBatch, 1024)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(batches)
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				return
			}
			b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
			if err != nil {
				return
			}
			batches <- b
		}
	}()
	defer func() {
		sub.Close()
		<-readerDone
	}()
	// take checks that a stored batch's ids run on from the last one's and
	// reports whether it holds several events.
	next := uint64(1)
	take := func(b *workerv1.KvEventBatch, ok bool) bool {
		t.Helper()
		if !ok {
			t.Fatalf("the subscription ended after event %d", next-1)
		}
		if b.FirstEventId != next {
			t.Fatalf("batch of %d events from id %d; want id %d", len(b.Events), b.FirstEventId, next)
		}
		next += uint64(len(b.Events))
		return len(b.Events) > 1
	}
	var n uint64
	publish := func() {
		n++
		w.PublishKVEvents(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{
			Stored: &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: n, LocalHash: n}}}}}}})
	}
	// A batch every few milliseconds until one is stored merged (bounded).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	merged := false
	for i := 0; i < 6000 && !merged; {
		select {
		case b, ok := <-batches:
			merged = take(b, ok)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
			publish()
			i++
		}
	}
	if !merged {
		t.Fatalf("%d KV batches published, none stored merged: the worker was never asked for an interval", n)
	}
	publish() // held, or published at once; the shutdown sends what is held
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for next <= n {
		select {
		case b, ok := <-batches:
			take(b, ok)
		case <-ctx.Done():
			t.Fatalf("%d of %d events stored: %v", next-1, n, ctx.Err())
		}
	}
	if queued, acked, lost := w.KVEventCounts(); queued != n || acked != n || lost != 0 {
		t.Errorf("KV events queued %d, published %d, lost %d; want %d, %d, 0", queued, acked, lost, n, n)
	}
}
