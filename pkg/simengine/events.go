package simengine

import (
	"errors"
	"fmt"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// EventKind says what a KV cache event reports.
type EventKind int

// The kinds of KV cache events.
const (
	// EventStored reports full blocks that entered the prefix cache.
	EventStored EventKind = iota + 1
	// EventRemoved reports blocks evicted from the prefix cache.
	EventRemoved
	// EventCleared reports that the whole cache was emptied.
	EventCleared
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	case EventCleared:
		return "cleared"
	default:
		return "unknown"
	}
}

// Event is one change to the engine's prefix cache. Replaying an engine's
// events in id order into a set (add stored sequence hashes, delete removed
// ones, empty it on cleared) gives exactly the blocks it caches.
type Event struct {
	// ID is the engine's event counter: 1 for the first event, then one more
	// for each, with no gaps.
	ID uint64
	// Kind says which of the fields below are set.
	Kind EventKind
	// Parent is the sequence hash of the block before Blocks[0] (EventStored);
	// meaningful only when HasParent.
	Parent uint64
	// HasParent is false when Blocks[0] is the first block of its sequence.
	HasParent bool
	// Blocks are the stored blocks, in sequence order (EventStored).
	Blocks []kvhash.Block
	// Removed are the sequence hashes of evicted blocks (EventRemoved).
	Removed []uint64
	// Medium is where the blocks are stored, or were removed from, for an
	// engine with a host tier (see hostTier); unspecified without one.
	Medium workerv1.KvMedium
}

// Proto returns the event as a worker protocol message.
func (e Event) Proto() *workerv1.KvCacheEvent {
	switch e.Kind {
	case EventStored:
		s := &workerv1.KvBlocksStored{Blocks: make([]*workerv1.KvBlock, len(e.Blocks)), Medium: e.Medium}
		if e.HasParent {
			s.ParentSequenceHash = &e.Parent
		}
		for i, b := range e.Blocks {
			s.Blocks[i] = &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local}
		}
		return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: s}}
	case EventRemoved:
		return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{
			Removed: &workerv1.KvBlocksRemoved{SequenceHashes: e.Removed, Medium: e.Medium},
		}}
	default:
		return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}
	}
}

// ErrEventGap is returned by BatchProto for events whose ids do not follow
// each other.
var ErrEventGap = errors.New("event ids are not consecutive")

// BatchProto returns events, which must have consecutive ids (those of one
// step, or of consecutive steps), as one worker protocol batch from the given
// worker instance and data-parallel rank. It returns nil for no events, and
// fails with ErrEventGap.
func BatchProto(instanceID uint64, dpRank uint32, events []Event) (*workerv1.KvEventBatch, error) {
	if len(events) == 0 {
		return nil, nil
	}
	b := &workerv1.KvEventBatch{
		InstanceId:   instanceID,
		DpRank:       dpRank,
		FirstEventId: events[0].ID,
		Events:       make([]*workerv1.KvCacheEvent, len(events)),
	}
	for i, e := range events {
		if e.ID != events[0].ID+uint64(i) {
			return nil, fmt.Errorf("%w: event %d has id %d after %d", ErrEventGap, i, e.ID, events[0].ID)
		}
		b.Events[i] = e.Proto()
	}
	return b, nil
}
