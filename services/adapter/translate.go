package adapter

import (
	"log/slog"
	"math"
	"sync/atomic"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// Stats counts what the adapter did with the engine's KV events.
type Stats struct {
	// Messages decoded, and ones that did not decode.
	Messages, Malformed atomic.Uint64
	// Gaps in the engine's message sequence numbers, and the messages lost.
	Gaps, LostMessages atomic.Uint64
	// BlockSizeMismatches are stored events whose block size is not
	// --block-size; they are not published.
	BlockSizeMismatches atomic.Uint64
	// Skipped events: of a LoRA adapter, with tokens that do not fill
	// their blocks, or whose parent is unknown.
	Skipped atomic.Uint64
	// UnknownRemovals are removed engine hashes the adapter never stored.
	UnknownRemovals atomic.Uint64
	// Restarts are sequence numbers going back: the engine restarted.
	Restarts atomic.Uint64
	// Published events.
	Published atomic.Uint64
	// Replayed messages recovered from the engine's replay socket after a gap.
	Replayed atomic.Uint64
}

type mapped struct {
	block kvhash.Block
	gen   uint64
}

type queued struct {
	key, gen uint64
}

// Translator turns engine KV events into Switchyard ones: it recomputes the
// block hashes from the tokens (pkg/kvhash, chained from the parent's
// Switchyard sequence hash) and remembers, for a bounded number of blocks,
// which Switchyard block each engine hash is, to resolve parents and
// removals. It is not safe for concurrent use.
type Translator struct {
	blockSize int
	limit     int
	log       *slog.Logger
	stats     *Stats

	blocks  map[uint64]mapped
	order   []queued
	gen     uint64
	lastSeq uint64
	seenSeq bool
	// restarted asks for a cleared event before the next ones.
	restarted bool
	// nextID is the next event id of each data-parallel rank.
	nextID map[uint32]uint64
}

// NewTranslator translates events of blocks of blockSize tokens, remembering
// up to limit engine hashes (the oldest are forgotten first).
func NewTranslator(blockSize, limit int, log *slog.Logger, stats *Stats) *Translator {
	if limit < 1 {
		limit = 1
	}
	return &Translator{blockSize: blockSize, limit: limit, log: log, stats: stats, blocks: make(map[uint64]mapped), nextID: make(map[uint32]uint64)}
}

// Next is the sequence number the translator expects next, and whether it
// has seen any.
func (t *Translator) Next() (uint64, bool) { return t.lastSeq + 1, t.seenSeq }

// Sequence notes an engine message's sequence number, counting and logging
// a gap when numbers were skipped. A number that goes back means the engine
// restarted with an empty cache: the blocks are forgotten and the next batch
// starts with a cleared event.
func (t *Translator) Sequence(seq uint64) {
	if t.seenSeq && seq <= t.lastSeq {
		t.stats.Restarts.Add(1)
		t.log.Warn("the engine's KV event sequence went back: engine restarted, its cache is cleared", "last", t.lastSeq, "got", seq)
		clear(t.blocks)
		t.order = t.order[:0]
		t.restarted = true
	} else if t.seenSeq && seq != t.lastSeq+1 {
		t.stats.Gaps.Add(1)
		if seq > t.lastSeq {
			t.stats.LostMessages.Add(seq - t.lastSeq - 1)
		}
		t.log.Warn("gap in the engine's KV event sequence: the router's view of this worker may be stale",
			"expected", t.lastSeq+1, "got", seq)
	}
	t.lastSeq, t.seenSeq = seq, true
}

// Translate turns a decoded batch into Switchyard events with ids
// consecutive per data-parallel rank, from 1; it returns nil when nothing is
// left to publish.
func (t *Translator) Translate(b Batch) *workerv1.KvEventBatch {
	var out []*workerv1.KvCacheEvent
	if t.restarted {
		t.restarted = false
		out = append(out, &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}})
	}
	for _, e := range b.Events {
		if ev := t.event(e); ev != nil {
			out = append(out, ev)
		}
	}
	if len(out) == 0 {
		return nil
	}
	var rank uint32
	if b.HasDPRank && b.DPRank > 0 && b.DPRank <= math.MaxUint32 {
		rank = uint32(b.DPRank)
	}
	first := t.nextID[rank]
	if first == 0 {
		first = 1
	}
	batch := &workerv1.KvEventBatch{DpRank: rank, FirstEventId: first, Events: out}
	t.nextID[rank] = first + uint64(len(out))
	t.stats.Published.Add(uint64(len(out)))
	return batch
}

