package core

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Snapshot captures the index and the stream sequences it covers. The
// sequences are read before the index, so the index covers at least them;
// events replayed past them that it already holds are dropped as duplicates
// by their event ids.
func (c *Core) Snapshot(seqs map[string]uint64) *routerv1.IndexSnapshot {
	s := &routerv1.IndexSnapshot{StreamSequences: seqs, TakenAt: timestamppb.New(c.now())}
	for _, d := range c.idx.Dump() {
		s.Workers = append(s.Workers, &routerv1.IndexSnapshotWorker{InstanceId: d.ID.Instance, DpRank: d.ID.DPRank, LastEventId: d.LastEvent, BlockHashes: d.Hashes})
	}
	return s
}

// Restore loads a snapshot into the index.
func (c *Core) Restore(s *routerv1.IndexSnapshot) {
	dumps := make([]index.WorkerDump, len(s.GetWorkers()))
	for i, w := range s.GetWorkers() {
		dumps[i] = index.WorkerDump{ID: index.WorkerID{Instance: w.InstanceId, DPRank: w.DpRank}, LastEvent: w.LastEventId, Hashes: w.BlockHashes}
	}
	c.idx.Restore(dumps)
	c.mu.Lock()
	c.restoredAt = s.GetTakenAt()
	c.mu.Unlock()
}

// DropDeparted forgets indexed workers the registry does not list: a
// snapshot may name workers that left while the router was down.
func (c *Core) DropDeparted() {
	c.mu.Lock()
	var gone []uint64
	for _, w := range c.idx.Workers() {
		if _, live := c.refs[w.Instance]; !live {
			gone = append(gone, w.Instance)
		}
	}
	c.mu.Unlock()
	for _, id := range gone {
		c.removeInstance(id)
	}
}

// Listed reports whether the registry lists instance id, as far as the
// router's watch has told it.
func (c *Core) Listed(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, live := c.refs[id]
	return live
}

// DropUnlisted forgets instance id's blocks and load unless the registry's
// watch lists it, and reports whether it did: for KV events of a worker
// the registry says is gone (a stream replayed after a restart, a worker's
// last batch after its deregistration).
func (c *Core) DropUnlisted(id uint64) bool {
	if c.Listed(id) {
		return false
	}
	c.removeInstance(id)
	return true
}
