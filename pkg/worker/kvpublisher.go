package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// ErrKVPublisherFull is what KVPublisher.Publish returns for a batch it
// does not keep: the worker is not registered yet and the batches
// published meanwhile fill the publisher's buffer.
var ErrKVPublisherFull = errors.New("worker: not registered yet, and the KV event batches published meanwhile fill their buffer")

// KVPublisher lets a program publish KV events from its first request on.
// Start serves the request plane while it registers, and the model card
// shows as soon as the registry stored it: a frontend that sees it sends
// requests before Start has returned the *Worker, and the engine produces
// their KV events then. Dropped, they would be lost for good (they never
// reached the local indexer either, so no router could fill the gap from
// the ring or the state). A program makes a KVPublisher before Start, sets
// it as Config.KVPublisher and publishes through it from its handler and
// engine; the publisher holds what comes before the registration, and
// Start, once registered, publishes that first, in order, under the
// registered instance id, and everything after it through the worker
// (Worker.PublishKVEvents).
//
// It holds at most its limit of batches. Past that a batch is not kept
// (Publish returns ErrKVPublisherFull and the first drop is logged), and
// the worker refuses new generate requests with the draining code, which a
// frontend retries on another instance, until the registration is done.
// A KVPublisher serves one worker.
type KVPublisher struct {
	limit int
	log   *slog.Logger

	mu      sync.Mutex
	w       *Worker
	held    []*workerv1.KvEventBatch
	dropped int // batches not kept, before the registration
}

// NewKVPublisher returns a publisher that holds up to limit batches before
// the worker is registered; limit <= 0 is DefaultKVPublishBuffer. A nil log
// discards its logs.
func NewKVPublisher(limit int, log *slog.Logger) *KVPublisher {
	if limit <= 0 {
		limit = DefaultKVPublishBuffer
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KVPublisher{limit: limit, log: log}
}

// Publish publishes b through the worker (see Worker.PublishKVEvents), or
// holds it until the worker is registered. Its instance id is set then.
// Calls are serialized, and batches are published in the order of the
// calls.
func (p *KVPublisher) Publish(b *workerv1.KvEventBatch) error {
	if b == nil || len(b.Events) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil {
		p.w.PublishKVEvents(b)
		return nil
	}
	if len(p.held) >= p.limit {
		if p.dropped == 0 {
			p.log.Warn("kv events: the worker is not registered yet and the batches published meanwhile fill their buffer; dropping, and refusing new requests until it is",
				"held_batches", len(p.held))
		}
		p.dropped++
		return fmt.Errorf("%w (%d batches)", ErrKVPublisherFull, len(p.held))
	}
	p.held = append(p.held, b)
	return nil
}

// Waiting is how many batches wait for the registration.
func (p *KVPublisher) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// admit refuses a request while the publisher, not attached yet, holds its
// limit: the registry is away or slow, and something sends requests all the
// same. The frontend retries a draining worker's refusal elsewhere.
func (p *KVPublisher) admit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil || len(p.held) < p.limit {
		return nil
	}
	return &transport.HandlerError{Code: transport.CodeDraining,
		Message: fmt.Sprintf("worker: not registered yet, and the KV events of %d batches already wait for the registration; retry on another instance", len(p.held))}
}

// claim fails when p already serves another worker.
func (p *KVPublisher) claim() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil {
		return errors.New("worker: Config.KVPublisher already serves another worker")
	}
	return nil
}

// attach publishes what was held through w, then everything.
func (p *KVPublisher) attach(w *Worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.held) > 0 || p.dropped > 0 {
		p.log.Info("kv events: publishing the batches published before the registration", "batches", len(p.held),
			"dropped_batches", p.dropped, "instance", fmt.Sprintf("%x", w.InstanceID()))
	}
	for _, b := range p.held {
		w.PublishKVEvents(b)
	}
	p.held, p.dropped, p.w = nil, 0, w
}
