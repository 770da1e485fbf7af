package registry

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
)

// watchBatch is one message of a prefix watch, before it is typed.
type watchBatch struct {
	kind     registryv1.WatchResponseKind
	reason   registryv1.SnapshotReason
	kvs      []*mvccpb.KeyValue // SNAPSHOT: the whole state
	events   []*clientv3.Event  // EVENTS: the changes, in order
	revision int64
}

// Watch streams a prefix to send: a snapshot (unless resume > 0), then every
// change after it, and progress notifications so an idle client's resume
// revision stays fresh. When the resume revision was compacted away, or the
// etcd watch itself reports compaction, it sends a fresh snapshot marked
// SNAPSHOT_REASON_COMPACTED and carries on from there: never a silent gap.
// A broken etcd watch (leader loss, etcd restart) is reopened from the last
// revision sent, so no event is lost or repeated. It returns when ctx ends,
// stop closes, or send fails.
func (s *Store) Watch(ctx context.Context, prefix string, resume int64, stop <-chan struct{}, send func(*watchBatch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	rev := resume
	snapshot := func(reason registryv1.SnapshotReason) error {
		sctx, cancel := context.WithTimeout(ctx, DefaultStoreTimeout)
		resp, err := s.cli.Get(sctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		cancel()
		if err != nil {
			return etcdErr("watch snapshot", err)
		}
		rev = resp.Header.Revision
		return send(&watchBatch{kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT, reason: reason, kvs: resp.Kvs, revision: rev})
	}
	if rev <= 0 {
		if err := snapshot(registryv1.SnapshotReason_SNAPSHOT_REASON_INITIAL); err != nil {
			return err
		}
	}
	bo := backoff.New(backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second})
	for {
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
		compacted, err := s.pump(wch, &rev, send)
		wcancel()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if compacted {
			if err := snapshot(registryv1.SnapshotReason_SNAPSHOT_REASON_COMPACTED); err != nil {
				return err
			}
			bo.Reset()
			continue
		}
		// The etcd watch ended on its own (no leader, etcd restarting): reopen
		// from the last revision sent, after a short pause.
		if err := bo.Wait(ctx); err != nil {
			return err
		}
	}
}

// pump forwards one etcd watch channel until it closes. It reports whether
// the watch ended because the revision was compacted.
func (s *Store) pump(wch clientv3.WatchChan, rev *int64, send func(*watchBatch) error) (compacted bool, err error) {
	for wr := range wch {
		if wr.CompactRevision != 0 {
			return true, nil
		}
		if wr.Canceled {
			return false, nil
		}
		if wr.IsProgressNotify() {
			if wr.Header.Revision > *rev {
				*rev = wr.Header.Revision
				if err := send(&watchBatch{kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_PROGRESS, revision: *rev}); err != nil {
					return false, err
				}
			}
			continue
		}
		if len(wr.Events) == 0 {
			continue
		}
		// Resume from the last event's revision, not the header's: a batch
		// may be one fragment of a larger revision range.
		last := wr.Events[len(wr.Events)-1].Kv.ModRevision
		if last <= *rev {
			continue
		}
		*rev = last
		if err := send(&watchBatch{kind: registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS, events: wr.Events, revision: last}); err != nil {
			return false, fmt.Errorf("send watch events: %w", err)
		}
	}
	return false, nil
}

func instancePrefix(f *registryv1.InstanceFilter) string {
	return filterPrefix(servicesPrefix, f.GetNamespace(), f.GetComponent(), f.GetEndpoint())
}

// instanceEvent types one etcd event of the instance prefix. A DELETE only
// has the key, which holds every name and the id.
func instanceEvent(ev *clientv3.Event) (*registryv1.InstanceEvent, bool) {
	out := &registryv1.InstanceEvent{Revision: ev.Kv.ModRevision}
	if ev.Type == clientv3.EventTypeDelete {
		ns, comp, ep, id, err := parseEndpointKey(servicesPrefix, string(ev.Kv.Key))
		if err != nil {
			return nil, false
		}
		out.Type = registryv1.EventType_EVENT_TYPE_DELETE
		out.Instance = &registryv1.Instance{Namespace: ns, Component: comp, Endpoint: ep, InstanceId: id}
		return out, true
	}
	in, err := decodeInstance(ev.Kv.Value)
	if err != nil {
		return nil, false
	}
	out.Type = registryv1.EventType_EVENT_TYPE_PUT
	out.Instance = in
	return out, true
}

// WatchInstances streams the instances that match f.
func (s *Store) WatchInstances(ctx context.Context, f *registryv1.InstanceFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchInstancesResponse) error) error {
	return s.Watch(ctx, instancePrefix(f), resume, stop, func(b *watchBatch) error {
		out := &registryv1.WatchInstancesResponse{Kind: b.kind, SnapshotReason: b.reason, Revision: b.revision}
		for _, kv := range b.kvs {
			if in, err := decodeInstance(kv.Value); err == nil {
				out.Instances = append(out.Instances, in)
			}
		}
		for _, ev := range b.events {
			if e, ok := instanceEvent(ev); ok {
				out.Events = append(out.Events, e)
			}
		}
		return send(out)
	})
}

