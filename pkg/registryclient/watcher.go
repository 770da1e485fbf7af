package registryclient

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
)

// Change is one difference a watcher applied to its map.
type Change[T any] struct {
	// Deleted is true when the item left; Item then has only its identity.
	Deleted bool
	Item    T
}

// Watcher keeps a live map of registry items (instances or model cards): it
// loads a snapshot, applies events, and after any disconnect resumes from
// the last revision it saw, so no change is lost or applied twice. When the
// registry answers with a compaction snapshot, the map is replaced and the
// differences are reported as changes.
type Watcher[T proto.Message] struct {
	open   func(ctx context.Context, rev int64) (recvFunc[T], error)
	key    func(T) string
	log    *slog.Logger
	onChg  func([]Change[T])
	mu     sync.RWMutex
	items  map[string]T
	rev    int64
	ready  chan struct{}
	notify chan struct{}
	cancel context.CancelFunc
	exited chan struct{}
	once   sync.Once
}

// WatchOptions tune a watcher.
type WatchOptions[T any] struct {
	// OnChange, when set, is called with each batch of changes, in order,
	// from the watcher's goroutine.
	OnChange func([]Change[T])
	// Logger receives reconnects; nil discards.
	Logger *slog.Logger
}

// batch is one watch response, typed.
type batch[T any] struct {
	snapshot bool
	reason   registryv1.SnapshotReason
	items    []T
	events   []Change[T]
	revision int64
}

type recvFunc[T any] func() (*batch[T], error)

// WatchInstances starts a watcher of the instances that match filter.
func WatchInstances(c *Client, filter *registryv1.InstanceFilter, opts WatchOptions[*registryv1.Instance]) *Watcher[*registryv1.Instance] {
	open := func(ctx context.Context, rev int64) (recvFunc[*registryv1.Instance], error) {
		st, err := c.rpc.WatchInstances(ctx, &registryv1.WatchInstancesRequest{Filter: filter, ResumeRevision: rev})
		if err != nil {
			return nil, err
		}
		return func() (*batch[*registryv1.Instance], error) {
			r, err := st.Recv()
			if err != nil {
				return nil, err
			}
			b := &batch[*registryv1.Instance]{snapshot: r.Kind == registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT, reason: r.SnapshotReason, items: r.Instances, revision: r.Revision}
			for _, e := range r.Events {
				b.events = append(b.events, Change[*registryv1.Instance]{Deleted: e.Type == registryv1.EventType_EVENT_TYPE_DELETE, Item: e.Instance})
			}
			return b, nil
		}, nil
	}
	return newWatcher(open, InstanceKey, opts)
}

// WatchModels starts a watcher of the model cards that match filter.
func WatchModels(c *Client, filter *registryv1.ModelFilter, opts WatchOptions[*registryv1.ModelCard]) *Watcher[*registryv1.ModelCard] {
	open := func(ctx context.Context, rev int64) (recvFunc[*registryv1.ModelCard], error) {
		st, err := c.rpc.WatchModels(ctx, &registryv1.WatchModelsRequest{Filter: filter, ResumeRevision: rev})
		if err != nil {
			return nil, err
		}
		return func() (*batch[*registryv1.ModelCard], error) {
			r, err := st.Recv()
			if err != nil {
				return nil, err
			}
			b := &batch[*registryv1.ModelCard]{snapshot: r.Kind == registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT, reason: r.SnapshotReason, items: r.Cards, revision: r.Revision}
			for _, e := range r.Events {
				b.events = append(b.events, Change[*registryv1.ModelCard]{Deleted: e.Type == registryv1.EventType_EVENT_TYPE_DELETE, Item: e.Card})
			}
			return b, nil
		}, nil
	}
	key := func(c *registryv1.ModelCard) string {
		return c.Namespace + "/" + c.Component + "/" + c.Endpoint + "/" + strconv.FormatUint(c.InstanceId, 16)
	}
	return newWatcher(open, key, opts)
}

// InstanceKey identifies an instance: its names and id, as in its etcd key.
func InstanceKey(in *registryv1.Instance) string {
	return in.Namespace + "/" + in.Component + "/" + in.Endpoint + "/" + strconv.FormatUint(in.InstanceId, 16)
}

