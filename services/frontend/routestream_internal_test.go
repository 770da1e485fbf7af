package frontend

import (
	"context"
	"fmt"
	"net"
	"sync"
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
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestRouteStreams routes on RouteStreams against a real router: requests
// from several goroutines at once are all answered on streams, one stream
// per request in flight (reused, never shared), Route's errors come back as
// the same statuses (code and reason), a request whose context has ended
// does not wait, and close ends every stream (goleak checks).
func TestRouteStreams(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rpc, _ := routertest.Start(t, ctx, routertest.Config(reg.Addr, ""))
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
	inst, err := sess.Register(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	req := func(id, model string) *routerv1.RouteRequest {
		return &routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: model}}, TokenIds: []uint32{1, 2, 3, 4, 5}}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := rpc.Route(ctx, req("warm", "m")); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("Route: %v", err)
		}
	}

	p := newRouteStreams(rpc)
	defer p.close()
	const workers, each = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				resp, err := p.route(ctx, req(fmt.Sprintf("w%d-%d", w, i), "m"))
				if err == nil && resp.GetInstanceId() != inst.GetInstanceId() {
					err = fmt.Errorf("routed to %x, want %x", resp.GetInstanceId(), inst.GetInstanceId())
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := p.streamed.Load(); n != workers*each {
		t.Fatalf("%d decisions on streams, want %d", n, workers*each)
	}
	if p.unary.Load() {
		t.Fatal("fell back to unary calls")
	}
	idle := len(p.idle)
	if idle < 1 || idle > workers {
		t.Fatalf("%d idle streams after %d concurrent requesters", idle, workers)
	}
	st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil || len(st.Workers) != 1 || st.Workers[0].Requests != workers*each+1 {
		t.Fatalf("GetStats = %v, %v; want %d requests recorded", st, err, workers*each+1)
	}

	// Route's errors, as statuses with their reasons; the stream goes on.
	if _, err := p.route(ctx, req("unknown", "nope")); !apierr.Is(err, codes.NotFound, apierr.ReasonUnknownModel) {
		t.Fatalf("unknown model: %v, want NotFound %s", err, apierr.ReasonUnknownModel)
	}
	if _, err := p.route(ctx, req("", "m")); apierr.Reason(err) != "" || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no request id: %v, want InvalidArgument", err)
	}
	if len(p.idle) != idle {
		t.Fatalf("%d idle streams after errors, want %d", len(p.idle), idle)
	}
	// A request whose context has ended does not wait for the router.
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := p.route(done, req("late", "m")); err == nil {
		t.Fatal("a cancelled request was routed")
	}
}

// TestRouteStreamsUnary: a router without RouteStream (an older one) is
// asked with unary Route calls, from the first request on.
func TestRouteStreamsUnary(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	routerv1.RegisterRouterServiceServer(gs, unaryRouter{})
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	p := newRouteStreams(routerv1.NewRouterServiceClient(cc))
	defer p.close()
	for i := range 3 {
		resp, err := p.route(t.Context(), &routerv1.RouteRequest{RequestId: fmt.Sprint(i)})
		if err != nil || resp.GetInstanceId() != 7 {
			t.Fatalf("route %d: %v, %v", i, resp, err)
		}
	}
	if !p.unary.Load() || p.streamed.Load() != 0 {
		t.Fatalf("unary %v, %d streamed; want unary calls only", p.unary.Load(), p.streamed.Load())
	}
}

// unaryRouter is a router of before RouteStream: Route only.
type unaryRouter struct {
	routerv1.UnimplementedRouterServiceServer
}

func (unaryRouter) Route(context.Context, *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	return &routerv1.RouteResponse{InstanceId: 7}, nil
}