// WatchModels streams the model cards that match f.
func (s *Store) WatchModels(ctx context.Context, f *registryv1.ModelFilter, resume int64, stop <-chan struct{}, send func(*registryv1.WatchModelsResponse) error) error {
	name := f.GetModelName()
	match := func(c *registryv1.ModelCard) bool { return name == "" || c.ModelName == name }
	return s.Watch(ctx, filterPrefix(modelsPrefix, f.GetNamespace()), resume, stop, func(b *watchBatch) error {
		out := &registryv1.WatchModelsResponse{Kind: b.kind, SnapshotReason: b.reason, Revision: b.revision}
		for _, kv := range b.kvs {
			if c, err := decodeCard(kv.Value); err == nil && match(c) {
				out.Cards = append(out.Cards, c)
			}
		}
		for _, ev := range b.events {
			e := &registryv1.ModelEvent{Revision: ev.Kv.ModRevision, Type: registryv1.EventType_EVENT_TYPE_PUT}
			val := ev.Kv.Value
			if ev.Type == clientv3.EventTypeDelete {
				e.Type = registryv1.EventType_EVENT_TYPE_DELETE
				if ev.PrevKv == nil {
					continue
				}
				val = ev.PrevKv.Value
			}
			c, err := decodeCard(val)
			if err != nil || !match(c) {
				continue
			}
			e.Card = c
			out.Events = append(out.Events, e)
		}
		if b.kind == registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS && len(out.Events) == 0 {
			out.Kind = registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_PROGRESS
		}
		return send(out)
	})
}

// WatchKeys streams a bucket's keys under prefix.
func (s *Store) WatchKeys(ctx context.Context, bucket, prefix string, resume int64, stop <-chan struct{}, send func(*registryv1.WatchKeysResponse) error) error {
	if err := s.checkBucket(ctx, bucket); err != nil {
		return err
	}
	return s.Watch(ctx, bucketKey(bucket, prefix), resume, stop, func(b *watchBatch) error {
		out := &registryv1.WatchKeysResponse{Kind: b.kind, SnapshotReason: b.reason, Revision: b.revision}
		for _, kv := range b.kvs {
			out.Kvs = append(out.Kvs, toKV(bucket, kv))
		}
		for _, ev := range b.events {
			e := &registryv1.KeyEvent{Revision: ev.Kv.ModRevision, Type: registryv1.EventType_EVENT_TYPE_PUT, Kv: toKV(bucket, ev.Kv)}
			if ev.Type == clientv3.EventTypeDelete {
				e.Type = registryv1.EventType_EVENT_TYPE_DELETE
				e.Kv = &registryv1.KeyValue{Key: e.Kv.Key}
			}
			out.Events = append(out.Events, e)
		}
		return send(out)
	})
}
