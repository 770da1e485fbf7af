package core

import (
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// ingest decodes msg as the kind of message kind selects and gives it to c
// as the router does: a KV event batch (from the eventbus or a worker's
// ring), a worker's load report (with its timing model), another replica's
// event, or an index snapshot (from the object store). A message that does
// not decode is dropped, as the router drops it.
func ingest(c *Core, kind byte, msg []byte, at time.Time) {
	switch kind % 4 {
	case 0:
		b := &workerv1.KvEventBatch{}
		if proto.Unmarshal(msg, b) == nil {
			c.ApplyEvents(b)
		}
	case 1:
		m := &workerv1.LoadMetrics{}
		if proto.Unmarshal(msg, m) == nil {
			c.ReportLoad(m)
		}
	case 2:
		ev := &routerv1.ReplicaEvent{}
		if proto.Unmarshal(msg, ev) == nil {
			c.ApplyReplica(ev, at)
		}
	case 3:
		s := &routerv1.IndexSnapshot{}
		if proto.Unmarshal(msg, s) == nil {
			c.Restore(s)
		}
	}
}

// FuzzIngest feeds a core of three workers (the third serving two
// data-parallel ranks) two messages of what reaches a
// router from outside (see ingest), in KV and approximate mode, then routes
// a request and frees it: nothing may panic, a decision names a listed
// worker, its candidates' costs are numbers, and the request's load goes
// when it is freed.
func FuzzIngest(f *testing.F) {
	toks := tokens(32, 1)
	blocks := kvhash.Hashes(toks, 4, nil)
	stored := &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{}}
	for _, b := range blocks[:4] {
		stored.Stored.Blocks = append(stored.Stored.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	batch, _ := proto.Marshal(&workerv1.KvEventBatch{InstanceId: 2, FirstEventId: 1, Events: []*workerv1.KvCacheEvent{{Event: stored}}})
	removed, _ := proto.Marshal(&workerv1.KvEventBatch{InstanceId: 2, FirstEventId: 2, Events: []*workerv1.KvCacheEvent{
		{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{blocks[3].Sequence, 7}}}}}})
	offload := &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Medium: workerv1.KvMedium_KV_MEDIUM_CPU}}
	offload.Stored.Blocks = stored.Stored.Blocks[2:]
	tiered, _ := proto.Marshal(&workerv1.KvEventBatch{InstanceId: 2, FirstEventId: 2, Events: []*workerv1.KvCacheEvent{{Event: offload},
		{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{blocks[2].Sequence}, Medium: workerv1.KvMedium_KV_MEDIUM_GPU}}},
		{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Blocks: stored.Stored.Blocks[:1], Medium: workerv1.KvMedium(42)}}}}})
	tm := timingmodel.Default().Scaled(2).Proto()
	tm.CpuLoadMsPerToken = 0.01
	load, _ := proto.Marshal(&workerv1.LoadMetrics{InstanceId: 1, RunningRequests: 1, KvBlocksTotal: 100, ActivePrefillTokens: 64, TimingModel: tm,
		Requests: []*workerv1.RequestLoad{{RequestId: "x", PrefillTokens: 64, DecodeBlocks: 3}}})
	routed, _ := proto.Marshal(&routerv1.ReplicaEvent{Kind: &routerv1.ReplicaEvent_Routed{Routed: &routerv1.ReplicaRouted{
		RequestId: "y", InstanceId: 3, PrefillBlocks: 8, BlockHashes: []uint64{blocks[0].Sequence}}}})
	// Worker 3 serves two data-parallel ranks: rank 1's events and load,
	// and a rank its card does not declare.
	rankBatch, _ := proto.Marshal(&workerv1.KvEventBatch{InstanceId: 3, DpRank: 1, FirstEventId: 1, Events: []*workerv1.KvCacheEvent{{Event: stored}}})
	rankLoad, _ := proto.Marshal(&workerv1.LoadMetrics{InstanceId: 3, DpRank: 1, RunningRequests: 1, KvBlocksTotal: 100, ActivePrefillTokens: 64,
		Requests: []*workerv1.RequestLoad{{RequestId: "z", PrefillTokens: 64}}})
	undeclared, _ := proto.Marshal(&workerv1.LoadMetrics{InstanceId: 3, DpRank: 7, RunningRequests: 1})
	snap, _ := proto.Marshal(&routerv1.IndexSnapshot{StreamSequences: map[string]uint64{"s": 9}, Workers: []*routerv1.IndexSnapshotWorker{
		{InstanceId: 1, LastEventId: 5, BlockHashes: []uint64{blocks[0].Sequence, blocks[1].Sequence}}, {InstanceId: 99, BlockHashes: []uint64{1}}}})
	for _, s := range []struct {
		k1   byte
		m1   []byte
		k2   byte
		m2   []byte
		mode bool
	}{{0, batch, 0, removed, false}, {1, load, 2, routed, false}, {3, snap, 0, batch, false}, {2, routed, 1, load, true}, {0, nil, 3, nil, false}, {0, batch, 0, tiered, false},
		{0, rankBatch, 1, rankLoad, false}, {1, undeclared, 0, rankBatch, true}} {
		f.Add(s.k1, s.m1, s.k2, s.m2, s.mode)
	}
	at := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, k1 byte, m1 []byte, k2 byte, m2 []byte, approximate bool) {
		c := cluster(t, Config{Mode: ModeKV, Approximate: approximate, KVTiers: true}, 3)
		c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend",
			Endpoint: "generate", InstanceId: 3, ModelName: model, BlockSize: 4, DataParallelSize: 2}}})
		ingest(c, k1, m1, at)
		ingest(c, k2, m2, at)
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: "fuzz", Target: modelTarget(), TokenIds: toks})
		if err != nil {
			if !errors.Is(err, ErrNoWorker) {
				t.Fatalf("Route = %v", err)
			}
			return
		}
		if resp.InstanceId < 1 || resp.InstanceId > 3 || resp.DpRank > 0 && (resp.InstanceId != 3 || resp.DpRank > 1) {
			t.Fatalf("routed to %d rank %d, not a listed worker's rank", resp.InstanceId, resp.DpRank)
		}
		for _, cand := range resp.Candidates {
			if math.IsNaN(cand.Cost) {
				t.Fatalf("candidate %d costs NaN", cand.InstanceId)
			}
		}
		c.Free("fuzz")
		_ = c.Stats()
	})
}
