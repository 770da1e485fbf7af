package router_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestReplicasRouteAsOne runs three approximate-mode routers with replica
// sync and sends each request to a different replica: every replica ends up
// with the same loads and the same predicted blocks.
func TestReplicasRouteAsOne(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	for i := range 3 {
		s, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: fmt.Sprintf("127.0.0.1:%d", 9000+i)}}
		if _, err := s.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
			t.Fatal(err)
		}
	}

	var rpcs []routerv1.RouterServiceClient
	for i := range 3 {
		rctx, rcancel := context.WithCancel(ctx)
		svc, err := router.Start(rctx, router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", NoKVEvents: true,
			Core: core.DefaultConfig(), RegistryAddr: reg.Addr,
			EventbusAddr: bus.Addr().String(), ReplicaSync: true, ReplicaID: fmt.Sprintf("r%d", i)}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			rcancel()
			if err := svc.Wait(); err != nil {
				t.Errorf("router %d: %v", i, err)
			}
		}()
		if err := routertest.WaitReady(rctx, svc); err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		rpcs = append(rpcs, routerv1.NewRouterServiceClient(cc))
	}
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: "m"}}
	const n = 30
	for i := range n {
		prompt := make([]uint32, 32)
		for j := range prompt {
			prompt[j] = uint32(i%5*1000 + j) // five conversations, repeated
		}
		req := &routerv1.RouteRequest{RequestId: fmt.Sprintf("q%d", i), Target: target, TokenIds: prompt}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := rpcs[i%3].Route(ctx, req)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("route %d: %v", i, err)
			}
		}
		if i%2 == 0 {
			if _, err := rpcs[i%3].MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: req.RequestId}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stats := func() []*routerv1.GetStatsResponse {
		var out []*routerv1.GetStatsResponse
		for _, rpc := range rpcs {
			st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			st.EventsApplied, st.EventsDuplicate, st.EventsGap = 0, 0, 0
			out = append(out, st)
		}
		return out
	}
	var last []*routerv1.GetStatsResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		last = stats()
		if cmp.Equal(last[0], last[1], protocmp.Transform()) && cmp.Equal(last[0], last[2], protocmp.Transform()) && requests(last[0]) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas never converged:\n%v\n%v\n%v", last[0], last[1], last[2])
		}
	}
	if last[0].IndexedEntries == 0 {
		t.Fatalf("no predicted blocks: %v", last[0])
	}
	// Free through another replica than the one that routed: it learned
	// the request from the sync stream and shares the free.
	for i := range n {
		if _, err := rpcs[(i+1)%3].Free(ctx, &routerv1.FreeRequest{RequestId: fmt.Sprintf("q%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		last = stats()
		if requests(last[0]) == 0 && requests(last[1]) == 0 && requests(last[2]) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("loads never drained:\n%v\n%v\n%v", last[0], last[1], last[2])
		}
	}
}

func requests(st *routerv1.GetStatsResponse) int {
	n := 0
	for _, w := range st.Workers {
		n += int(w.Requests)
	}
	return n
}
