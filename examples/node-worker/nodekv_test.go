package nodeworker_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestNodeWorkerPublishesKVEventsOnceTheEventbusIsBack stops the worker's
// eventbus (its address held, refusing connections): a request's KV events
// cannot be published, and the worker says so while it retries (it used to
// retry without a word); once the eventbus is back on that address the
// events reach the stream.
func TestNodeWorkerPublishesKVEventsOnceTheEventbusIsBack(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	const ns = "nodekv"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	busPort := testport.Reserve(t)
	cfg := eventbustest.Config(eventbustest.StartNATS(t).ClientURL())
	cfg.Server.GRPCAddr = busPort.Addr()
	bus := eventbustest.StartEventbus(t, cfg)
	dc, watch := watchInstances(t, reg.Addr, ns)
	defer dc.Close()
	defer watch.Close()
	w := startWorker(t, node, reg.Addr, busPort.Addr(), workerOpts{namespace: ns, model: "test/echo", blockSize: 4, leaseTTL: 5})
	in := conformance.WaitInstances(ctx, t, watch, 1, w.Logs)[0]
	if err := bus.Stop(); err != nil {
		t.Fatal(err)
	}

	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: in.Transport.GetHttp()}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "early", TokenIds: prompt, MaxTokens: 1}); err != nil || len(got) != 1 {
		t.Fatalf("generate with the eventbus stopped = %v, %v", got, err)
	}
	w.Logs.WaitFor(ctx, t, "KV events publish failed; retrying", map[string]any{"first_event_id": float64(1), "attempt": float64(1)})

	eventbustest.StartEventbus(t, cfg)
	sub, err := eventbustest.Client(t, busPort.Addr()).Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns,
		FilterSubject: wire.KVEventsSubject(ns, "backend"), DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
	if err != nil {
		t.Fatal(err)
	}
	if batch.InstanceId != in.InstanceId || batch.FirstEventId != 1 || len(batch.Events[0].GetStored().GetBlocks()) != 2 {
		t.Fatalf("first KV batch once the eventbus is back = %v; want event 1 of instance %x, 2 blocks stored", batch, in.InstanceId)
	}
}
