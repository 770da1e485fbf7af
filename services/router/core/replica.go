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
		if live {
			c.arrivals.add(at)
		}
		c.mu.Unlock()
		if !live || r.RequestId == "" {
			return
		}
		c.load.Add(r.RequestId, w, int(r.PrefillBlocks), r.BlockHashes)
		if c.approx != nil {
			c.approx.Predict(w, r.BlockHashes, at)
		}
		if c.pending != nil && c.mode == ModeKV {
			// Predicted where the sender routed it, beyond what this
			// replica's index confirms there.
			from := 0
			if o := c.idx.Overlaps(r.BlockHashes); len(o) > 0 {
				for _, x := range o {
					if x.Worker == w {
						from = x.Blocks
					}
				}
			}
			c.pending.Add(r.RequestId, w, r.BlockHashes[from:], at)
		}
	case *routerv1.ReplicaEvent_PrefillComplete:
		c.load.PrefillDone(k.PrefillComplete)
	case *routerv1.ReplicaEvent_Freed:
		c.free(k.Freed)
	}
}

// RoutedEvent is the replica sync message of a routing decision: the
// request's worker, its prefill blocks and its block hashes (which the
// other replicas count as load and, in kv mode, as predicted blocks).
func RoutedEvent(id string, w index.WorkerID, prefill int, hashes []uint64) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_Routed{Routed: &routerv1.ReplicaRouted{
		RequestId: id, InstanceId: w.Instance, DpRank: w.DPRank, PrefillBlocks: uint32(prefill), BlockHashes: hashes}}}
}

// PrefillDoneEvent is the replica sync message of a request's first token.
func PrefillDoneEvent(id string) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_PrefillComplete{PrefillComplete: id}}
}

// FreedEvent is the replica sync message of a request's end.
func FreedEvent(id string) *routerv1.ReplicaEvent {
	return &routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_Freed{Freed: id}}
}
