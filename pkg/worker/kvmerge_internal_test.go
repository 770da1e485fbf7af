package worker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// TestMergeKVRuns: runs of one worker rank's batches whose ids follow on
// become one batch; a gap, another rank or instance, an unnumbered batch
// or the size bound starts a new one; the events and their order are the
// same, and the batches given are left as they were.
func TestMergeKVRuns(t *testing.T) {
	t.Parallel()
	// b is a batch of n removed events, of instance 7 unless inst says.
	b := func(inst uint64, rank uint32, first uint64, n int) *workerv1.KvEventBatch {
		kb := &workerv1.KvEventBatch{InstanceId: inst, DpRank: rank, FirstEventId: first}
		for i := range n {
			kb.Events = append(kb.Events, &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{
				Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{first*100 + uint64(i)}}}})
		}
		return kb
	}
	// merged is the batch holding the events of bs in order, as the first
	// one's.
	merged := func(bs ...*workerv1.KvEventBatch) *workerv1.KvEventBatch {
		out := proto.CloneOf(bs[0])
		for _, x := range bs[1:] {
			out.Events = append(out.Events, proto.CloneOf(x).Events...)
		}
		return out
	}
	// Hashes 100 and up: the first batch encodes a byte shorter than the
	// others.
	one := proto.Size(b(7, 0, 1, 1))
	tests := []struct {
		name     string
		in       []*workerv1.KvEventBatch
		maxBytes int
		want     []*workerv1.KvEventBatch
	}{
		{"empty", []*workerv1.KvEventBatch{}, 1 << 20, []*workerv1.KvEventBatch{}},
		{"one", []*workerv1.KvEventBatch{b(7, 0, 1, 2)}, 1 << 20, []*workerv1.KvEventBatch{b(7, 0, 1, 2)}},
		{"a run", []*workerv1.KvEventBatch{b(7, 0, 1, 2), b(7, 0, 3, 1), b(7, 0, 4, 3)}, 1 << 20,
			[]*workerv1.KvEventBatch{merged(b(7, 0, 1, 2), b(7, 0, 3, 1), b(7, 0, 4, 3))}},
		{"a gap", []*workerv1.KvEventBatch{b(7, 0, 1, 2), b(7, 0, 4, 1), b(7, 0, 5, 1)}, 1 << 20,
			[]*workerv1.KvEventBatch{b(7, 0, 1, 2), merged(b(7, 0, 4, 1), b(7, 0, 5, 1))}},
		{"ranks interleaved", []*workerv1.KvEventBatch{b(7, 0, 1, 1), b(7, 1, 2, 1), b(7, 0, 2, 1)}, 1 << 20,
			[]*workerv1.KvEventBatch{b(7, 0, 1, 1), b(7, 1, 2, 1), b(7, 0, 2, 1)}},
		{"another instance", []*workerv1.KvEventBatch{b(7, 0, 1, 1), b(8, 0, 2, 1)}, 1 << 20,
			[]*workerv1.KvEventBatch{b(7, 0, 1, 1), b(8, 0, 2, 1)}},
		{"unnumbered", []*workerv1.KvEventBatch{b(7, 0, 0, 1), b(7, 0, 1, 1), b(7, 0, 2, 1)}, 1 << 20,
			[]*workerv1.KvEventBatch{b(7, 0, 0, 1), merged(b(7, 0, 1, 1), b(7, 0, 2, 1))}},
		{"size bound", []*workerv1.KvEventBatch{b(7, 0, 1, 1), b(7, 0, 2, 1), b(7, 0, 3, 1), b(7, 0, 4, 1)}, 2*one + 2,
			[]*workerv1.KvEventBatch{merged(b(7, 0, 1, 1), b(7, 0, 2, 1)), merged(b(7, 0, 3, 1), b(7, 0, 4, 1))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]*workerv1.KvEventBatch, len(tc.in))
			for i, x := range tc.in {
				before[i] = proto.CloneOf(x)
			}
			got := mergeKVRuns(tc.in, tc.maxBytes)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.in, protocmp.Transform()); diff != "" {
				t.Errorf("the batches given changed (-before +after):\n%s", diff)
			}
		})
	}
}
