package registry

import (
	"context"
	"sync"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// kubeFeedLog is how many batches of changes a KubeBackend keeps for
// watches that resume or fall behind; older revisions get a fresh snapshot.
const kubeFeedLog = 1024

// kubeBatch is the changes of one recomputation of the join, all at one
// revision.
type kubeBatch struct {
	rev       int64
	instances []*registryv1.InstanceEvent
	models    []*registryv1.ModelEvent
}

// kubeFeed numbers the join's states with a registry-local revision and
// fans changes out to watches. The counter starts at the process's start
// time in microseconds and grows by one per batch, so a revision from an
// earlier process (or from another replica, which numbers its own) is one
// this process cannot serve: such a resume gets SNAPSHOT_REASON_COMPACTED.
type kubeFeed struct {
	mu      sync.Mutex
	base    int64
	rev     int64
	state   joinState
	log     []kubeBatch
	changed chan struct{} // closed and replaced on every new batch
}

func newKubeFeed() *kubeFeed {
	base := time.Now().UnixMicro()
	return &kubeFeed{
		base:    base,
		rev:     base,
		state:   joinState{instances: map[string]*registryv1.Instance{}, models: map[string]*registryv1.ModelCard{}},
		changed: make(chan struct{}),
	}
}

// publish makes st the current state; a change is a new batch at the next
// revision.
func (f *kubeFeed) publish(st joinState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := f.rev + 1
	b := kubeBatch{rev: next, instances: diffInstances(f.state.instances, st.instances, next), models: diffModels(f.state.models, st.models, next)}
	f.state = st
	if len(b.instances) == 0 && len(b.models) == 0 {
		return
	}
	f.rev = next
	f.log = append(f.log, b)
	if len(f.log) > kubeFeedLog {
		f.log = append([]kubeBatch(nil), f.log[len(f.log)-kubeFeedLog:]...)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *kubeFeed) revision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

// current returns the state and its revision. The state's maps are never
// written after publish, so the caller may read them without the lock.
func (f *kubeFeed) current() (joinState, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.rev
}

// since returns the batches after rev, or ok = false when rev is not one
// this feed can continue from.
func (f *kubeFeed) since(rev int64) (batches []kubeBatch, ok bool) {
	if rev < f.base || rev > f.rev {
		return nil, false
	}
	if rev == f.rev {
		return nil, true
	}
	if len(f.log) == 0 || rev < f.log[0].rev-1 {
		return nil, false
	}
	i := int(rev - (f.log[0].rev - 1))
	return append([]kubeBatch(nil), f.log[i:]...), true
}

// feedUpdate is what a watch sends next: a snapshot, or batches.
type feedUpdate struct {
	snapshot bool
	reason   registryv1.SnapshotReason
	state    joinState
	batches  []kubeBatch
	rev      int64
}

// follow runs one watch: a snapshot unless resume can be served, then the
// batches as they come; a watch that falls further behind than the log gets
// a COMPACTED snapshot. It returns when ctx ends, stop closes or send fails.
func (f *kubeFeed) follow(ctx context.Context, resume int64, stop <-chan struct{}, send func(feedUpdate) error) error {
	next := func(from int64, first bool) (feedUpdate, <-chan struct{}) {
		f.mu.Lock()
		defer f.mu.Unlock()
		u := feedUpdate{rev: f.rev}
		switch batches, ok := f.since(from); {
		case first && from == 0:
			u.snapshot, u.reason, u.state = true, registryv1.SnapshotReason_SNAPSHOT_REASON_INITIAL, f.state
		case !ok:
			u.snapshot, u.reason, u.state = true, registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED, f.state
		default:
			u.batches = batches
		}
		return u, f.changed
	}
	u, changed := next(resume, true)
	for {
		if u.snapshot || len(u.batches) > 0 {
			if err := send(u); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return context.Canceled
		case <-changed:
		}
		u, changed = next(u.rev, false)
	}
}

// WatchInstances streams the ready instances that match filter.
func (k *KubeBackend) WatchInstances(ctx context.Context, filter *registryv1.InstanceFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchInstancesResponse) error) error {
	keep := func(in *registryv1.Instance) bool { return matchInstance(filter, in) }
	return k.feed.follow(ctx, resume, stop, func(u feedUpdate) error {
		if u.snapshot {
			return send(&registryv1.WatchInstancesResponse{Kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT,
				SnapshotReason: u.reason, Instances: sortedValues(u.state.instances, keep), Revision: u.rev})
		}
		sent := int64(0)
		for _, b := range u.batches {
			var evs []*registryv1.InstanceEvent
			for _, e := range b.instances {
				if keep(e.Instance) {
					evs = append(evs, e)
				}
			}
			if len(evs) == 0 {
				continue
			}
			if err := send(&registryv1.WatchInstancesResponse{Kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS, Events: evs, Revision: b.rev}); err != nil {
				return err
			}
			sent = b.rev
		}
		if sent == u.rev {
			return nil
		}
		return send(&registryv1.WatchInstancesResponse{Kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_PROGRESS, Revision: u.rev})
	})
}

// WatchModels streams the model cards of ready instances that match filter.
func (k *KubeBackend) WatchModels(ctx context.Context, filter *registryv1.ModelFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchModelsResponse) error) error {
	keep := func(c *registryv1.ModelCard) bool { return matchModel(filter, c) }
	return k.feed.follow(ctx, resume, stop, func(u feedUpdate) error {
		if u.snapshot {
			return send(&registryv1.WatchModelsResponse{Kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT,
				SnapshotReason: u.reason, Cards: sortedValues(u.state.models, keep), Revision: u.rev})
		}
		sent := int64(0)
		for _, b := range u.batches {
			var evs []*registryv1.ModelEvent
			for _, e := range b.models {
				if keep(e.Card) {
					evs = append(evs, e)
				}
			}
			if len(evs) == 0 {
				continue
			}
			if err := send(&registryv1.WatchModelsResponse{Kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS, Events: evs, Revision: b.rev}); err != nil {
				return err
			}
			sent = b.rev
		}
		if sent == u.rev {
			return nil
		}
		return send(&registryv1.WatchModelsResponse{Kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_PROGRESS, Revision: u.rev})
	})
}
