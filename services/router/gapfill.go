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
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// gapFillTimeout bounds one call to a worker's WorkerService while filling a
// gap: the consumer of the namespace waits for it.
const gapFillTimeout = 5 * time.Second

// gapFiller fills gaps in the KV events the stream delivers (jetstream
// mode) from the workers themselves: before a batch whose first event id is
// past the next one expected for its worker is applied, the missing events
// are read from the worker's ring (WorkerService GetKvEvents) and applied
// first; when the ring no longer has them, the worker's view is rebuilt
// from its state (GetKvState). The index applies a worker's events in id
// order and drops what comes late, so an unfilled gap would leave the index
// wrong until the worker clears its cache.
//
// The stream itself can hold a worker's events out of order: the eventbus
// pipelines a worker's batches to JetStream, and when a replicated stream's
// leader dies, the batches in flight to it are lost while a later batch,
// delayed past the election, reaches the new leader and is stored; the lost
// ones are stored when they are sent again (same msg ids) after their
// acknowledgement timed out, after the later one (seen on a 3-node cluster:
// event 241 stored before 226..240). A worker SDK that could not publish for
// longer than it buffers leaves a gap too (pkg/worker).
type gapFiller struct {
	core *core.Core
	log  *slog.Logger
	dial grpcclient.Options

	mu sync.Mutex
	// addrs has every instance the registry lists, with its worker_api
	// address ("" when it registered none).
	addrs   map[uint64]string
	clients map[uint64]*workerClient
	closed  bool

	filled, rebuilds, unfilled atomic.Uint64
}

// workerClient is a connection to one worker's WorkerService.
type workerClient struct {
	addr string
	cc   *grpc.ClientConn
	api  workerv1.WorkerServiceClient
}

func newGapFiller(dc *core.Core, log *slog.Logger, dial grpcclient.Options) *gapFiller {
	return &gapFiller{core: dc, log: log, dial: dial, addrs: map[uint64]string{}, clients: map[uint64]*workerClient{}}
}

// onInstances learns the workers' WorkerService addresses.
func (g *gapFiller) onInstances(changes []registryclient.Change[*registryv1.Instance]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ch := range changes {
		id := ch.Item.GetInstanceId()
		addr := ch.Item.GetMetadata()[wire.MetadataWorkerAPI]
		if ch.Deleted {
			delete(g.addrs, id)
		} else {
			g.addrs[id] = addr
		}
		if c := g.clients[id]; c != nil && (ch.Deleted || c.addr != addr) {
			_ = c.cc.Close()
			delete(g.clients, id)
		}
	}
}

// client is the WorkerService of an instance, dialled on first use; nil
// when the instance registered none, and listed false when the registry does
// not list it (departed, or not known yet).
func (g *gapFiller) client(id uint64) (api workerv1.WorkerServiceClient, addr string, listed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, "", false
	}
	if c := g.clients[id]; c != nil {
		return c.api, c.addr, true
	}
	addr, listed = g.addrs[id]
	if addr == "" {
		return nil, "", listed
	}
	cc, api, err := worker.DialAPI(addr, g.dial)
	if err != nil {
		g.log.Warn("cannot dial the worker API to fill a gap in its KV events", "instance", fmt.Sprintf("%x", id), "worker_api", addr, "err", err.Error())
		return nil, addr, true
	}
	g.clients[id] = &workerClient{addr: addr, cc: cc, api: api}
	return api, addr, true
}

