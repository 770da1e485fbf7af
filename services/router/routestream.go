package router

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/status"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// RouteStream decides every request of a client's stream as Route does and
// answers each in order: a decision then costs the router one message in
// and one out, not a call of its own (a stream, headers and trailers, the
// interceptors).
func (s *server) RouteStream(stream routerv1.RouterService_RouteStreamServer) error {
	return serveRouteStream(stream, s.Route)
}

// RouteStream is the server's, with every decision metered as Route's are.
func (s *meteredServer) RouteStream(stream routerv1.RouterService_RouteStreamServer) error {
	return serveRouteStream(stream, s.Route)
}

func serveRouteStream(stream routerv1.RouterService_RouteStreamServer,
	route func(context.Context, *routerv1.RouteRequest) (*routerv1.RouteResponse, error)) error {
	ctx := stream.Context()
	// One answer message for the stream: Send has marshalled it when it
	// returns.
	var out routerv1.RouteStreamResponse
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out = routerv1.RouteStreamResponse{}
		resp, err := route(ctx, r.GetRoute())
		if err != nil {
			// Route's error (already a status with its reason) travels in
			// the answer; the stream goes on.
			st := status.Convert(err)
			out.Error = &routerv1.RouteError{Code: uint32(st.Code()), Message: st.Message(), Reason: apierr.Reason(err)}
		} else {
			out.Route = resp
		}
		err = stream.Send(&out)
		// Sent (or not, the stream broken): the decision's response is
		// garbage now, and the next decision fills it again.
		out.Route = nil
		core.Recycle(resp)
		if err != nil {
			return err
		}
	}
}
