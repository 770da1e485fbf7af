package pyworker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestPythonWorkerLocalIndexer runs worker.py in each broker-free-capable
// KV event mode with a Go router in the same mode: the worker registers
// its WorkerService, serves its state and ring (OUT_OF_RANGE past the
// ring), and after requests that store and evict blocks the router's index
// equals the worker's GetKvState exactly.
func TestPythonWorkerLocalIndexer(t *testing.T) {
	t.Parallel()
	requirePython(t)
	for _, mode := range []string{"direct", "core"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			_, reg := registrytest.Start(t)
			_, bus := eventbustest.Start(t)
			dc, watch := watchInstances(t, reg.Addr)
			defer dc.Close()
			defer watch.Close()
			w := startWorker(t, reg.Addr, bus.Addr().String(), "--kv-events-mode", mode, "--kv-events-ring", "8", "--kv-blocks", "12")
			in := waitInstances(ctx, t, watch, 1, w.logs)[0]
			addr := in.GetMetadata()[wire.MetadataWorkerAPI]
			if addr == "" {
				t.Fatalf("instance %v registers no worker_api", in)
			}

			rctx, rcancel := context.WithCancel(ctx)
			rt, err := router.Start(rctx, router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", Core: core.DefaultConfig(),
				RegistryAddr: reg.Addr, EventbusAddr: bus.Addr().String(), KVEventsMode: mode, ResyncInterval: 100 * time.Millisecond}, slog.New(slog.DiscardHandler))
			if err != nil {
				rcancel()
				t.Fatal(err)
			}
			defer func() { rcancel(); _ = rt.Wait() }()
			if err := routertest.WaitReady(rctx, rt); err != nil {
				t.Fatal(err)
			}

			tc, err := transport.NewClient(transport.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			taddr := transport.Address{Kind: transport.PlaneHTTP, Addr: in.Transport.GetHttp()}
			for i := range 10 {
				prompt := seq(uint32(100*i+1), uint32(100*i+16)) // 4 blocks each; the cache holds 12
				if _, err := workertest.Generate(ctx, tc, taddr, &workerv1.GenerateRequest{RequestId: fmt.Sprint("p", i), TokenIds: prompt, MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
			}

			cc, api, err := worker.DialAPI(addr, grpcclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			if _, err := api.GetKvEvents(ctx, &workerv1.GetKvEventsRequest{FromEventId: 1}); status.Code(err) != codes.OutOfRange {
				t.Fatalf("GetKvEvents(1) past a ring of 8 = %v; want OUT_OF_RANGE", err)
			}
			for {
				inst, ranks, err := worker.ReadKVState(ctx, api)
				if err != nil {
					t.Fatal(err)
				}
				if inst != in.InstanceId || len(ranks) != 1 || len(ranks[0].Hashes) != 12 {
					t.Fatalf("GetKvState = %x %v; want one rank of the 12 cached blocks", inst, ranks)
				}
				want := slices.Sorted(slices.Values(ranks[0].Hashes))
				var got []uint64
				for _, d := range rt.Core().Index().Dump() {
					if d.ID == (index.WorkerID{Instance: in.InstanceId}) {
						got = slices.Sorted(slices.Values(d.Hashes))
					}
				}
				if slices.Equal(got, want) {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the router's index %v never equalled the worker's state %v", got, want)
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
}
