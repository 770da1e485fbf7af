package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// DefaultResyncInterval is how often, in core mode, a router asks each
// quiet worker for events past the last one it applied: a gap at the tail
// (the last events lost, none since) shows only that way.
const DefaultResyncInterval = time.Second

// follower keeps the index exact for every registered worker from the
// workers themselves, in the core and direct KV event modes. Each worker
// has one goroutine that alone applies its events, so that a rebuild, a
// gap fill and live events never interleave:
//
//   - On start (a new worker, or a router that starts or restarts) it reads
//     the worker's GetKvState: exact in one round trip, no snapshot needed.
//   - core: batches come from the eventbus (deliver); a batch whose first
//     id is past the next one expected is preceded by GetKvEvents of the
//     missing ids, and a ring that no longer has them means a rebuild.
//   - direct: it watches WatchKvEvents from the last id applied and resumes
//     there after any break; OUT_OF_RANGE means a rebuild.
type follower struct {
	mode     kvevents.Mode
	core     *core.Core
	log      *slog.Logger
	dial     grpcclient.Options
	interval time.Duration

	mu      sync.Mutex
	workers map[uint64]*tracked
	closed  bool

	// Counters: events applied from GetKvEvents to fill gaps, and
	// rebuilds from GetKvState.
	filled, rebuilds atomic.Uint64
}

// FollowStats counts the work of filling gaps in KV events from the
// workers: the core and direct KV event planes, and in jetstream mode the
// gaps in what the stream delivers (gapFiller).
type FollowStats struct {
	// Filled counts events read from workers' rings to fill gaps.
	Filled uint64
	// Rebuilds counts workers' views rebuilt from their state.
	Rebuilds uint64
	// Unfilled counts events missing from the stream (jetstream mode) that
	// could not be filled: the worker was unreachable or registered no
	// worker API. The index went on past them.
	Unfilled uint64
}

func (f *follower) stats() FollowStats {
	if f == nil {
		return FollowStats{}
	}
	return FollowStats{Filled: f.filled.Load(), Rebuilds: f.rebuilds.Load()}
}

// tracked is one followed worker.
type tracked struct {
	id     uint64
	addr   string
	in     chan *workerv1.KvEventBatch // core mode: batches from the bus
	lost   chan struct{}               // core mode: in overflowed
	cancel context.CancelFunc
	done   chan struct{}
	// last is the last event id applied per dp rank; only the worker's
	// goroutine touches it.
	last map[uint32]uint64
}

func newFollower(mode kvevents.Mode, dc *core.Core, log *slog.Logger, dial grpcclient.Options, interval time.Duration) *follower {
	if interval <= 0 {
		interval = DefaultResyncInterval
	}
	return &follower{mode: mode, core: dc, log: log, dial: dial, interval: interval, workers: map[uint64]*tracked{}}
}

// onInstances starts following new workers and stops following departed
// ones before the core forgets them (so that no late event of a departed
// worker adds it back).
func (f *follower) onInstances(changes []registryclient.Change[*registryv1.Instance]) {
	for _, ch := range changes {
		if ch.Deleted {
			f.stop(ch.Item.InstanceId)
		}
	}
	f.core.OnInstances(changes)
	for _, ch := range changes {
		if !ch.Deleted {
			f.start(ch.Item)
		}
	}
}

func (f *follower) start(in *registryv1.Instance) {
	addr := in.GetMetadata()[wire.MetadataWorkerAPI]
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if t, ok := f.workers[in.InstanceId]; ok && t.addr == addr {
		return
	}
	if addr == "" {
		f.log.Warn("worker registers no worker_api address; its KV events cannot be followed in this mode",
			"instance", fmt.Sprintf("%x", in.InstanceId), "kv_events_mode", string(f.mode))
		return
	}
	if old := f.workers[in.InstanceId]; old != nil {
		old.cancel()
		<-old.done
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tracked{id: in.InstanceId, addr: addr, in: make(chan *workerv1.KvEventBatch, 1024), lost: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{}), last: map[uint32]uint64{}}
	f.workers[in.InstanceId] = t
	go func() {
		defer close(t.done)
		f.run(ctx, t)
	}()
}

