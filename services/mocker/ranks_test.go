package mocker_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// cachedTokens sends req and reads its answer to the end: the prompt
// tokens served from the cache, or the call's error.
func cachedTokens(ctx context.Context, t *testing.T, c transport.Client, in *registryv1.Instance, req *workerv1.GenerateRequest) (uint32, error) {
	t.Helper()
	payload, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Call(ctx, transport.Address{Kind: transport.PlaneTCP, Addr: in.Transport.GetTcp()}, wire.GenerateEndpoint, nil, payload)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var cached uint32
	for {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return cached, nil
		}
		if err != nil {
			return 0, err
		}
		r := &workerv1.GenerateResponse{}
		if err := proto.Unmarshal(b, r); err != nil {
			t.Fatal(err)
		}
		if u := r.GetUsage(); u != nil {
			cached = u.GetCachedPromptTokens()
		}
	}
}

// TestMockerDataParallelRanks runs a mocker with --data-parallel-size 3:
// its card says 3 ranks; a request's dp_rank picks the engine, each with
// its own cache (a prompt served on rank 1 is cached there, not on rank 0
// or 2); its KV events carry the rank that stored the blocks; it reports
// load per rank; and a request for rank 3 is refused with a message that
// names the ranks served.
func TestMockerDataParallelRanks(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := eventbustest.Client(t, bus.Addr().String())
	loads, err := client.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "mock", FilterSubject: wire.LoadSubject("mock", "backend"),
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer loads.Close()
	m := runMocker(t, nil, "--registry-addr", reg.Addr, "--eventbus-addr", bus.Addr().String(), "--data-parallel-size", "3")
	w := m.registered(t)

	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: "mock"}})
	if err != nil || len(cards.GetCards()) != 1 || cards.GetCards()[0].GetDataParallelSize() != 3 {
		t.Fatalf("ListModels = %v, %v; want one card with data_parallel_size 3", cards, err)
	}

	c := tcpClient(t)
	prompt := seq(1000, 64)
	for _, step := range []struct {
		rank   uint32
		cached uint32
	}{{1, 0}, {1, 48}, {0, 0}, {2, 0}, {1, 48}} {
		got, err := cachedTokens(ctx, t, c, w.Instance(), &workerv1.GenerateRequest{RequestId: "r", TokenIds: prompt, MaxTokens: 2, DpRank: step.rank})
		if err != nil || got != step.cached {
			t.Fatalf("rank %d served the prompt with %d tokens cached (%v); want %d", step.rank, got, err, step.cached)
		}
	}
	_, err = cachedTokens(ctx, t, c, w.Instance(), &workerv1.GenerateRequest{RequestId: "out", TokenIds: prompt, MaxTokens: 2, DpRank: 3})
	var he *transport.HandlerError
	if !errors.As(err, &he) || he.Code != transport.CodeInvalidArgument || !strings.Contains(he.Message, "dp_rank 3 is out of range: this worker serves 3 data-parallel rank(s), 0 to 2") {
		t.Fatalf("a request for rank 3 = %v; want invalid argument naming the ranks", err)
	}

	// Each rank stored the prompt's blocks once, under its own rank.
	events, err := client.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "mock", FilterSubject: "mock.backend." + wire.KVEventsName,
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	first := kvhash.Hashes(prompt, 16, nil)[0].Sequence
	storedOn := map[uint32]int{}
	for len(storedOn) < 3 {
		ev, err := events.Next(ctx)
		if err != nil {
			t.Fatalf("KV events: %v (stores by rank so far: %v)", err, storedOn)
		}
		b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
		if err != nil {
			t.Fatal(err)
		}
		if b.InstanceId != w.InstanceID() || b.DpRank > 2 {
			t.Fatalf("batch of instance %x rank %d", b.InstanceId, b.DpRank)
		}
		for _, e := range b.Events {
			if blocks := e.GetStored().GetBlocks(); len(blocks) > 0 && blocks[0].GetSequenceHash() == first {
				storedOn[b.DpRank]++
			}
		}
	}
	// A load report per rank.
	reported := map[uint32]bool{}
	for len(reported) < 3 {
		ev, err := loads.Next(ctx)
		if err != nil {
			t.Fatalf("load reports: %v (ranks so far: %v)", err, reported)
		}
		lm, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
		if err != nil {
			t.Fatal(err)
		}
		if lm.InstanceId != w.InstanceID() || lm.DpRank > 2 {
			t.Fatalf("load report of instance %x rank %d", lm.InstanceId, lm.DpRank)
		}
		reported[lm.DpRank] = true
	}
}
