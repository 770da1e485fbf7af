package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// syncer publishes this replica's decisions and applies the others'.
type syncer struct {
	id   string
	bus  *eventbusclient.Client
	core *core.Core
	log  *slog.Logger

	mu   sync.Mutex
	nsOf map[string]string // request id -> namespace of its endpoint
	// marks are the namespaces whose replay this replica waits for: each
	// channel closes when the replica's own marker comes back on the
	// namespace's stream (see mark).
	marks map[string]chan struct{}
	out   chan *eventbusv1.Event
	done  chan struct{}
}

// newSyncer starts a syncer. Its replica id is id (--router-replica-id)
// followed by a random part of this process's own: a restarted replica
// then replays its earlier decisions from the stream (the load still in
// flight, the session bindings) as any peer's, instead of skipping them
// as its own.
func newSyncer(id string, bus *eventbusclient.Client, dc *core.Core, log *slog.Logger) *syncer {
	var b [6]byte
	_, _ = rand.Read(b[:])
	if id == "" {
		id = hex.EncodeToString(b[:])
	} else {
		id += "." + hex.EncodeToString(b[:])
	}
	s := &syncer{id: id, bus: bus, core: dc, log: log, nsOf: map[string]string{}, marks: map[string]chan struct{}{},
		out: make(chan *eventbusv1.Event, 8192), done: make(chan struct{})}
	go s.publish()
	return s
}

func (s *syncer) send(ns string, ev *routerv1.ReplicaEvent) {
	ev.ReplicaId = s.id
	e, err := eventbusclient.NewEvent(wire.ReplicaSyncSubject(ns), ev)
	if err != nil {
		s.log.Error("cannot encode a replica event", "err", err.Error())
		return
	}
	select {
	case s.out <- e:
	default:
		s.log.Warn("replica sync queue full; a decision was not shared")
	}
}

func (s *syncer) Routed(id, ns string, w index.WorkerID, prefill int, hashes []uint64, leg core.Leg, session, lora string) {
	s.mu.Lock()
	s.nsOf[id] = ns
	s.mu.Unlock()
	ev := core.SessionRoutedEvent(id, w, prefill, hashes, leg, session)
	ev.GetRouted().LoraName = lora
	s.send(ns, ev)
}

func (s *syncer) PrefillDone(id string) {
	s.mu.Lock()
	ns, ok := s.nsOf[id]
	s.mu.Unlock()
	if ok {
		s.send(ns, core.PrefillDoneEvent(id))
	}
}

func (s *syncer) Freed(id string) {
	s.mu.Lock()
	ns, ok := s.nsOf[id]
	delete(s.nsOf, id)
	s.mu.Unlock()
	if ok {
		s.send(ns, core.FreedEvent(id))
	}
}

// mark publishes this replica's marker on namespace ns's sync subject: a
// ReplicaEvent with its id and no change, which peers apply as nothing.
// The subscription replays the stream in order, so when the marker comes
// back every decision stored before it has been applied: the replica has
// caught up with the load in flight and the session bindings (caughtUp).
func (s *syncer) mark(ns string) {
	s.mu.Lock()
	if _, ok := s.marks[ns]; ok {
		s.mu.Unlock()
		return
	}
	s.marks[ns] = make(chan struct{})
	s.mu.Unlock()
	s.send(ns, &routerv1.ReplicaEvent{})
}

// caughtUp waits until the markers of every namespace marked so far came
// back, or ctx ends; it reports which.
func (s *syncer) caughtUp(ctx context.Context) bool {
	s.mu.Lock()
	var wait []chan struct{}
	for _, ch := range s.marks {
		wait = append(wait, ch)
	}
	s.mu.Unlock()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// publish sends queued events in order, in batches.
func (s *syncer) publish() {
	defer close(s.done)
	pub := s.bus.NewPublisher(context.Background(), eventbusclient.PublisherOptions{NoMsgIDs: true})
	defer pub.Close()
	for e := range s.out {
		batch := []*eventbusv1.Event{e}
	more:
		for len(batch) < 512 {
			select {
			case n, ok := <-s.out:
				if !ok {
					break more
				}
				batch = append(batch, n)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := pub.PublishBatch(ctx, batch); err != nil {
			s.log.Warn("replica sync events not published", "events", len(batch), "err", err.Error())
		}
		cancel()
	}
}

// apply is the consumer's handler for other replicas' events.
func (s *syncer) apply(ev *eventbusv1.DeliveredEvent) {
	re, err := eventbusclient.Decode[routerv1.ReplicaEvent](ev)
	if err != nil {
		s.log.Warn("undecodable replica event", "err", err.Error())
		return
	}
	if re.ReplicaId == s.id {
		if re.GetKind() == nil {
			s.mu.Lock()
			if ch, ok := s.marks[wire.Namespace(ev.GetSubject())]; ok {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
			s.mu.Unlock()
		}
		return
	}
	if r := re.GetRouted(); r != nil {
		// Remember where the request lives, so that a prefill-complete or
		// free sent to this replica is shared too.
		s.mu.Lock()
		s.nsOf[r.RequestId] = wire.Namespace(ev.GetSubject())
		s.mu.Unlock()
	}
	if id := re.GetFreed(); id != "" {
		s.mu.Lock()
		delete(s.nsOf, id)
		s.mu.Unlock()
	}
	at := time.Now()
	if ev.GetTime() != nil {
		at = ev.GetTime().AsTime()
	}
	s.core.ApplyReplica(re, at)
}

func (s *syncer) close() {
	close(s.out)
	<-s.done
}
