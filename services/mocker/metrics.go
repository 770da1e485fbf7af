package mocker

import (
	"context"
	"log/slog"
	"sync/atomic"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/obs"
	"github.com/switchyard-llm/switchyard/pkg/simengine/realtime"
)

// serveMetrics starts --metrics-addr and --debug-addr when set. The engine
// metrics are read at each scrape: the load from the latest step's report,
// the counters from the engine; with several data-parallel ranks (a runner
// and a load each), their sums.
func serveMetrics(ctx context.Context, cfg Config, runners []*realtime.Runner, loads []atomic.Pointer[workerv1.LoadMetrics], log *slog.Logger) (stop func(), err error) {
	stop, addr, err := obs.ServeMetrics(ctx, cfg.MetricsAddr, cfg.DebugAddr, log,
		obs.NewEngineCollector(func() obs.EngineSnapshot {
			var sum obs.EngineSnapshot
			for i, r := range runners {
				s := snapshot(r, loads[i].Load(), cfg.Engine.NumGPUBlocks)
				sum.KVBlocksTotal += s.KVBlocksTotal
				sum.PrefixQueriedBlocks += s.PrefixQueriedBlocks
				sum.PrefixHitBlocks += s.PrefixHitBlocks
				sum.Preemptions += s.Preemptions
				sum.PromptTokens += s.PromptTokens
				sum.GeneratedTokens += s.GeneratedTokens
				sum.Running += s.Running
				sum.Waiting += s.Waiting
				sum.KVBlocksUsed += s.KVBlocksUsed
			}
			return sum
		}),
		newHandoffCollector(runners[0]))
	if err != nil {
		return nil, err
	}
	if addr != nil && cfg.OnMetricsAddr != nil {
		cfg.OnMetricsAddr(addr)
	}
	return stop, nil
}

func snapshot(r *realtime.Runner, m *workerv1.LoadMetrics, blocks int) obs.EngineSnapshot {
	st := r.Stats()
	s := obs.EngineSnapshot{KVBlocksTotal: blocks, PrefixQueriedBlocks: st.PrefixQueriedBlocks, PrefixHitBlocks: st.PrefixHitBlocks,
		Preemptions: st.Preemptions, PromptTokens: st.PrefillTokens, GeneratedTokens: st.GeneratedTokens}
	if m != nil {
		s.Running, s.Waiting, s.KVBlocksUsed = int(m.RunningRequests), int(m.WaitingRequests), int(m.KvBlocksUsed)
	}
	return s
}
