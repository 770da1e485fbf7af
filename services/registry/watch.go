package registry

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
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
		resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
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
	backoff := 50 * time.Millisecond
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
			backoff = 50 * time.Millisecond
			continue
		}
		// The etcd watch ended on its own (no leader, etcd restarting): reopen
		// from the last revision sent, after a short pause.
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
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
