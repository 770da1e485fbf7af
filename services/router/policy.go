package router

import (
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// Policy is who may call each router RPC when the router has
// --auth-token-file (admin may call all of them): frontends route and report
// their requests' progress; other routers may read stats.
var Policy = grpcserver.Policy{
	routerv1.RouterService_Route_FullMethodName:               frontend,
	routerv1.RouterService_MarkPrefillComplete_FullMethodName: frontend,
	routerv1.RouterService_Free_FullMethodName:                frontend,
	routerv1.RouterService_Report_FullMethodName:              frontend,
	routerv1.RouterService_RouteStream_FullMethodName:         frontend,
	routerv1.RouterService_QueryOverlaps_FullMethodName:       frontend,
	// Frontends queue requests while the fleet is saturated.
	routerv1.RouterService_WatchSaturation_FullMethodName: frontend,
	routerv1.RouterService_GetStats_FullMethodName:        {authtoken.RoleFrontend, authtoken.RoleRouter},
	// ExplainRoute records nothing; it shows the router's view of the
	// workers, which frontends may see anyway.
	routerv1.RouterService_ExplainRoute_FullMethodName: {authtoken.RoleFrontend, authtoken.RoleRouter},
}

var frontend = []authtoken.Role{authtoken.RoleFrontend}
