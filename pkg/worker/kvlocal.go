package worker

import (
	"errors"
	"fmt"
	"sync"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// DefaultKVEventsRing is the default --kv-events-ring: events kept per dp
// rank. A busy engine emits about 1,500 KV events a second (the mocker at
// full speed on 8 concurrent requests), so this covers about a minute.
const DefaultKVEventsRing = 100_000

// maxEventsPerCall bounds the events of one GetKvEvents answer or one
// WatchKvEvents message (and so the message size: a stored event of a
// 16-block prefix is about 400 bytes, so under gRPC's default 4 MiB).
const maxEventsPerCall = 8192

// ErrOutOfRange is what asking for events the ring no longer holds gets:
// the caller rebuilds from the state instead. It maps to OUT_OF_RANGE with
// reason KV_EVENTS_OUT_OF_RANGE.
var ErrOutOfRange = errors.New("worker: KV event id out of the ring's range")

// KVIndex is a worker's local indexer: the blocks it holds, per dp rank,
// from its own events, and a bounded ring of its recent events with their
// ids. It is what WorkerService serves, so that a router fills gaps or
// rebuilds its view without a broker. It is safe for concurrent use.
type KVIndex struct {
	ringCap int

	mu    sync.Mutex
	ranks map[uint32]*rankState
	// changed is closed (and replaced) whenever events are added, waking
	// every watcher at once.
	changed chan struct{}
}

// rankState is one dp rank's cache and recent events.
type rankState struct {
	// blocks maps each block held to its medium (KvMedium's rules: a
	// store moves, a removal from a medium drops only what it holds).
	blocks map[uint64]workerv1.KvMedium
	last   uint64 // newest event id; 0 before any event
	// ring holds the newest events, oldest at head; ids are consecutive,
	// ending with last.
	ring []*workerv1.KvCacheEvent
	head int
	n    int
}

// RankState is one dp rank's blocks and the event id they are current to.
type RankState struct {
	DPRank  uint32
	EventID uint64
	Hashes  []uint64
	// Media is each hash's medium, in order; nil when every one is on GPU.
	Media []workerv1.KvMedium
}

// NewKVIndex returns an empty index keeping ring events per dp rank (0:
// DefaultKVEventsRing).
func NewKVIndex(ring int) *KVIndex {
	if ring <= 0 {
		ring = DefaultKVEventsRing
	}
	return &KVIndex{ringCap: ring, ranks: map[uint32]*rankState{}, changed: make(chan struct{})}
}

func (x *KVIndex) rankLocked(r uint32) *rankState {
	s := x.ranks[r]
	if s == nil {
		s = &rankState{blocks: map[uint64]workerv1.KvMedium{}}
		x.ranks[r] = s
	}
	return s
}

// Apply applies a batch of the worker's own events and numbers it: a batch
// without a first event id continues its rank's ids; one with an id keeps
// it (the engine's own numbering). An id that does not follow the rank's
// last one (an engine that restarted or skipped ids) restarts the ring
// there, so that nobody is served a run with a hole in it. It reports
// whether the ring restarted.
func (x *KVIndex) Apply(b *workerv1.KvEventBatch) (restarted bool) {
	if b == nil || len(b.Events) == 0 {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.rankLocked(b.DpRank)
	switch {
	case b.FirstEventId == 0:
		b.FirstEventId = s.last + 1
	case b.FirstEventId != s.last+1:
		restarted = s.last != 0 || b.FirstEventId != 1
		clear(s.ring)
		s.ring, s.head, s.n = s.ring[:0], 0, 0
	}
	for _, ev := range b.Events {
		s.apply(ev)
		s.push(ev, x.ringCap)
	}
	s.last = b.FirstEventId + uint64(len(b.Events)) - 1
	close(x.changed)
	x.changed = make(chan struct{})
	return restarted
}

func (s *rankState) apply(ev *workerv1.KvCacheEvent) {
	switch k := ev.GetEvent().(type) {
	case *workerv1.KvCacheEvent_Stored:
		m := k.Stored.GetMedium()
		if m == workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED {
			m = workerv1.KvMedium_KV_MEDIUM_GPU
		}
		for _, b := range k.Stored.GetBlocks() {
			s.blocks[b.GetSequenceHash()] = m
		}
	case *workerv1.KvCacheEvent_Removed:
		m := k.Removed.GetMedium()
		for _, h := range k.Removed.GetSequenceHashes() {
			if held, ok := s.blocks[h]; ok && (m == workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED || m == held) {
				delete(s.blocks, h)
			}
		}
	case *workerv1.KvCacheEvent_Cleared:
		clear(s.blocks)
	}
}

func (s *rankState) push(ev *workerv1.KvCacheEvent, capacity int) {
	// The ring grows as events come, up to its capacity (an idle worker
	// with a large ring costs nothing), and then overwrites its oldest.
	if len(s.ring) < capacity {
		s.ring = append(s.ring, ev)
		s.n++
		return
	}
	s.ring[s.head] = ev
	s.head = (s.head + 1) % len(s.ring)
}

// Events returns the events of rank from id from on (at most max, 0 for the
// limit), the rank's newest id, and ErrOutOfRange when from is older than
// the ring's oldest event. from past the newest event returns none.
func (x *KVIndex) Events(rank uint32, from uint64, max int) (*workerv1.KvEventBatch, uint64, error) {
	if max <= 0 || max > maxEventsPerCall {
		max = maxEventsPerCall
	}
	if from == 0 {
		from = 1
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := &workerv1.KvEventBatch{DpRank: rank, FirstEventId: from}
	s := x.ranks[rank]
	if s == nil || from > s.last {
		return out, s.lastOrZero(), nil
	}
	oldest := s.oldest()
	if from < oldest {
		return nil, s.last, fmt.Errorf("%w: rank %d event %d asked, the ring holds %d..%d", ErrOutOfRange, rank, from, oldest, s.last)
	}
	skip := int(from - oldest)
	n := min(s.n-skip, max)
	out.Events = make([]*workerv1.KvCacheEvent, n)
	for i := range n {
		out.Events[i] = s.ring[(s.head+skip+i)%len(s.ring)]
	}
	return out, s.last, nil
}

// held counts the events of rank the ring holds from id from on; when it no
// longer holds from, those from its oldest on (what backfill publishes).
func (x *KVIndex) held(rank uint32, from uint64) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.ranks[rank]
	if s == nil || from > s.last {
		return 0
	}
	return s.last - max(from, s.oldest()) + 1
}

// oldest is the id of rank's oldest event in the ring, 0 when it holds none.
func (x *KVIndex) oldest(rank uint32) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.ranks[rank]; s != nil && s.n > 0 {
		return s.oldest()
	}
	return 0
}

func (s *rankState) oldest() uint64 { return s.last - uint64(s.n) + 1 }

func (s *rankState) lastOrZero() uint64 {
	if s == nil {
		return 0
	}
	return s.last
}

// State copies every rank's blocks with the event id they are current to,
// ranks in no particular order.
func (x *KVIndex) State() []RankState {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]RankState, 0, len(x.ranks))
	for r, s := range x.ranks {
		hs := make([]uint64, 0, len(s.blocks))
		var media []workerv1.KvMedium
		for h, m := range s.blocks {
			if m != workerv1.KvMedium_KV_MEDIUM_GPU && media == nil {
				media = make([]workerv1.KvMedium, len(hs), cap(hs))
				for i := range media {
					media[i] = workerv1.KvMedium_KV_MEDIUM_GPU
				}
			}
			if media != nil {
				media = append(media, m)
			}
			hs = append(hs, h)
		}
		out = append(out, RankState{DPRank: r, EventID: s.last, Hashes: hs, Media: media})
	}
	return out
}

// Last is every rank's newest event id, and a channel closed when any rank
// gets a new event after this call.
func (x *KVIndex) Last() (map[uint32]uint64, <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[uint32]uint64, len(x.ranks))
	for r, s := range x.ranks {
		out[r] = s.last
	}
	return out, x.changed
}

// Blocks counts the blocks held by a rank.
func (x *KVIndex) Blocks(rank uint32) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.ranks[rank]; s != nil {
		return len(s.blocks)
	}
	return 0
}
