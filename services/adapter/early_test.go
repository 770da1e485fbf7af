package adapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestAdapterPublishesKVEventsHeardBeforeStartReturns holds the registry's
// answer to the adapter's RegisterModel: the card is stored and shows, and
// worker.Start has not returned. The engine publishes KV events then, as
// it does for a request a frontend sent as soon as the card showed; they
// must reach the stream, under the registered instance id, once the answer
// is let through. The adapter subscribed to the engine only once Start had
// returned, so it never heard them (PUB/SUB keeps nothing for a late
// subscriber): this test's probe for the subscription timed out.
func TestAdapterPublishesKVEventsHeardBeforeStartReturns(t *testing.T) {
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	eng := startStandIn(t)
	files, err := qwen3.WriteTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxy, held, unhold := conformance.HoldAnswer(t, reg.Addr, registryv1.RegistryService_RegisterModel_FullMethodName)
	defer unhold()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := runAdapter(t, eng, files, proxy, bus.Addr().String(), "--engine-metrics-url", "off")
	defer func() {
		unhold()
		a.stop()
	}()
	stats, ready, done := a.stats, a.ready, a.done
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("adapter stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("the adapter's RegisterModel was never answered by the registry")
	}
	// PUB/SUB drops what is sent before the subscription: probe until the
	// adapter hears the engine (a clear is harmless).
	testwait.Until(t, 20*time.Second, "the adapter to hear the engine before Start returns", func() bool {
		eng.publish(0, []any{"AllBlocksCleared"})
		return stats.Messages.Load() > 0
	})
	prompt := make([]uint32, 32) // 2 blocks of 16
	for i := range prompt {
		prompt[i] = uint32(5000 + 3*i)
	}
	eng.publish(0, []any{"BlockStored", []any{11, 12}, nil, anys(prompt), 16, nil, nil})
	testwait.Until(t, 20*time.Second, "the engine's blocks to be heard", func() bool {
		eng.mu.Lock()
		sent := eng.seq
		eng.mu.Unlock()
		return stats.Messages.Load() == sent
	})
	unhold()
	var w *worker.Worker
	select {
	case w = <-ready:
	case err := <-done:
		t.Fatalf("adapter stopped: %v", err)
	}
	sub, err := eventbustest.Client(t, bus.Addr().String()).Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "dynamo",
		FilterSubject: "dynamo.backend." + wire.KVEventsName, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("the blocks heard before Start returned never reached the stream: %v", err)
		}
		b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
		if err != nil {
			t.Fatal(err)
		}
		if b.InstanceId != w.InstanceID() {
			t.Fatalf("batch %v names instance %x; the worker registered %x", b, b.InstanceId, w.InstanceID())
		}
		if blocks := b.Events[len(b.Events)-1].GetStored().GetBlocks(); len(blocks) > 0 {
			if len(blocks) != 2 {
				t.Fatalf("stored batch %v; want the 2 blocks heard before Start returned", b)
			}
			return
		}
	}
}
