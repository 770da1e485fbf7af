package router

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// server implements routerv1.RouterServiceServer over a Core.
type server struct {
	routerv1.UnimplementedRouterServiceServer
	core *core.Core
}

// statusCodes maps the domain errors to the codes and reasons router.proto
// documents on each RPC: an unknown model or endpoint is NotFound, a known
// target without an eligible worker FailedPrecondition, so that Unavailable
// only ever means the router itself cannot be reached.
var statusCodes = []grpcserver.Code{
	{Err: core.ErrInvalid, Code: codes.InvalidArgument},
	{Err: core.ErrUnknownModel, Code: codes.NotFound, Reason: apierr.ReasonUnknownModel},
	{Err: core.ErrUnknownEndpoint, Code: codes.NotFound, Reason: apierr.ReasonUnknownEndpoint},
	{Err: core.ErrNoWorker, Code: codes.FailedPrecondition, Reason: apierr.ReasonNoWorker},
}

// toStatus maps domain errors to gRPC codes, once, for every RPC.
func toStatus(err error) error { return grpcserver.ToStatus(err, statusCodes) }

// Route decides a request gRPC decoded for this call (unary, or one
// message of a RouteStream): nothing else holds its hashes, so the core
// keeps them without a copy.
func (s *server) Route(ctx context.Context, r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	resp, cost, err := s.core.RouteOwnedCost(r)
	if sink, ok := ctx.Value(chosenCostKey{}).(*float64); ok && err == nil {
		*sink = cost
	}
	return resp, toStatus(err)
}

// chosenCostKey keys, in a Route call's context, where the server writes
// the chosen worker's cost (for the metrics: see meteredServer).
type chosenCostKey struct{}

func (s *server) QueryOverlaps(_ context.Context, r *routerv1.QueryOverlapsRequest) (*routerv1.QueryOverlapsResponse, error) {
	resp, err := s.core.QueryOverlaps(r)
	return resp, toStatus(err)
}

func validID(id string) error {
	if id == "" || len(id) > core.MaxRequestIDLen {
		return status.Errorf(codes.InvalidArgument, "request_id must be 1..%d bytes", core.MaxRequestIDLen)
	}
	return nil
}

func (s *server) MarkPrefillComplete(_ context.Context, r *routerv1.MarkPrefillCompleteRequest) (*routerv1.MarkPrefillCompleteResponse, error) {
	if err := validID(r.GetRequestId()); err != nil {
		return nil, err
	}
	s.core.PrefillDone(r.RequestId)
	return &routerv1.MarkPrefillCompleteResponse{}, nil
}

func (s *server) Free(_ context.Context, r *routerv1.FreeRequest) (*routerv1.FreeResponse, error) {
	if err := validID(r.GetRequestId()); err != nil {
		return nil, err
	}
	s.core.Free(r.RequestId)
	return &routerv1.FreeResponse{}, nil
}

func (s *server) GetStats(context.Context, *routerv1.GetStatsRequest) (*routerv1.GetStatsResponse, error) {
	return s.core.Stats(), nil
}

func (s *server) ExplainRoute(_ context.Context, r *routerv1.ExplainRouteRequest) (*routerv1.ExplainRouteResponse, error) {
	resp, err := s.core.Explain(r)
	return resp, toStatus(err)
}
