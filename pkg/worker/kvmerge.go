package worker

import (
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// maxMergedKVBytes bounds the encoded size of a batch that mergeKVRuns
// makes, far below NATS's default max_payload (1 MiB), so that a merged
// batch is always one event the eventbus takes.
const maxMergedKVBytes = 64 << 10

// mergeKVRuns merges each run of batches of one instance and dp rank whose
// event ids follow on (each batch's first id is the one after the batch
// before it ends) into one batch, while the run's encoded size stays within
// maxBytes. Unnumbered batches (first id 0) are left alone, and the order
// is kept: the batches out hold the same events in the same order. The
// batches given are not changed; a merged batch is a new one.
func mergeKVRuns(batches []*workerv1.KvEventBatch, maxBytes int) []*workerv1.KvEventBatch {
	out := make([]*workerv1.KvEventBatch, 0, len(batches))
	var last *workerv1.KvEventBatch
	lastSize, copied := 0, false
	for _, b := range batches {
		size := proto.Size(b)
		if last != nil && b.FirstEventId != 0 && last.FirstEventId != 0 && b.InstanceId == last.InstanceId && b.DpRank == last.DpRank &&
			b.FirstEventId == last.FirstEventId+uint64(len(last.Events)) && lastSize+size <= maxBytes {
			if !copied {
				// KvEventBatch's fields: the run's worker and first id, and
				// every batch's events.
				last = &workerv1.KvEventBatch{InstanceId: last.InstanceId, DpRank: last.DpRank, FirstEventId: last.FirstEventId, Events: slices.Clone(last.Events)}
				out[len(out)-1], copied = last, true
			}
			last.Events = append(last.Events, b.Events...)
			lastSize += size
			continue
		}
		out = append(out, b)
		last, lastSize, copied = b, size, false
	}
	return out
}

// waitKV waits until the time given, until the worker shuts down, or
// until a load report falls due (see Worker.loadRide), which it returns.
// With holdLoad a load report that falls due waits with the KV batches
// until the time given (the newest one kept), so that the worker sends no
// more than one message per interval: what an interval the eventbus asked
// for is for.
func (w *Worker) waitKV(until time.Time, holdLoad bool) (load []*eventbusv1.Event) {
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return load
		case <-w.kvClosing:
			return load
		case load = <-w.loadRide:
			if !holdLoad {
				return load
			}
		}
	}
}
