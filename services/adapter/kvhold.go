package adapter

import (
	"log/slog"
	"sync"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// maxHeldKVBatches bounds the batches a kvHold keeps before the worker is
// registered, as worker.DefaultKVPublishBuffer bounds the SDK's buffer.
const maxHeldKVBatches = worker.DefaultKVPublishBuffer

// kvHold passes the engine's translated KV event batches to the worker, and
// holds those heard before there is one. The adapter subscribes to the
// engine before worker.Start registers, because the request plane serves
// meanwhile and the model card shows as soon as the registry stored it: a
// frontend that sees it sends requests before Start returns, and the
// engine publishes their events then (PUB/SUB keeps nothing for a late
// subscriber). They are published once the worker is registered, first and
// in order, under its instance id. Past maxHeldKVBatches they are dropped,
// and counted in the log.
type kvHold struct {
	log *slog.Logger

	mu      sync.Mutex
	publish func(*workerv1.KvEventBatch)
	held    []*workerv1.KvEventBatch
	dropped int
}

// add publishes b, or holds it until ready.
func (h *kvHold) add(b *workerv1.KvEventBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.publish != nil {
		h.publish(b)
		return
	}
	if len(h.held) >= maxHeldKVBatches {
		if h.dropped == 0 {
			h.log.Warn("kv events: the worker is not registered yet and the batches heard meanwhile fill their buffer; dropping", "held_batches", len(h.held))
		}
		h.dropped++
		return
	}
	h.held = append(h.held, b)
}

// ready publishes what was held, then everything, through publish.
func (h *kvHold) ready(publish func(*workerv1.KvEventBatch)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) > 0 || h.dropped > 0 {
		h.log.Info("kv events: publishing the batches heard before the registration", "batches", len(h.held), "dropped", h.dropped)
	}
	for _, b := range h.held {
		publish(b)
	}
	h.held, h.publish = nil, publish
}
