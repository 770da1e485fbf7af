package planner

import (
	"context"
	"fmt"
	"log/slog"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// Connector carries decisions out on a platform. The planner calls it
// from its one loop goroutine.
type Connector interface {
	// Apply carries out d: workers started for the pools under their
	// target, and the workers d names to drain set draining, then
	// stopped once their running requests are done. ms are the registered
	// workers d was made from.
	Apply(ctx context.Context, d core.Decision, ms []member) error
	// Starting counts, per pool, the workers started and not registered
	// yet among ms (a started worker counts once registered).
	Starting(ms []member) map[core.PoolKey]int
	// Pinned says the connector cannot stop this worker: the planner
	// never chooses it to go.
	Pinned(in *registryv1.Instance) bool
	// Draining says the worker is being drained: it no longer counts in
	// its pool.
	Draining(id uint64) bool
	// Ready says whether the platform is ready for another decision, and
	// why not.
	Ready(ctx context.Context) (bool, string)
	// Close stops what the connector started, draining it.
	Close(ctx context.Context) error
}

// newConnector returns the connector --connector names.
func newConnector(cfg Config, reg *registryclient.Client, log *slog.Logger) (Connector, error) {
	switch cfg.Connector {
	case "local":
		return newLocal(cfg.Local, log), nil
	case "virtual":
		return newVirtual(reg, cfg.AckTimeout, log), nil
	case "kubernetes":
		return newKube(cfg.Kube, log)
	}
	return nil, fmt.Errorf("unknown connector %q", cfg.Connector)
}