func (f *follower) stop(id uint64) {
	f.mu.Lock()
	t := f.workers[id]
	delete(f.workers, id)
	f.mu.Unlock()
	if t != nil {
		t.cancel()
		<-t.done
	}
}

// deliver hands a batch from the eventbus (core mode) to its worker's
// goroutine. A batch of a worker not (yet) followed is dropped: following
// starts with the worker's state, which includes it. A worker whose queue
// is full loses the batch and catches up from its ring.
func (f *follower) deliver(b *workerv1.KvEventBatch) {
	f.mu.Lock()
	t := f.workers[b.GetInstanceId()]
	f.mu.Unlock()
	if t == nil {
		return
	}
	select {
	case t.in <- b:
	default:
		select {
		case t.lost <- struct{}{}:
		default:
		}
	}
}

func (f *follower) close() {
	f.mu.Lock()
	f.closed = true
	ws := f.workers
	f.workers = map[uint64]*tracked{}
	f.mu.Unlock()
	for _, t := range ws {
		t.cancel()
	}
	for _, t := range ws {
		<-t.done
	}
}

// run follows one worker until ctx ends.
func (f *follower) run(ctx context.Context, t *tracked) {
	log := f.log.With("instance", fmt.Sprintf("%x", t.id), "worker_api", t.addr)
	cc, api, err := worker.DialAPI(t.addr, f.dial)
	if err != nil {
		log.Error("cannot dial the worker API; not following its KV events", "err", err.Error())
		return
	}
	defer cc.Close()
	bo := backoff.New(backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second})
	synced := false
	for ctx.Err() == nil {
		if !synced {
			if err := f.rebuild(ctx, t, api); err != nil {
				if ctx.Err() == nil {
					log.Warn("worker state not read; retrying", "err", err.Error())
				}
				if backoff.Sleep(ctx, bo.Next()) != nil {
					return
				}
				continue
			}
			synced = true
			bo.Reset()
		}
		if f.mode == kvevents.Direct {
			err = f.watch(ctx, t, api)
		} else {
			err = f.consume(ctx, t, api)
		}
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.OutOfRange {
			log.Info("the worker's ring no longer reaches the last event applied; rebuilding from its state", "err", err.Error())
			synced = false
			continue
		}
		log.Warn("following the worker's KV events interrupted; resuming from the last event applied", "err", err.Error())
		if backoff.Sleep(ctx, bo.Next()) != nil {
			return
		}
	}
}

// rebuild reads the worker's state and makes the index exactly that.
func (f *follower) rebuild(ctx context.Context, t *tracked, api workerv1.WorkerServiceClient) error {
	return f.resetFromState(ctx, t, api, true, grpc.WaitForReady(true))
}

// resetFromState makes the index the worker's state as GetKvState reads it
// now. It counts as a rebuild when always is set or when the state lists a
// rank: the periodic catch-up of a worker with no events yet reads its state
// every second, and an idle worker must not count a rebuild each time. The
// count comes first, so that whoever sees the index rebuilt sees it counted.
func (f *follower) resetFromState(ctx context.Context, t *tracked, api workerv1.WorkerServiceClient, always bool, opts ...grpc.CallOption) error {
	_, ranks, err := worker.ReadKVState(ctx, api, opts...)
	if err != nil {
		return err
	}
	if always || len(ranks) > 0 {
		f.rebuilds.Add(1)
	}
	for _, r := range ranks {
		f.core.ResetWorker(index.WorkerID{Instance: t.id, DPRank: r.DPRank}, r.EventID, r.Hashes, r.Media)
		t.last[r.DPRank] = r.EventID
	}
	return nil
}

