package router_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestRouteStream: each request on a RouteStream is decided and recorded
// as Route does (same answer as a unary Route of the same request, the same
// load left in the router's books), Route's errors come back in the answer
// with their codes and reasons, and the stream goes on after them.
func TestRouteStream(t *testing.T) {
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
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	req := func(id, model string, tokens ...uint32) *routerv1.RouteRequest {
		return &routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: model}}, TokenIds: tokens}
	}
	// The unary reference, once the router sees the worker.
	var want *routerv1.RouteResponse
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if want, err = rpc.Route(ctx, req("u1", "m", 1, 2, 3, 4, 5, 6, 7, 8)); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("Route: %v", err)
		}
	}
	if _, err := rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "u1"}); err != nil {
		t.Fatal(err)
	}

	stream, err := rpc.RouteStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		req    *routerv1.RouteRequest
		code   codes.Code
		reason string
	}{
		{"routed", req("s1", "m", 1, 2, 3, 4, 5, 6, 7, 8), codes.OK, ""},
		{"unknown model", req("s2", "nope", 1, 2, 3, 4), codes.NotFound, apierr.ReasonUnknownModel},
		{"no tokens", req("s3", "m"), codes.InvalidArgument, ""},
		{"no request", nil, codes.InvalidArgument, ""},
		{"routed after errors", req("s4", "m", 1, 2, 3, 4), codes.OK, ""},
	} {
		if err := stream.Send(&routerv1.RouteStreamRequest{Route: c.req}); err != nil {
			t.Fatalf("%s: Send: %v", c.name, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: Recv: %v", c.name, err)
		}
		if c.code == codes.OK {
			// The decision is the unary one's (the cached share may differ:
			// earlier requests' blocks are predicted on the worker).
			if resp.Error != nil || resp.Route.GetInstanceId() != want.GetInstanceId() || !proto.Equal(resp.Route.GetTransport(), want.GetTransport()) ||
				!proto.Equal(resp.Route.GetEndpoint(), want.GetEndpoint()) || len(resp.Route.GetCandidates()) != len(want.GetCandidates()) {
				t.Fatalf("%s: %v, want the decision %v", c.name, resp, want)
			}
			continue
		}
		if resp.Route != nil || codes.Code(resp.Error.GetCode()) != c.code || resp.Error.GetReason() != c.reason || resp.Error.GetMessage() == "" {
			t.Fatalf("%s: %v, want code %v reason %q and a message", c.name, resp, c.code, c.reason)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
	st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil || len(st.Workers) != 1 {
		t.Fatalf("GetStats = %v, %v", st, err)
	}
	// s1 and s4 are recorded (u1 was freed); the failed ones are not.
	if w := st.Workers[0]; w.Requests != 2 || w.PrefillBlocks+w.DecodeBlocks == 0 {
		t.Fatalf("worker load %v, want 2 requests", w)
	}
}
