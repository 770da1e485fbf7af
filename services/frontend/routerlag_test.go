package frontend_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/services/frontend"
)

// laggingRouter stands between the frontend and the real router service
// and, while lagging is set, answers Route as a router whose registry watch
// has not delivered the model's card yet: NotFound, reason unknown model.
// Otherwise it passes Route on. It serves Route alone, so the frontend routes
// unary (its stream is Unimplemented here).
type laggingRouter struct {
	routerv1.UnimplementedRouterServiceServer
	real    routerv1.RouterServiceClient
	lagging atomic.Bool
	// unknown counts the answers given while lagging.
	unknown atomic.Int64
}

func (l *laggingRouter) Route(ctx context.Context, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	if l.lagging.Load() {
		l.unknown.Add(1)
		return nil, apierr.Errorf(codes.NotFound, apierr.ReasonUnknownModel, "no model card names %s", req.GetTarget().GetModel())
	}
	return l.real.Route(ctx, req)
}

// startLaggingRouter serves a laggingRouter in front of the router service
// at addr and returns it with its own address.
func startLaggingRouter(t *testing.T, addr string) (*laggingRouter, string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	l := &laggingRouter{real: routerv1.NewRouterServiceClient(conn)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	routerv1.RegisterRouterServiceServer(srv, l)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done; _ = conn.Close() })
	return l, lis.Addr().String()
}

// TestRouterBehindTheCatalog: the frontend's catalog has the model's card
// while the router service answers "unknown model" (its watch is behind, as
// right after a worker registers). A chat waits for the router to catch up
// instead of answering 404 for a model /v1/models lists; once the router
// knows the model the chat is routed and answered. A router that stays
// behind past the bound gets its answer through: 404.
func TestRouterBehindTheCatalog(t *testing.T) {
	t.Parallel()
	var lag *laggingRouter
	s := startStack(t, stackOpts{mode: "kv", configure: func(c *frontend.Config) {
		lag, c.RouterAddr = startLaggingRouter(t, c.RouterAddr)
	}})
	s.addMocker(0)
	s.waitInstances(1)
	ctx := testCtx(t)

	lag.lagging.Store(true)
	answered := make(chan error, 1)
	go func() {
		_, err := s.client.Chat.Completions.New(ctx, chatParams("behind the catalog", 2))
		answered <- err
	}()
	// The router is asked again while it lags: the request is waiting.
	for lag.unknown.Load() < 3 {
		select {
		case err := <-answered:
			t.Fatalf("answered while the router lagged: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	lag.lagging.Store(false)
	if err := <-answered; err != nil {
		t.Fatalf("once the router knows the model: %v", err)
	}

	// A router that never catches up: the request ends with its answer
	// after the bound, not hanging.
	lag.lagging.Store(true)
	_, err := s.client.Chat.Completions.New(ctx, chatParams("never known", 2))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("router behind for good: %v, want 404", err)
	}
	t.Logf("router answered unknown model %d times", lag.unknown.Load())
}
