package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// departed keeps the JetStream plane's index to the workers the registry
// lists. The stream retains the events of workers that have left: a router
// that starts (or restarts) replays them, and a worker's last batches can
// arrive after the registry's DELETE has removed its blocks. Either way the
// index would hold blocks of an instance nobody routes to, until nothing.
//
// A batch of an instance the router's registry watch does not list is
// applied (it may come from a worker that registered a moment ago, whose
// PUT the watch has not delivered yet) and the instance is then checked with
// the registry itself. When the registry answers that it does not list it,
// its blocks are dropped and its later batches skipped: instance ids are
// lease ids, never reused, and a worker registers before it publishes, so a
// batch of an instance the registry no longer lists can only be a departed
// worker's. A registry that cannot be reached decides nothing: the check is
// retried with backoff.
type departed struct {
	core *core.Core
	log  *slog.Logger
	// listed asks the registry which instances it lists in namespace ns.
	listed func(ctx context.Context, ns string) (map[uint64]bool, error)

	// mu is held for reading while a batch is applied and for writing
	// while an instance is marked gone and dropped, so that no batch of it
	// is applied after its drop.
	mu   sync.RWMutex
	gone map[uint64]bool

	qmu     sync.Mutex
	pending map[uint64]string // instance -> namespace, to check
	wake    chan struct{}

	// dropped counts instances dropped; skipped counts batches skipped.
	dropped, skipped atomic.Uint64
}

func newDeparted(dc *core.Core, log *slog.Logger, listed func(context.Context, string) (map[uint64]bool, error)) *departed {
	return &departed{core: dc, log: log, listed: listed, gone: map[uint64]bool{}, pending: map[uint64]string{}, wake: make(chan struct{}, 1)}
}

// apply applies b, a KV event batch of namespace ns, unless its instance is
// known to be gone, and queues a check of an instance the watch does not list.
func (d *departed) apply(ns string, b *workerv1.KvEventBatch) {
	id := b.GetInstanceId()
	d.mu.RLock()
	if d.gone[id] {
		d.mu.RUnlock()
		d.skipped.Add(1)
		return
	}
	d.core.ApplyEvents(b)
	d.mu.RUnlock()
	if d.core.Listed(id) {
		return
	}
	d.qmu.Lock()
	if _, ok := d.pending[id]; !ok {
		d.pending[id] = ns
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	d.qmu.Unlock()
}

// run checks queued instances with the registry until ctx ends.
func (d *departed) run(ctx context.Context) {
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-retry:
		}
		retry = nil
		d.qmu.Lock()
		todo := make(map[uint64]string, len(d.pending))
		for id, ns := range d.pending {
			todo[id] = ns
		}
		d.qmu.Unlock()
		// One list per namespace answers every instance queued meanwhile: a
		// fleet starting at once publishes before the watch lists it, and a
		// list per instance would cost the registry the whole namespace
		// once per worker.
		byNS := map[string][]uint64{}
		for id, ns := range todo {
			byNS[ns] = append(byNS[ns], id)
		}
		failed := false
		for ns, ids := range byNS {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			listed, err := d.listed(cctx, ns)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failed = true
				continue
			}
			d.settle(ns, ids, listed)
		}
		if failed {
			wait := bo.Next()
			d.log.Warn("cannot ask the registry about instances that sent KV events; retrying", "backoff", wait.String())
			retry = time.After(wait)
		} else {
			bo.Reset()
		}
	}
}

// settle drops the instances of ids that namespace ns does not list (listed
// is the registry's answer) and takes every one of ids off the queue.
func (d *departed) settle(ns string, ids []uint64, listed map[uint64]bool) {
	for _, id := range ids {
		if !listed[id] {
			d.mu.Lock()
			d.gone[id] = true
			d.core.DropUnlisted(id)
			d.mu.Unlock()
			d.dropped.Add(1)
			d.log.Info("KV events of a worker the registry does not list are dropped", "instance", fmt.Sprintf("%x", id), "namespace", ns)
		}
		d.qmu.Lock()
		delete(d.pending, id)
		d.qmu.Unlock()
	}
}
