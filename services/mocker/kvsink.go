package mocker

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/mocker/engine"
)

// maxHeldKVBatches bounds the engine steps' KV event batches a kvSink holds
// before the worker is registered, as worker.DefaultKVPublishBuffer bounds
// the SDK's own buffer.
const maxHeldKVBatches = worker.DefaultKVPublishBuffer

// kvSink hands the engine's KV events to the worker, and holds those that
// come before there is one. The request plane serves while worker.Start
// registers, and the model card shows as soon as the registry has stored
// it: a frontend that sees it sends requests before Start has returned the
// *Worker, and the engine emits their events meanwhile. Dropped, they would
// be lost for good (they never reached the local indexer either, so no
// router could fill the gap from the ring or the state). They are published
// instead once the worker is registered (Start returned), first and in
// order, under its instance id.
type kvSink struct {
	log *slog.Logger
	// max is how many batches it holds before refusing requests; 0 is
	// maxHeldKVBatches.
	max int

	mu     sync.Mutex
	wk     *worker.Worker
	held   [][]engine.Event
	closed bool // full: requests are refused until the worker is there
}

// publish publishes one engine step's events, or holds them until the
// worker is registered.
func (s *kvSink) publish(events []engine.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wk == nil {
		s.held = append(s.held, events)
		limit := s.max
		if limit == 0 {
			limit = maxHeldKVBatches
		}
		if len(s.held) >= limit && !s.closed {
			s.closed = true
			s.log.Warn("KV events of requests served before the registration wait for it; new requests are refused until it is done",
				"held_batches", len(s.held))
		}
		return
	}
	s.send(events)
}

// send publishes a step's events through the worker; mu is held.
func (s *kvSink) send(events []engine.Event) {
	b, err := engine.BatchProto(s.wk.InstanceID(), 0, events)
	if err != nil {
		s.log.Error("KV events out of order", "err", err.Error())
		return
	}
	s.wk.PublishKVEvents(b)
}

// registered publishes what was held, then everything through wk.
func (s *kvSink) registered(wk *worker.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wk = wk
	if len(s.held) > 0 {
		s.log.Info("publishing the KV events of requests served before the registration", "batches", len(s.held),
			"instance", fmt.Sprintf("%x", wk.InstanceID()))
	}
	for _, events := range s.held {
		s.send(events)
	}
	s.held, s.closed = nil, false
}

// admit refuses a request while the sink holds as many batches as it
// keeps: the worker is not registered yet (its registry is away, and
// something sends requests all the same). The frontend retries a draining
// worker's refusal on another instance.
func (s *kvSink) admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		return nil
	}
	return &transport.HandlerError{Code: transport.CodeDraining,
		Message: fmt.Sprintf("mocker: not registered yet, and the KV events of %d engine steps already wait for the registration; retry on another instance", len(s.held))}
}
