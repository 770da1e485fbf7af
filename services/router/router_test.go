package router_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

// TestRouterFollowsTheRegistry runs a real registry and router: a worker
// that registers becomes routable by model, and one that deregisters stops
// being routable at once.
func TestRouterFollowsTheRegistry(t *testing.T) {
	_, reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rctx, rcancel := context.WithCancel(ctx)
	cfg := router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", Core: core.DefaultConfig(),
		RegistryAddr: reg.Addr}
	svc, err := router.Start(rctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		rcancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	if err := routertest.WaitReady(ctx, svc); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rpc := routerv1.NewRouterServiceClient(cc)
	req := &routerv1.RouteRequest{RequestId: "r1", Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "Qwen/Qwen3-0.6B"}}, TokenIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}}

	_, err = rpc.Route(ctx, req, grpc.WaitForReady(true))
	if !apierr.Is(err, codes.NotFound, apierr.ReasonUnknownModel) {
		t.Fatalf("Route before any worker = %v, want NotFound with reason %s", err, apierr.ReasonUnknownModel)
	}

	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	sess, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "127.0.0.1:9999"}}
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "Qwen/Qwen3-0.6B", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	var resp *routerv1.RouteResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = rpc.Route(ctx, req)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Route after registration: %v", err)
	}
	if resp.InstanceId != sess.ID() || resp.Transport.GetTcp() != "127.0.0.1:9999" || resp.RequestBlocks != 1 {
		t.Fatalf("Route = %v, want instance %x at 127.0.0.1:9999 with 1 block", resp, sess.ID())
	}
	if _, err := rpc.MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil || len(st.Workers) != 1 || st.Workers[0].DecodeBlocks != 1 {
		t.Fatalf("GetStats = %v, %v", st, err)
	}
	if _, err := rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	// A known model whose only worker is excluded has no eligible worker.
	excluded := &routerv1.RouteRequest{RequestId: "r2", Target: req.Target, TokenIds: req.TokenIds, ExcludeInstanceIds: []uint64{sess.ID()}}
	if _, err := rpc.Route(ctx, excluded); !apierr.Is(err, codes.FailedPrecondition, apierr.ReasonNoWorker) {
		t.Fatalf("Route with the only worker excluded = %v, want FailedPrecondition with reason %s", err, apierr.ReasonNoWorker)
	}

	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The worker's instance and its model card leave in either order: the
	// router answers NO_WORKER in between, and UNKNOWN_MODEL once both are
	// gone.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err = rpc.Route(ctx, req)
		if apierr.Is(err, codes.NotFound, apierr.ReasonUnknownModel) {
			break
		}
		if err != nil && !apierr.Is(err, codes.FailedPrecondition, apierr.ReasonNoWorker) {
			t.Fatalf("Route while the worker leaves = %v, want OK, NO_WORKER or UNKNOWN_MODEL", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Route after the worker left = %v, want NotFound with reason %s", err, apierr.ReasonUnknownModel)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := rpc.Route(ctx, &routerv1.RouteRequest{RequestId: "x", Target: req.Target}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Route without tokens = %v, want InvalidArgument", err)
	}
}
