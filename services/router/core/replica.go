package core

import (
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Observer hears about the decisions a Core makes itself (not those it
// applies from other replicas).
type Observer interface {
	Routed(id, namespace string, w index.WorkerID, prefillBlocks int, hashes []uint64)
	PrefillDone(id string)
	Freed(id string)
}

// ApplyReplica applies another replica's change: its load (and, in
// approximate mode, its predicted blocks) becomes part of this replica's
// view, so that N replicas route as one.
// at is when the change happened (predictions age from then).
func (c *Core) ApplyReplica(ev *routerv1.ReplicaEvent, at time.Time) {
	switch k := ev.GetKind().(type) {
	case *routerv1.ReplicaEvent_Routed:
		r := k.Routed
		w := index.WorkerID{Instance: r.InstanceId, DPRank: r.DpRank}
		c.mu.Lock()
		_, live := c.refs[r.InstanceId]
		c.mu.Unlock()
		if !live || r.RequestId == "" {
			return
		}
		c.load.Add(r.RequestId, w, int(r.PrefillBlocks), r.BlockHashes)
		if c.approx != nil {
			c.approx.Predict(w, r.BlockHashes, at)
		}
	case *routerv1.ReplicaEvent_PrefillComplete:
		c.load.PrefillDone(k.PrefillComplete)
	case *routerv1.ReplicaEvent_Freed:
		c.load.Free(k.Freed)
	}
}
