package router_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// reserveAddr is a loopback address that refuses connections until a
// registry or eventbus is started on it (testport holds it for the test, so
// no other test process takes it meanwhile).
func reserveAddr(t *testing.T) string {
	t.Helper()
	return testport.Reserve(t).Addr()
}

// TestRouterStartsBeforeRegistryAndEventbus starts a KV router (jetstream
// mode) while neither its registry nor its eventbus is up. It listens at
// once, says NOT_SERVING and answers Route with Unavailable (a frontend
// falls back on it); once both start it restores the stored index snapshot,
// becomes SERVING, and routes with the KV index built from the worker's
// events. Without a stored snapshot (no bucket yet) it becomes SERVING
// too, with nothing restored.
func TestRouterStartsBeforeRegistryAndEventbus(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(map[bool]string{true: "snapshot stored", false: "no snapshot"}[stored], func(t *testing.T) {
			testRouterStartsBefore(t, stored)
		})
	}
}

func testRouterStartsBefore(t *testing.T, stored bool) {
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd := registrytest.StartEtcd(t)
	ns := eventbustest.StartNATS(t)
	regAddr, busAddr := reserveAddr(t), reserveAddr(t)
	busCfg := eventbustest.Config(ns.ClientURL())
	busCfg.Server.GRPCAddr = busAddr

	// A snapshot stored by an earlier router, through an eventbus that is
	// then stopped.
	taken := timestamppb.New(time.Now().Add(-time.Minute).Truncate(time.Second))
	data, err := proto.Marshal(&routerv1.IndexSnapshot{TakenAt: taken})
	if err != nil {
		t.Fatal(err)
	}
	if stored {
		bus := eventbustest.StartEventbus(t, busCfg)
		bc := eventbustest.Client(t, busAddr)
		if _, err := bc.PutObject(ctx, wire.SnapshotBucket, wire.SnapshotObject, bytes.NewReader(data), eventbusclient.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := bus.Stop(); err != nil {
			t.Fatal(err)
		}
	} else {
		taken = nil
	}

	rctx, rcancel := context.WithCancel(ctx)
	svc, err := router.Start(rctx, routertest.Config(regAddr, busAddr), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rcancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("router: %v", err)
		}
	})
	cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before the registry and eventbus = %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
	rpc := routerv1.NewRouterServiceClient(cc)
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}
	prompt := make([]uint32, 256) // 16 blocks of 16
	for i := range prompt {
		prompt[i] = uint32(7000 + i)
	}
	_, err = rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "early", Target: target, TokenIds: prompt})
	if !apierr.Is(err, codes.Unavailable, apierr.ReasonBackendUnavailable) {
		t.Fatalf("Route before the registry = %v, want Unavailable %s", err, apierr.ReasonBackendUnavailable)
	}
	rs, err := rpc.RouteStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&routerv1.RouteStreamRequest{Route: &routerv1.RouteRequest{RequestId: "early-stream", Target: target, TokenIds: prompt}}); err != nil {
		t.Fatal(err)
	}
	if out, err := rs.Recv(); err != nil || codes.Code(out.GetError().GetCode()) != codes.Unavailable {
		t.Fatalf("RouteStream before the registry = %v, %v; want an Unavailable answer", out, err)
	}
	_ = rs.CloseSend()
	select {
	case <-svc.Ready():
		t.Fatal("router ready without its registry and eventbus")
	default:
	}
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}

	registrytest.StartRegistryAt(t, etcd.Endpoints, regAddr)
	eventbustest.StartEventbus(t, busCfg)
	startMocker(t, regAddr, busAddr)
	for {
		r, err := watch.Recv()
		if err != nil {
			t.Fatalf("health watch: %v", err)
		}
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(st.GetRestoredSnapshotTime(), taken) {
		t.Fatalf("restored snapshot time = %v, want %v (the stored snapshot)", st.GetRestoredSnapshotTime(), taken)
	}

	tc, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// The router is ready once the registry answered; the mocker may
	// register just after.
	var first *routerv1.RouteResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		first, err = rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "turn1", Target: target, TokenIds: prompt})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Route once SERVING: %v", err)
		}
	}
	generate(ctx, t, tc, first, "turn1", prompt)
	_, _ = rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "turn1"})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		q, err := rpc.QueryOverlaps(ctx, &routerv1.QueryOverlapsRequest{Target: target, TokenIds: prompt})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Candidates) > 0 && q.Candidates[0].OverlapBlocks >= 15 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never indexed the worker's blocks: %v", q)
		}
	}
	second, err := rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "turn2", Target: target, TokenIds: append(prompt, 1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if second.InstanceId != first.InstanceId || second.OverlapBlocks < 15 {
		t.Fatalf("second turn went to %x with overlap %d; want %x with >= 15", second.InstanceId, second.OverlapBlocks, first.InstanceId)
	}
}
