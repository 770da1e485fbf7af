package frontend

import (
	"context"
	"flag"
	"log/slog"
	"strconv"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// BenchmarkRouteInProcess times routing.route when the frontend decides in
// process (--no-kv-events and the round-robin, random and least-loaded
// modes; the fallback when no router service answers), with the
// allocations of each routed request: 16 workers of one model, prompts of
// 64 blocks in 8 groups that share 48 of them, 64 requests in flight.
// Prompts and ids are made before the loop, so what is counted is the
// routing's own, from the request message to the decision.
func BenchmarkRouteInProcess(b *testing.B) {
	const (
		workers, blockSize, blocks, shared = 16, 16, 64, 48
		prompts, groups, inflight          = 64, 8, 64
	)
	toks := make([][]uint32, prompts)
	for p := range toks {
		toks[p] = make([]uint32, blocks*blockSize)
		for i := range toks[p] {
			// The first shared blocks are the group's, the rest the prompt's own.
			src := p
			if i < shared*blockSize {
				src = p % groups
			}
			toks[p][i] = uint32(src*1_000_003 + i)
		}
	}
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"kv-no-events", []string{"--no-kv-events"}},
		{"round-robin", []string{"--router-mode=round-robin"}},
		{"least-loaded", []string{"--router-mode=least-loaded"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			var cfg Config
			fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
			cfg.RegisterFlags(fs)
			if err := fs.Parse(mode.args); err != nil {
				b.Fatal(err)
			}
			// A virtual clock, 1 ms a request: on the wall clock, the
			// predicted prefixes would expire by how slowly the bench runs.
			now := time.Unix(1_700_000_000, 0)
			cfg.Core.Seed, cfg.Core.Clock = 1, func() time.Time { return now }
			cfg.Transport.Plane = transport.PlaneTCP
			r, err := newRouting(&cfg, nil, nil, newMetrics(), slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			defer r.close()
			if r.client != nil {
				b.Fatal("routes through the router service, not in process")
			}
			var ins []registryclient.Change[*registryv1.Instance]
			var cards []registryclient.Change[*registryv1.ModelCard]
			for id := uint64(1); id <= workers; id++ {
				ins = append(ins, registryclient.Change[*registryv1.Instance]{Item: &registryv1.Instance{Namespace: "bench", Component: "backend",
					Endpoint: "generate", InstanceId: id, Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}})
				cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: &registryv1.ModelCard{Namespace: "bench", Component: "backend",
					Endpoint: "generate", InstanceId: id, ModelName: "bench", BlockSize: blockSize}})
			}
			r.local.OnInstances(ins)
			r.local.OnModels(cards)
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = strconv.Itoa(i)
			}
			ds := make([]decision, b.N)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now = now.Add(time.Millisecond)
				d, err := r.route(ctx, ids[i], "bench", toks[i%prompts], nil, routeKeys{})
				if err != nil {
					b.Fatal(err)
				}
				ds[i] = d
				r.prefillDone(d, ids[i])
				if i >= inflight {
					r.free(ds[i-inflight], ids[i-inflight])
				}
			}
		})
	}
}
