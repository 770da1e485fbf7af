package router

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbus"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Where snapshots live in the eventbus object store. Every router replica
// consumes the same events, so any replica's snapshot serves them all.
const (
	SnapshotBucket = "router-snapshots"
	SnapshotObject = "kv-index"
)

// Snapshot captures the index and the stream sequences it covers. The
// sequences are read before the index, so the index covers at least them;
// events replayed past them that it already holds are dropped as duplicates
// by their event ids.
func (c *Core) Snapshot(seqs map[string]uint64) *routerv1.IndexSnapshot {
	s := &routerv1.IndexSnapshot{StreamSequences: seqs, TakenAt: timestamppb.New(c.now())}
	for _, d := range c.idx.Dump() {
		s.Workers = append(s.Workers, &routerv1.IndexSnapshotWorker{InstanceId: d.ID.Instance, DpRank: d.ID.DPRank, LastEventId: d.LastEvent, BlockHashes: d.Hashes})
	}
	return s
}

// Restore loads a snapshot into the index.
func (c *Core) Restore(s *routerv1.IndexSnapshot) {
	dumps := make([]index.WorkerDump, len(s.GetWorkers()))
	for i, w := range s.GetWorkers() {
		dumps[i] = index.WorkerDump{ID: index.WorkerID{Instance: w.InstanceId, DPRank: w.DpRank}, LastEvent: w.LastEventId, Hashes: w.BlockHashes}
	}
	c.idx.Restore(dumps)
	c.mu.Lock()
	c.restoredAt = s.GetTakenAt()
	c.mu.Unlock()
}

// DropDeparted forgets indexed workers the registry does not list: a
// snapshot may name workers that left while the router was down.
func (c *Core) DropDeparted() {
	c.mu.Lock()
	var gone []uint64
	for _, w := range c.idx.Workers() {
		if _, live := c.refs[w.Instance]; !live {
			gone = append(gone, w.Instance)
		}
	}
	c.mu.Unlock()
	for _, id := range gone {
		c.removeInstance(id)
	}
}

// loadSnapshot fetches the latest snapshot; a missing one is a cold start.
func loadSnapshot(ctx context.Context, bus *eventbus.Client) (*routerv1.IndexSnapshot, error) {
	var buf bytes.Buffer
	if _, err := bus.GetObject(ctx, SnapshotBucket, SnapshotObject, &buf); err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, nil
		}
		return nil, err
	}
	s := &routerv1.IndexSnapshot{}
	if err := proto.Unmarshal(buf.Bytes(), s); err != nil {
		return nil, fmt.Errorf("router: snapshot does not decode: %w", err)
	}
	return s, nil
}

// snapshotLoop stores a snapshot every interval while the index changes.
func snapshotLoop(ctx context.Context, bus *eventbus.Client, core *Core, cons *consumer, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last map[string]uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seqs := cons.sequences()
		if len(seqs) == 0 || maps.Equal(seqs, last) {
			continue
		}
		data, err := proto.Marshal(core.Snapshot(seqs))
		if err != nil {
			log.Error("snapshot does not encode", "err", err.Error())
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = bus.PutObject(pctx, SnapshotBucket, SnapshotObject, bytes.NewReader(data), eventbus.PutObjectOptions{Description: "router KV index snapshot"})
		cancel()
		if err != nil {
			log.Warn("snapshot not stored", "err", err.Error())
			continue
		}
		last = seqs
		log.Debug("index snapshot stored", "bytes", len(data), "sequences", seqs)
	}
}
