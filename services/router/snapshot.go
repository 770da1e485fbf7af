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

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// loadSnapshot fetches the latest snapshot; a missing one is a cold start.
func loadSnapshot(ctx context.Context, bus *eventbusclient.Client) (*routerv1.IndexSnapshot, error) {
	var buf bytes.Buffer
	if _, err := bus.GetObject(ctx, wire.SnapshotBucket, wire.SnapshotObject, &buf); err != nil {
		// No bucket yet, or no object in it: no router stored one.
		if status.Code(err) == codes.NotFound {
			return nil, nil
		}
		return nil, err
	}
	s := &routerv1.IndexSnapshot{}
	if err := proto.Unmarshal(buf.Bytes(), s); err != nil {
		return nil, fmt.Errorf("%w: %w", errSnapshotCorrupt, err)
	}
	return s, nil
}

// snapshotLoop stores a snapshot every interval while the index changes.
func snapshotLoop(ctx context.Context, bus *eventbusclient.Client, c *core.Core, cons *consumer, interval time.Duration, log *slog.Logger) {
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
		data, err := proto.Marshal(c.Snapshot(seqs))
		if err != nil {
			log.Error("snapshot does not encode", "err", err.Error())
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = bus.PutObject(pctx, wire.SnapshotBucket, wire.SnapshotObject, bytes.NewReader(data), eventbusclient.PutObjectOptions{Description: "router KV index snapshot"})
		cancel()
		if err != nil {
			log.Warn("snapshot not stored", "err", err.Error())
			continue
		}
		last = seqs
		cons.metrics.snapshotted(time.Now())
		log.Debug("index snapshot stored", "bytes", len(data), "sequences", seqs)
	}
}
