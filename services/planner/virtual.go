package planner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// virtual leaves the scaling to an external runner: the planner writes each
// decision to the registry (as it does with every connector), the runner
// carries it out and writes the decision's id to the planner bucket's
// AckKey. Until a decision that changes a pool is acknowledged, or
// AckTimeout passes, the planner decides nothing new.
type virtual struct {
	reg     *registryclient.Client
	timeout time.Duration
	log     *slog.Logger
	now     func() time.Time
	// pending is the id of the last decision that changed a pool and
	// waits for its acknowledgement (0: none), sent when it was applied.
	pending uint64
	sent    time.Time
}

func newVirtual(reg *registryclient.Client, timeout time.Duration, log *slog.Logger) *virtual {
	return &virtual{reg: reg, timeout: timeout, log: log, now: time.Now}
}

func (v *virtual) Apply(_ context.Context, d core.Decision, _ []member) error {
	if d.Changed() {
		v.pending, v.sent = d.ID, v.now()
	}
	return nil
}

func (v *virtual) Starting([]member) map[core.PoolKey]int { return nil }
func (v *virtual) Pinned(*registryv1.Instance) bool       { return false }
func (v *virtual) Draining(uint64) bool                   { return false }
func (v *virtual) Close(context.Context) error            { return nil }

// Ready reads the acknowledgement: ready once it is the pending id or
// later, or when the timeout has passed since the decision.
func (v *virtual) Ready(ctx context.Context) (bool, string) {
	if v.pending == 0 {
		return true, ""
	}
	acked, err := readAck(ctx, v.reg)
	if err != nil {
		v.log.Warn("acknowledgement not readable", "err", err.Error())
	}
	if acked >= v.pending {
		v.log.Info("decision acknowledged", "id", v.pending, "ack", acked)
		v.pending = 0
		return true, ""
	}
	if waited := v.now().Sub(v.sent); waited >= v.timeout {
		v.log.Warn("decision not acknowledged within --ack-timeout: deciding again", "id", v.pending, "ack", acked, "waited", waited.String())
		v.pending = 0
		return true, ""
	}
	return false, fmt.Sprintf("waiting for the acknowledgement of decision %d (acknowledged: %d)", v.pending, acked)
}

// readAck is the id in the planner bucket's AckKey, 0 when there is none.
func readAck(ctx context.Context, reg *registryclient.Client) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := reg.Raw().GetKey(ctx, &registryv1.GetKeyRequest{Bucket: Bucket, Key: AckKey})
	if status.Code(err) == codes.NotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return core.ParseAck(r.GetKv().GetValue())
}
