package worker_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

func storedEv(hs ...uint64) *workerv1.KvCacheEvent {
	bs := make([]*workerv1.KvBlock, len(hs))
	for i, h := range hs {
		bs[i] = &workerv1.KvBlock{SequenceHash: h}
	}
	return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Blocks: bs}}}
}

// TestWorkerAPI serves WorkerService for real: the address is in the
// instance metadata, Generate answers over gRPC, GetKvEvents reads the ring
// (OUT_OF_RANGE past it), GetKvState returns the blocks and the id they are
// current to, and WatchKvEvents replays from an id and then follows live.
func TestWorkerAPI(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := e.config(t)
	cfg.KVEventsRing = 4
	w, err := worker.Start(ctx, cfg, echo(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	addr := w.Instance().GetMetadata()[wire.MetadataWorkerAPI]
	if addr == "" || addr != w.APIAddr() {
		t.Fatalf("instance metadata worker_api = %q; want %q", addr, w.APIAddr())
	}
	cc, api, err := worker.DialAPI(addr, grpcclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	gen, err := api.Generate(ctx, &workerv1.GenerateRequest{RequestId: "g", TokenIds: []uint32{3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	var toks []uint32
	for {
		r, err := gen.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, r.GetTokenIds()...)
	}
	if !slices.Equal(toks, []uint32{3, 4}) {
		t.Fatalf("Generate over gRPC = %v", toks)
	}

	// Six events, numbered by the SDK: 1..6; the ring keeps 3..6.
	for i := range 6 {
		w.PublishKVEvents(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{storedEv(uint64(100 + i))}})
	}
	got, err := api.GetKvEvents(ctx, &workerv1.GetKvEventsRequest{FromEventId: 4})
	if err != nil || got.GetLastEventId() != 6 || got.GetBatch().GetFirstEventId() != 4 || len(got.GetBatch().GetEvents()) != 3 ||
		got.GetBatch().GetInstanceId() != w.InstanceID() {
		t.Fatalf("GetKvEvents(4) = %v, %v", got, err)
	}
	_, err = api.GetKvEvents(ctx, &workerv1.GetKvEventsRequest{FromEventId: 2})
	if status.Code(err) != codes.OutOfRange || apierr.Reason(err) != apierr.ReasonKVEventsOutOfRange {
		t.Fatalf("GetKvEvents(2) = %v; want OUT_OF_RANGE/%s", err, apierr.ReasonKVEventsOutOfRange)
	}
	inst, ranks, err := worker.ReadKVState(ctx, api)
	if err != nil || inst != w.InstanceID() || len(ranks) != 1 || ranks[0].EventID != 6 || len(ranks[0].Hashes) != 6 {
		t.Fatalf("GetKvState = %x %v, %v", inst, ranks, err)
	}

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch, err := api.WatchKvEvents(wctx, &workerv1.WatchKvEventsRequest{FromEventIds: map[uint32]uint64{0: 5}})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(5)
	for next <= 8 {
		if next == 7 {
			w.PublishKVEvents(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{storedEv(200), storedEv(201)}})
		}
		r, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetBatch().GetFirstEventId() != next {
			t.Fatalf("watch batch starts at %d; want %d", r.GetBatch().GetFirstEventId(), next)
		}
		next += uint64(len(r.GetBatch().GetEvents()))
	}
	wcancel()

	// A watch from an id the ring lost ends with OUT_OF_RANGE.
	lost, err := api.WatchKvEvents(ctx, &workerv1.WatchKvEventsRequest{})
	if err == nil {
		_, err = lost.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("watch from 1 = %v; want OUT_OF_RANGE", err)
	}
}
