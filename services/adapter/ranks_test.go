package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestAdapterDataParallelRanks runs a registry, an eventbus, a router and
// an adapter with --data-parallel-size 2 in front of the stand-in engine:
// the card declares two ranks, a prompt the engine stored on rank 1 is
// routed to rank 1, and the adapter's engine request names the router's
// rank in X-Data-Parallel-Rank (rank 0 too); a rank the engine does not
// serve is refused before any engine request; the engine's per-engine
// metrics become a load report per rank.
func TestAdapterDataParallelRanks(t *testing.T) {
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	busAddr := bus.Addr().String()
	eng := startStandIn(t)
	eng.metrics = `vllm:num_requests_waiting{engine="0",model_name="test/model"} 3.0
vllm:num_requests_waiting{engine="1",model_name="test/model"} 1.0
vllm:num_requests_running{engine="1",model_name="test/model"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="test/model"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="test/model"} 0.5
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="4000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="4000"} 1.0
`
	files, err := qwen3.WriteTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := runAdapter(t, eng, files, reg.Addr, busAddr, "--data-parallel-size", "2")
	defer a.stop()
	var w *worker.Worker
	select {
	case w = <-a.ready:
	case err := <-a.done:
		t.Fatalf("adapter stopped: %v", err)
	}
	rpc, stop := routertest.Start(t, ctx, routertest.Config(reg.Addr, busAddr))
	defer stop()
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: modelName}}

	testwait.Until(t, 20*time.Second, "the adapter to subscribe", func() bool {
		eng.publish(0, []any{"AllBlocksCleared"})
		return a.stats.Messages.Load() > 0
	})
	prompt := make([]uint32, 64) // 4 blocks of 16
	for i := range prompt {
		prompt[i] = uint32(5000 + 3*i)
	}
	// The router lists a candidate per rank once it has the card.
	ranksOf := func() map[uint32]uint32 {
		q, err := rpc.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: prompt})
		if err != nil {
			return nil
		}
		out := map[uint32]uint32{}
		for _, c := range q.Candidates {
			if c.InstanceId == w.InstanceID() {
				out[c.DpRank] = c.OverlapBlocks
			}
		}
		return out
	}
	testwait.Until(t, 20*time.Second, "the router to list both ranks", func() bool { return len(ranksOf()) == 2 })
	eng.publishRank(0, 1, []any{"BlockStored", []any{11, 12, 13, 14}, nil, anys(prompt), 16, nil, "GPU"})
	testwait.Until(t, 20*time.Second, "the router to index rank 1's blocks", func() bool {
		r := ranksOf()
		return r[1] == 4 && r[0] == 0
	})
	route, err := rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "ranked", Target: target, TokenIds: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if route.InstanceId != w.InstanceID() || route.DpRank != 1 {
		t.Fatalf("routed to %x/%d, want %x/1 (the rank holding the prompt)", route.InstanceId, route.DpRank, w.InstanceID())
	}
	if _, err := rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "ranked"}); err != nil {
		t.Fatal(err)
	}

	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	addr := workertest.TCP(w.Instance())
	for _, tc2 := range []struct {
		name   string
		rank   uint32
		header string // what the engine is told; "" refused before it
	}{
		{"the router's rank", route.DpRank, "1"},
		{"rank 0", 0, "0"},
		{"a rank the engine does not serve", 2, ""},
	} {
		t.Run(tc2.name, func(t *testing.T) {
			eng.mu.Lock()
			before := len(eng.rankHeaders)
			eng.mu.Unlock()
			rs, err := workertest.Generate(ctx, tc, addr, &workerv1.GenerateRequest{RequestId: fmt.Sprint("rank-", tc2.rank), TokenIds: prompt,
				MaxTokens: 2, Model: modelName, DpRank: tc2.rank})
			eng.mu.Lock()
			got := append([]string(nil), eng.rankHeaders[before:]...)
			eng.mu.Unlock()
			if tc2.header == "" {
				var he *transport.HandlerError
				if !errors.As(err, &he) || he.Code != transport.CodeInvalidArgument {
					t.Fatalf("error %v, want invalid_argument", err)
				}
				if len(got) != 0 {
					t.Fatalf("the engine was asked (%v) for a rank it does not serve", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if toks, fin := workertest.Output(rs); len(toks) != 2 || fin != workerv1.FinishReason_FINISH_REASON_LENGTH {
				t.Fatalf("output %v %v", toks, fin)
			}
			if fmt.Sprint(got) != "["+tc2.header+"]" {
				t.Fatalf("engine saw rank headers %v, want [%s]", got, tc2.header)
			}
		})
	}

	// A load report per rank, each with its engine core's numbers.
	sub, err := eventbustest.Client(t, busAddr).Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "dynamo",
		FilterSubject: "dynamo.backend." + wire.LoadName, DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := map[uint32]string{0: "3 0 1000 4000", 1: "1 2 2000 4000"}
	seen := map[uint32]bool{}
	for len(seen) < 2 {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("load reports per rank: %v (seen %v)", err, seen)
		}
		m, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
		if err != nil {
			t.Fatal(err)
		}
		if m.InstanceId != w.InstanceID() {
			continue
		}
		if got := fmt.Sprint(m.WaitingRequests, m.RunningRequests, m.KvBlocksUsed, m.KvBlocksTotal); got == want[m.DpRank] {
			seen[m.DpRank] = true
		} else if m.DpRank > 1 {
			t.Fatalf("a load report for rank %d", m.DpRank)
		}
	}
}