// before is called with each batch from the stream before it is applied:
// it fills the gap in front of it, if there is one.
func (g *gapFiller) before(ctx context.Context, b *workerv1.KvEventBatch) {
	if b.GetFirstEventId() == 0 || len(b.GetEvents()) == 0 {
		return
	}
	w := index.WorkerID{Instance: b.GetInstanceId(), DPRank: b.GetDpRank()}
	last := g.core.LastEvent(w)
	if last == 0 || b.GetFirstEventId() <= last+1 {
		// In order, a duplicate, or the first event seen of the worker.
		return
	}
	missing := b.GetFirstEventId() - last - 1
	log := g.log.With("instance", fmt.Sprintf("%x", w.Instance), "dp_rank", w.DPRank, "from_event_id", last+1, "to_event_id", b.GetFirstEventId()-1)
	api, addr, listed := g.client(w.Instance)
	if !listed {
		// A departed worker (its blocks go with it), or one the watch has
		// not shown yet.
		log.Debug("gap in the KV events of an instance the registry does not list; applying past it")
		return
	}
	if api == nil {
		g.unfilled.Add(missing)
		log.Warn("gap in a worker's KV events, and no worker API to fill it from; applying past it", "worker_api", addr)
		return
	}
	err := g.fill(ctx, api, w, b.GetFirstEventId())
	if status.Code(err) == codes.OutOfRange {
		log.Info("the worker's ring no longer holds the missing KV events; rebuilding from its state", "err", err.Error())
		err = g.rebuild(ctx, api, w.Instance)
	}
	if err != nil {
		if left := b.GetFirstEventId() - 1 - min(g.core.LastEvent(w), b.GetFirstEventId()-1); left > 0 {
			g.unfilled.Add(left)
		}
		log.Warn("gap in a worker's KV events not filled; applying past it", "err", err.Error())
		return
	}
	log.Debug("gap in a worker's KV events filled from its ring", "events", missing)
}

// fill applies worker w's events from the next expected id up to (not
// including) upTo, read from its ring.
func (g *gapFiller) fill(ctx context.Context, api workerv1.WorkerServiceClient, w index.WorkerID, upTo uint64) error {
	for {
		from := g.core.LastEvent(w) + 1
		if from >= upTo {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, gapFillTimeout)
		resp, err := api.GetKvEvents(cctx, &workerv1.GetKvEventsRequest{DpRank: w.DPRank, FromEventId: from, MaxEvents: uint32(min(upTo-from, 8192))})
		cancel()
		if err != nil {
			return err
		}
		fb := resp.GetBatch()
		if fb.GetInstanceId() != w.Instance {
			// The worker registered again since: its ring holds another
			// instance's events, and this one is on its way out.
			return fmt.Errorf("the worker is instance %x now", fb.GetInstanceId())
		}
		if len(fb.GetEvents()) == 0 {
			return status.Errorf(codes.OutOfRange, "rank %d: event %d announced, the worker's last is %d", w.DPRank, upTo, resp.GetLastEventId())
		}
		if n := upTo - fb.GetFirstEventId(); uint64(len(fb.Events)) > n {
			fb.Events = fb.Events[:n]
		}
		g.filled.Add(uint64(len(fb.GetEvents()))) // first, as in rebuild
		g.core.ApplyEvents(fb)
	}
}

// rebuild replaces the instance's blocks in the index with its state.
func (g *gapFiller) rebuild(ctx context.Context, api workerv1.WorkerServiceClient, id uint64) error {
	cctx, cancel := context.WithTimeout(ctx, gapFillTimeout)
	defer cancel()
	instance, ranks, err := worker.ReadKVState(cctx, api)
	if err != nil {
		return err
	}
	if instance != id {
		return fmt.Errorf("the worker is instance %x now", instance)
	}
	// Counted first: whoever sees the rebuilt index (a test's stats) sees
	// the rebuild counted too.
	g.rebuilds.Add(1)
	for _, r := range ranks {
		g.core.ResetWorker(index.WorkerID{Instance: id, DPRank: r.DPRank}, r.EventID, r.Hashes, r.Media)
	}
	return nil
}

func (g *gapFiller) stats() FollowStats {
	if g == nil {
		return FollowStats{}
	}
	return FollowStats{Filled: g.filled.Load(), Rebuilds: g.rebuilds.Load(), Unfilled: g.unfilled.Load()}
}

func (g *gapFiller) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for id, c := range g.clients {
		_ = c.cc.Close()
		delete(g.clients, id)
	}
}
