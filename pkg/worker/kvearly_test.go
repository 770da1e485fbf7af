package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// TestKVEventsPublishedBeforeStartReturns holds the registry's answer to the
// worker's RegisterModel: the card is stored and shows, and Start has not
// returned, so the program has no *Worker. A request sent then, as a
// frontend that sees the card sends it, publishes its block from the
// handler through the Config.KVPublisher; once the answer is let through,
// that block must be event 1 on the stream, under the registered instance
// id, before the block of a request served after Start returned. Without
// the held batches published at the registration (the SDK before
// KVPublisher gave a handler nothing to publish through before Start
// returned), the first batch on the stream is the later request's.
func TestKVEventsPublishedBeforeStartReturns(t *testing.T) {
	e := newEnv(t)
	proxy, held, unhold := conformance.HoldAnswer(t, e.regAddr, registryv1.RegistryService_RegisterModel_FullMethodName)
	defer unhold()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := e.config(t)
	cfg.RegistryAddr = proxy
	pub := worker.NewKVPublisher(0, nil)
	cfg.KVPublisher = pub
	// The handler stores one block, hashed by the request's first token.
	h := func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
		h := uint64(req.TokenIds[0])
		if err := pub.Publish(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{
			Stored: &workerv1.KvBlocksStored{Blocks: []*workerv1.KvBlock{{SequenceHash: h, LocalHash: h}}}}}}}); err != nil {
			return err
		}
		return echo(0, nil)(ctx, req, send)
	}
	type started struct {
		w   *worker.Worker
		err error
	}
	done := make(chan started, 1)
	go func() {
		w, err := worker.Start(ctx, cfg, h)
		done <- started{w, err}
	}()
	select {
	case <-held: // the card is stored; Start waits for the answer
	case s := <-done:
		t.Fatalf("Start returned before RegisterModel was answered: %v", s.err)
	case <-ctx.Done():
		t.Fatal("the worker's RegisterModel was never answered by the registry")
	}
	dc, err := registryclient.Dial([]string{e.regAddr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "test"}})
	if err != nil || len(list.Instances) != 1 {
		t.Fatalf("ListInstances while the answer is held = %v, %v; want the worker", list, err)
	}
	in := list.Instances[0]
	if out, err := call(ctx, t, addrOf(in), &workerv1.GenerateRequest{RequestId: "early", TokenIds: []uint32{42, 43}}); err != nil || len(out) != 3 {
		t.Fatalf("generate before Start returned = %v, %v", out, err)
	}
	if pub.Waiting() != 1 {
		t.Fatalf("%d batches wait for the registration; want the early request's 1", pub.Waiting())
	}
	unhold()
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	defer s.w.Shutdown(context.Background())
	if s.w.InstanceID() != in.InstanceId {
		t.Fatalf("the worker registered %x; the registry listed %x", s.w.InstanceID(), in.InstanceId)
	}
	if out, err := call(ctx, t, addrOf(in), &workerv1.GenerateRequest{RequestId: "late", TokenIds: []uint32{77}}); err != nil || len(out) != 2 {
		t.Fatalf("generate after Start returned = %v, %v", out, err)
	}

	sub, err := e.bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "test", FilterSubject: "test.backend." + wire.KVEventsName,
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i, want := range []uint64{42, 77} {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("KV batch %d: %v", i+1, err)
		}
		b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
		if err != nil {
			t.Fatal(err)
		}
		blocks := b.GetEvents()[0].GetStored().GetBlocks()
		if b.InstanceId != in.InstanceId || b.FirstEventId != uint64(i+1) || len(blocks) != 1 || blocks[0].GetSequenceHash() != want {
			t.Fatalf("KV batch %d = %v; want block %d as event %d of instance %x", i+1, b, want, i+1, in.InstanceId)
		}
	}
}
