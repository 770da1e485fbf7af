package pyworker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestPythonWorkerKVEventsNameItsInstanceOnceListed holds the registry's
// answer to the worker's RegisterModel (the card is stored and shows; the
// worker has not heard yet), as a worker whose main thread is slow to run
// after its registration calls would see it. A request sent then, as soon as
// the card shows, must publish its blocks under the registered instance id.
// worker.py took the lease id as its instance id only once both calls had
// answered, and published them under instance 0: a router never saw the
// blocks on the instance (examples/conformance TestPythonWorker failed so in
// CI, under load).
func TestPythonWorkerKVEventsNameItsInstanceOnceListed(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	sub := subscribeKV(ctx, t, bus.Addr().String())
	defer sub.Close()
	dc, watch := watchInstances(t, reg.Addr)
	defer dc.Close()
	defer watch.Close()

	proxy, held, release := conformance.HoldAnswer(t, reg.Addr, registryv1.RegistryService_RegisterModel_FullMethodName)
	w := startWorker(t, proxy, bus.Addr().String())
	in := waitInstances(ctx, t, watch, 1, w.logs)[0]
	select {
	case <-held: // the card is stored; the worker waits for the answer
	case <-ctx.Done():
		t.Fatalf("the worker's RegisterModel never answered by the registry; it logged:\n%s", w.logs.String())
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: namespace}})
	if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != in.InstanceId {
		t.Fatalf("ListModels while the answer is held = %v, %v; want the card of %x", cards, err, in.InstanceId)
	}

	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: in.Transport.GetHttp()}
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "early", TokenIds: seq(1, 9), MaxTokens: 1}); err != nil || len(got) != 1 {
		t.Fatalf("generate while the worker waits for its card's answer = %v, %v", got, err)
	}
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
	if err != nil {
		t.Fatal(err)
	}
	if batch.InstanceId != in.InstanceId || len(batch.Events) != 1 || len(batch.Events[0].GetStored().GetBlocks()) != 2 {
		t.Fatalf("first KV batch = %v; want 2 blocks stored by instance %x", batch, in.InstanceId)
	}
	release()
	w.logs.waitFor(ctx, t, "worker registered", nil)
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}

// TestPythonWorkerPublishesKVEventsOnceTheEventbusIsUp starts the worker
// with its eventbus not up yet (the address held, refusing connections): it
// registers and serves, a request's KV events cannot be published, and the
// worker says so while it retries (it used to retry without a word); once
// the eventbus is up on that address the events reach the stream.
func TestPythonWorkerPublishesKVEventsOnceTheEventbusIsUp(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	busPort := testport.Reserve(t)
	dc, watch := watchInstances(t, reg.Addr)
	defer dc.Close()
	defer watch.Close()
	w := startWorker(t, reg.Addr, busPort.Addr())
	in := waitInstances(ctx, t, watch, 1, w.logs)[0]

	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	client, err := transport.NewClient(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	addr := transport.Address{Kind: transport.PlaneHTTP, Addr: in.Transport.GetHttp()}
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "early", TokenIds: seq(1, 9), MaxTokens: 1}); err != nil || len(got) != 1 {
		t.Fatalf("generate with the eventbus away = %v, %v", got, err)
	}
	w.logs.waitFor(ctx, t, "KV events publish failed; retrying", map[string]any{"first_event_id": float64(1), "attempt": float64(1)})

	ns := eventbustest.StartNATS(t)
	cfg := eventbustest.Config(ns.ClientURL())
	cfg.Server.GRPCAddr = busPort.Addr()
	eventbustest.StartEventbus(t, cfg)
	sub := subscribeKV(ctx, t, busPort.Addr())
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
		t.Fatalf("first KV batch once the eventbus is up = %v; want event 1 of instance %x, 2 blocks stored", batch, in.InstanceId)
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}

// TestPythonWorkerPublishesKVEventsOnceTheEventbusIsBack stops the worker's
// eventbus after it registered (its address held, refusing connections): a
// request's KV events wait, retried, and reach the stream once the eventbus
// is back on that address (the Node worker dropped them: its publish was cut
// as Canceled, which it did not retry).
func TestPythonWorkerPublishesKVEventsOnceTheEventbusIsBack(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	busPort := testport.Reserve(t)
	cfg := eventbustest.Config(eventbustest.StartNATS(t).ClientURL())
	cfg.Server.GRPCAddr = busPort.Addr()
	bus := eventbustest.StartEventbus(t, cfg)
	dc, watch := watchInstances(t, reg.Addr)
	defer dc.Close()
	defer watch.Close()
	w := startWorker(t, reg.Addr, busPort.Addr())
	in := waitInstances(ctx, t, watch, 1, w.logs)[0]
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
	if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "early", TokenIds: seq(1, 9), MaxTokens: 1}); err != nil || len(got) != 1 {
		t.Fatalf("generate with the eventbus stopped = %v, %v", got, err)
	}
	w.logs.waitFor(ctx, t, "KV events publish failed; retrying", map[string]any{"first_event_id": float64(1), "attempt": float64(1)})
	eventbustest.StartEventbus(t, cfg)
	sub := subscribeKV(ctx, t, busPort.Addr())
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
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}

// TestPythonWorkerRetriesItsCardOnTheSameLease refuses the worker's first
// two RegisterModel calls with Unavailable, as a registry replica that lost
// etcd between the instance's call and the card's would: the worker retries
// the card on the lease it holds, so it is granted one lease and its
// instance keeps its id. Giving up at the first refusal revoked the lease
// and registered again under a new one: every watcher saw a live instance
// deleted.
func TestPythonWorkerRetriesItsCardOnTheSameLease(t *testing.T) {
	t.Parallel()
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	dc, watch := watchInstances(t, reg.Addr)
	defer dc.Close()
	defer watch.Close()
	proxy, calls := conformance.RefuseFirst(t, reg.Addr, registryv1.RegistryService_RegisterModel_FullMethodName, 2, codes.Unavailable)
	w := startWorker(t, proxy, bus.Addr().String())
	in := waitInstances(ctx, t, watch, 1, w.logs)[0]
	w.logs.waitFor(ctx, t, "worker registered", map[string]any{"instance": fmt.Sprintf("%x", in.InstanceId)})
	if g, c := calls(registryv1.RegistryService_GrantLease_FullMethodName), calls(registryv1.RegistryService_RegisterModel_FullMethodName); g != 1 || c != 3 {
		t.Fatalf("GrantLease called %d times and RegisterModel %d; want 1 lease and 3 card calls (2 refused)\n%s", g, c, w.logs.String())
	}
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
	if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != in.InstanceId {
		t.Fatalf("ListInstances = %v, %v; want only instance %x", list, err, in.InstanceId)
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: namespace}})
	if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != in.InstanceId {
		t.Fatalf("ListModels = %v, %v; want the card of instance %x", cards, err, in.InstanceId)
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}