func newWatcher[T proto.Message](open func(context.Context, int64) (recvFunc[T], error), key func(T) string, opts WatchOptions[T]) *Watcher[T] {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher[T]{
		open:   open,
		key:    key,
		log:    log,
		onChg:  opts.OnChange,
		items:  map[string]T{},
		ready:  make(chan struct{}),
		notify: make(chan struct{}, 1),
		cancel: cancel,
		exited: make(chan struct{}),
	}
	go w.run(ctx)
	return w
}

// Ready is closed once the first snapshot is applied and OnChange has
// returned from it.
func (w *Watcher[T]) Ready() <-chan struct{} { return w.ready }

// Changed receives a value (coalesced) after each applied batch that changed
// the map.
func (w *Watcher[T]) Changed() <-chan struct{} { return w.notify }

// Revision is the last registry revision applied.
func (w *Watcher[T]) Revision() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.rev
}

// Items returns the current items, ordered by key.
func (w *Watcher[T]) Items() []T {
	w.mu.RLock()
	keys := make([]string, 0, len(w.items))
	for k := range w.items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = w.items[k]
	}
	w.mu.RUnlock()
	return out
}

// WaitReady waits for the first snapshot, until OnChange has returned from
// it, or for ctx.
func (w *Watcher[T]) WaitReady(ctx context.Context) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("discovery: waiting for the first snapshot: %w", ctx.Err())
	}
}

// Close stops the watcher and waits for its goroutine.
func (w *Watcher[T]) Close() {
	w.cancel()
	<-w.exited
}

func (w *Watcher[T]) run(ctx context.Context) {
	defer close(w.exited)
	bo := backoff.New(backoff.Policy{Min: minBackoff, Max: maxBackoff})
	for {
		recv, err := w.open(ctx, w.Revision())
		if err == nil {
			for {
				var b *batch[T]
				b, err = recv()
				if err != nil {
					break
				}
				w.apply(b)
				bo.Reset()
			}
		}
		if ctx.Err() != nil {
			return
		}
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.Unimplemented {
			w.log.Error("registry refused the watch; not retrying", "err", err.Error())
			return
		}
		wait := bo.Next()
		w.log.Warn("registry watch broken; resuming", "err", err.Error(), "revision", w.Revision(), "backoff", wait.String())
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}

func (w *Watcher[T]) apply(b *batch[T]) {
	var changes []Change[T]
	w.mu.Lock()
	if b.snapshot {
		next := make(map[string]T, len(b.items))
		for _, it := range b.items {
			k := w.key(it)
			next[k] = it
			if old, ok := w.items[k]; !ok || !proto.Equal(old, it) {
				changes = append(changes, Change[T]{Item: it})
			}
		}
		for k, old := range w.items {
			if _, ok := next[k]; !ok {
				changes = append(changes, Change[T]{Deleted: true, Item: old})
			}
		}
		w.items = next
		if b.reason == registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED {
			w.log.Warn("registry history was compacted; state replaced by a fresh snapshot", "revision", b.revision)
		}
	}
	for _, e := range b.events {
		k := w.key(e.Item)
		if e.Deleted {
			if old, ok := w.items[k]; ok {
				delete(w.items, k)
				changes = append(changes, Change[T]{Deleted: true, Item: old})
			}
			continue
		}
		w.items[k] = e.Item
		changes = append(changes, e)
	}
	if b.revision > w.rev {
		w.rev = b.revision
	}
	w.mu.Unlock()
	if len(changes) > 0 {
		if w.onChg != nil {
			w.onChg(changes)
		}
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	// Ready only once OnChange has the snapshot: a caller that acts on
	// WaitReady (the router drops restored workers the registry does not
	// list) must see the state OnChange built, not the state before it.
	if b.snapshot {
		w.once.Do(func() { close(w.ready) })
	}
}

func cloneInstance(in *registryv1.Instance) *registryv1.Instance {
	return proto.Clone(in).(*registryv1.Instance)
}
