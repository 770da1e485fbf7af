package core

import (
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// ApplyEvents applies one worker's batch of KV events to the index, in
// event id order: duplicates and late events are dropped, gaps counted.
// Approximate mode ignores events.
func (c *Core) ApplyEvents(b *workerv1.KvEventBatch) {
	if c.approximate || b == nil {
		return
	}
	w := index.WorkerID{Instance: b.GetInstanceId(), DPRank: b.GetDpRank()}
	for i, ev := range b.GetEvents() {
		id := uint64(0)
		if b.GetFirstEventId() != 0 {
			id = b.GetFirstEventId() + uint64(i)
		}
		c.ApplyEvent(w, id, ev)
	}
}

// ApplyEvent applies one KV event of worker w.
func (c *Core) ApplyEvent(w index.WorkerID, id uint64, ev *workerv1.KvCacheEvent) {
	if c.approximate || ev == nil {
		return
	}
	res := c.idx.Apply(w, id, func(tx index.Tx) {
		switch k := ev.GetEvent().(type) {
		case *workerv1.KvCacheEvent_Stored:
			hashes := make([]uint64, len(k.Stored.GetBlocks()))
			for i, b := range k.Stored.GetBlocks() {
				hashes[i] = b.GetSequenceHash()
			}
			tx.Store(hashes)
			if c.pending != nil {
				c.confirm(w, hashes)
			}
		case *workerv1.KvCacheEvent_Removed:
			tx.Remove(k.Removed.GetSequenceHashes())
			if c.pending != nil {
				c.confirm(w, k.Removed.GetSequenceHashes())
			}
		case *workerv1.KvCacheEvent_Cleared:
			tx.Clear()
			if c.pending != nil {
				c.pending.RemoveWorker(w.Instance)
				c.legs.pending.RemoveWorker(w.Instance)
			}
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sawEventLocked(w.Instance)
	switch res {
	case index.Applied:
		c.stats.applied++
	case index.Duplicate:
		c.stats.duplicate++
	case index.Gap:
		c.stats.applied++
		c.stats.gap++
	}
}

// ResetWorker replaces a worker's blocks in the index with its own state
// (GetKvState), current to event id lastEvent: the core and direct event
// planes' rebuild. Predictions of the worker's caches are dropped too: the
// state is what it holds. Approximate mode ignores it.
func (c *Core) ResetWorker(w index.WorkerID, lastEvent uint64, hashes []uint64) {
	if c.approximate {
		return
	}
	c.idx.Reset(w, lastEvent, hashes)
	if c.pending != nil {
		c.confirm(w, hashes)
	}
	c.mu.Lock()
	c.stats.rebuilds++
	c.sawEventLocked(w.Instance)
	c.mu.Unlock()
}

// LastEvent is the last event id the index applied for a worker.
func (c *Core) LastEvent(w index.WorkerID) uint64 { return c.idx.LastEvent(w) }

// sawEventLocked records that an event (or the state) of instance id
// arrived now, for instances the registry lists; c.mu is held.
func (c *Core) sawEventLocked(id uint64) {
	if _, ok := c.refs[id]; ok {
		c.lastEvent[id] = c.now()
	}
}

// confirm drops the predictions, of decode and whole requests and of
// prefill legs, that w's events confirm.
func (c *Core) confirm(w index.WorkerID, hashes []uint64) {
	c.pending.Confirm(w, hashes)
	c.legs.pending.Confirm(w, hashes)
}