// apply applies a contiguous batch as this worker's (the batch may name
// the worker's newer instance after it registered again; the index keeps
// it under the instance being followed until that one departs).
func (f *follower) apply(t *tracked, b *workerv1.KvEventBatch) {
	n := uint64(len(b.GetEvents()))
	if n == 0 {
		return
	}
	b.InstanceId = t.id
	f.core.ApplyEvents(b)
	t.last[b.DpRank] = max(t.last[b.DpRank], b.FirstEventId+n-1)
}

// watch follows WatchKvEvents from the last ids applied (direct mode).
func (f *follower) watch(ctx context.Context, t *tracked, api workerv1.WorkerServiceClient) error {
	from := make(map[uint32]uint64, len(t.last))
	for r, id := range t.last {
		from[r] = id + 1
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := api.WatchKvEvents(wctx, &workerv1.WatchKvEventsRequest{FromEventIds: from}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for {
		r, err := st.Recv()
		if err != nil {
			return err
		}
		b := r.GetBatch()
		if next := t.last[b.DpRank] + 1; b.FirstEventId > next {
			// A rank the state did not list yet, starting past id 1: its
			// earlier events are only in a rebuild.
			return status.Errorf(codes.OutOfRange, "rank %d starts at event %d, expected %d", b.DpRank, b.FirstEventId, next)
		}
		f.apply(t, b)
	}
}

// consume applies the batches the eventbus delivers (core mode), filling
// gaps from the worker's ring, and checks for a lost tail every interval.
func (f *follower) consume(ctx context.Context, t *tracked, api workerv1.WorkerServiceClient) error {
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b := <-t.in:
			if err := f.fill(ctx, t, api, b.DpRank, b.FirstEventId); err != nil {
				return err
			}
			f.apply(t, b)
		case <-t.lost:
			if err := f.catchUp(ctx, t, api); err != nil {
				return err
			}
		case <-tick.C:
			if err := f.catchUp(ctx, t, api); err != nil {
				return err
			}
		}
	}
}

// fill applies the events of a rank from the next expected id up to (not
// including) upTo from the worker's ring.
func (f *follower) fill(ctx context.Context, t *tracked, api workerv1.WorkerServiceClient, rank uint32, upTo uint64) error {
	for t.last[rank]+1 < upTo {
		from := t.last[rank] + 1
		resp, err := api.GetKvEvents(ctx, &workerv1.GetKvEventsRequest{DpRank: rank, FromEventId: from, MaxEvents: uint32(min(upTo-from, 8192))})
		if err != nil {
			return err
		}
		if len(resp.GetBatch().GetEvents()) == 0 {
			// The worker has nothing past what we applied: the bus
			// delivered an id from the future (a worker that restarted
			// its ids). Its state is the truth.
			return status.Errorf(codes.OutOfRange, "rank %d: event %d announced, the worker's last is %d", rank, upTo, resp.GetLastEventId())
		}
		f.filled.Add(uint64(len(resp.GetBatch().GetEvents())))
		f.apply(t, resp.GetBatch())
	}
	return nil
}

// catchUp applies whatever each known rank has past the last id applied.
func (f *follower) catchUp(ctx context.Context, t *tracked, api workerv1.WorkerServiceClient) error {
	if len(t.last) == 0 {
		// The state read when following began listed no rank (a worker
		// with no events yet): the ranks are only known from its state,
		// so read it again. Asking by the ranks known would ask nothing,
		// and a first batch the bus lost would never be caught up.
		return f.resetFromState(ctx, t, api, false)
	}
	for rank := range t.last {
		for {
			resp, err := api.GetKvEvents(ctx, &workerv1.GetKvEventsRequest{DpRank: rank, FromEventId: t.last[rank] + 1})
			if err != nil {
				return err
			}
			f.filled.Add(uint64(len(resp.GetBatch().GetEvents())))
			f.apply(t, resp.GetBatch())
			if t.last[rank] >= resp.GetLastEventId() {
				break
			}
		}
	}
	// Ranks the worker gained since: a rebuild learns them.
	return nil
}