func (t *Translator) event(e Event) *workerv1.KvCacheEvent {
	switch e.Kind {
	case BlockStored:
		return t.stored(e)
	case BlockRemoved:
		var hashes []uint64
		medium := MediumOf(e.Medium)
		for _, h := range e.BlockHashes {
			m, ok := t.blocks[h]
			if !ok {
				t.stats.UnknownRemovals.Add(1)
				continue
			}
			if medium == workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED {
				// Gone from the engine. A removal from one medium keeps the
				// mapping: the engine may hold the block on another (vLLM
				// evicts a block from GPU that it offloaded to CPU, and
				// removes it from CPU later).
				delete(t.blocks, h)
			}
			hashes = append(hashes, m.block.Sequence)
		}
		if len(hashes) == 0 {
			return nil
		}
		return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: hashes, Medium: medium}}}
	case AllBlocksCleared:
		clear(t.blocks)
		t.order = t.order[:0]
		return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}
	}
	return nil
}

func (t *Translator) stored(e Event) *workerv1.KvCacheEvent {
	if e.BlockSize != t.blockSize {
		t.stats.BlockSizeMismatches.Add(1)
		t.log.Error("engine KV block size differs from --block-size: event NOT published; set --block-size to the engine's",
			"engine_block_size", e.BlockSize, "block_size", t.blockSize, "blocks", len(e.BlockHashes))
		return nil
	}
	if e.HasLoRA || len(e.BlockHashes) == 0 || len(e.TokenIDs) != len(e.BlockHashes)*t.blockSize {
		t.stats.Skipped.Add(1)
		t.log.Warn("engine stored event skipped", "lora", e.HasLoRA, "blocks", len(e.BlockHashes), "tokens", len(e.TokenIDs))
		return nil
	}
	st := &workerv1.KvBlocksStored{Blocks: make([]*workerv1.KvBlock, len(e.BlockHashes)), Medium: MediumOf(e.Medium)}
	var parent uint64
	hasParent := false
	if e.HasParent {
		m, ok := t.blocks[e.Parent]
		if !ok {
			t.stats.Skipped.Add(1)
			t.log.Warn("engine stored blocks under an unknown parent: skipped", "parent", e.Parent)
			return nil
		}
		parent, hasParent = m.block.Sequence, true
		p := parent
		st.ParentSequenceHash = &p
	}
	for i, h := range e.BlockHashes {
		local := kvhash.LocalHash(e.TokenIDs[i*t.blockSize : (i+1)*t.blockSize])
		seq := local
		if hasParent {
			seq = kvhash.SequenceHash(parent, local)
		}
		st.Blocks[i] = &workerv1.KvBlock{SequenceHash: seq, LocalHash: local}
		t.remember(h, kvhash.Block{Local: local, Sequence: seq})
		parent, hasParent = seq, true
	}
	return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: st}}
}

// remember maps an engine hash, forgetting the oldest beyond the limit.
func (t *Translator) remember(h uint64, b kvhash.Block) {
	t.gen++
	t.blocks[h] = mapped{block: b, gen: t.gen}
	t.order = append(t.order, queued{key: h, gen: t.gen})
	for len(t.blocks) > t.limit && len(t.order) > 0 {
		q := t.order[0]
		t.order = t.order[1:]
		if m, ok := t.blocks[q.key]; ok && m.gen == q.gen {
			delete(t.blocks, q.key)
		}
	}
	if len(t.order) > 2*t.limit+1024 {
		live := t.order[:0:0]
		for _, q := range t.order {
			if m, ok := t.blocks[q.key]; ok && m.gen == q.gen {
				live = append(live, q)
			}
		}
		t.order = live
	}
}
