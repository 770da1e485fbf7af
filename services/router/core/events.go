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
	unknown := false
	res := c.idx.Apply(w, id, func(tx index.Tx) {
		switch k := ev.GetEvent().(type) {
		case *workerv1.KvCacheEvent_Stored:
			hashes := make([]uint64, len(k.Stored.GetBlocks()))
			for i, b := range k.Stored.GetBlocks() {
				hashes[i] = b.GetSequenceHash()
			}
			var t index.Tier
			t, unknown = TierOf(k.Stored.GetMedium())
			switch {
			case t == index.TierGPU || !c.tierBlind:
				tx.StoreOn(hashes, t)
			default:
				tx.Remove(hashes) // blind to tiers: off GPU is gone
			}
			if c.pending != nil {
				c.confirm(w, hashes)
			}
		case *workerv1.KvCacheEvent_Removed:
			m := k.Removed.GetMedium()
			if m == workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED {
				tx.Remove(k.Removed.GetSequenceHashes())
			} else {
				var t index.Tier
				t, unknown = TierOf(m)
				if t == index.TierGPU || !c.tierBlind {
					tx.RemoveFrom(k.Removed.GetSequenceHashes(), t)
				}
			}
			if c.pending != nil {
				c.confirm(w, k.Removed.GetSequenceHashes())
			}
		case *workerv1.KvCacheEvent_Cleared:
			tx.Clear()
			if c.pending != nil {
				c.pending.RemoveRank(w)
				c.legs.pending.RemoveRank(w)
			}
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sawEventLocked(w.Instance)
	if unknown && res != index.Duplicate {
		c.stats.unknownMedium++
	}
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
// planes' rebuild. media is each block's medium, in order (empty: all on
// GPU). Predictions of the worker's caches are dropped too: the state is
// what it holds. Approximate mode ignores it.
func (c *Core) ResetWorker(w index.WorkerID, lastEvent uint64, hashes []uint64, media []workerv1.KvMedium) {
	if c.approximate {
		return
	}
	var tiers []index.Tier
	unknown := uint64(0)
	if len(media) > 0 {
		tiers = make([]index.Tier, len(media))
		kept := hashes[:0:0]
		for i, m := range media {
			var u bool
			if tiers[i], u = TierOf(m); u {
				unknown++
			}
		}
		if c.tierBlind {
			// Blind to tiers: the GPU blocks only.
			for i, h := range hashes {
				if tierAt(tiers, i) == index.TierGPU {
					kept = append(kept, h)
				}
			}
			hashes, tiers = kept, nil
		}
	}
	c.idx.Reset(w, lastEvent, hashes, tiers)
	if c.pending != nil {
		c.confirm(w, hashes)
	}
	c.mu.Lock()
	c.stats.rebuilds++
	c.stats.unknownMediumBlocks += unknown
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

// TierOf is the index tier of a KV event's medium, and whether the medium
// is one the router does not know: KV_MEDIUM_UNKNOWN, or a value a newer
// publisher sends that this router predates. Such blocks are kept on the
// unknown tier (priced as disk) and counted, never dropped. Unspecified
// is GPU, as publishers that predate media mean it.
func TierOf(m workerv1.KvMedium) (index.Tier, bool) {
	switch m {
	case workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED, workerv1.KvMedium_KV_MEDIUM_GPU:
		return index.TierGPU, false
	case workerv1.KvMedium_KV_MEDIUM_CPU:
		return index.TierCPU, false
	case workerv1.KvMedium_KV_MEDIUM_DISK:
		return index.TierDisk, false
	default:
		return index.TierUnknown, true
	}
}

// UnknownMedium counts the KV events applied whose medium the router does
// not know (see TierOf), and the blocks of workers' states with one.
func (c *Core) UnknownMedium() (events, stateBlocks uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.unknownMedium, c.stats.unknownMediumBlocks
}

// TierEntries counts the index's (block, worker) pairs on each tier below
// GPU (cpu, disk, unknown).
func (c *Core) TierEntries() [index.LowerTiers]int { return c.idx.TierStats() }

func tierAt(tiers []index.Tier, i int) index.Tier {
	if i < len(tiers) {
		return tiers[i]
	}
	return index.TierGPU
}
