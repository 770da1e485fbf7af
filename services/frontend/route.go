package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/routerclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

const (
	// routeTimeout bounds one Route call to the router service; past it the
	// frontend routes in process.
	routeTimeout = 2 * time.Second
	// reportTimeout bounds MarkPrefillComplete and Free (unary, with a
	// router that lacks Report) and waiting for the Report stream's answer
	// at close.
	reportTimeout = time.Second
)

// decision is where one attempt of a request goes.
type decision struct {
	instanceID uint64
	// dpRank is the instance's data-parallel rank the router chose.
	dpRank   uint32
	addr     transport.Address
	endpoint string
	// remote is the router client that made the decision, so that prefill
	// completion and free are reported through it (on its Report stream);
	// nil when decided in process.
	remote routerv1.RouterServiceClient
	// prefill, when set, is the prefill worker of a two-leg attempt
	// (disagg.go); d's instance is then the decode worker.
	prefill *prefillTarget
	// prefillReported: the router was told the prefill is complete (at
	// the handoff of a two-leg attempt).
	prefillReported bool
}

// routing picks workers. In kv mode it asks the router service and, when
// the service cannot be reached, falls back to round-robin over the
// frontend's own view of the registry (counted in
// switchyard_frontend_router_fallback_total). In the other modes, and in kv
// mode with --no-kv-events, an in-process core.Core decides.
type routing struct {
	client  *routerclient.Client // nil without the router service
	remotes []routerv1.RouterServiceClient
	// streams[i] routes on RouteStreams of remotes[i] (routestream.go).
	streams []*routeStreams
	// reports carries prefill completions and frees to the router service
	// (report.go); nil without it.
	reports *reporter
	local   *core.Core
	metrics *metrics
	log     *slog.Logger
	// plane is the frontend's own request plane: of a worker that serves
	// several, the address on it is called.
	plane transport.Plane
	// decided, when set, hears each decision's saturation and room, with the
	// request's context (admission.go).
	decided func(ctx context.Context, model string, saturated bool, room uint32)
}

func newRouting(cfg *Config, creds credentials.TransportCredentials, auth credentials.PerRPCCredentials, m *metrics, log *slog.Logger) (*routing, error) {
	mode, _ := cfg.mode()
	cc := cfg.Core
	cc.Mode, cc.Approximate = mode, cfg.approximate()
	r := &routing{metrics: m, log: log, plane: cfg.Transport.Plane}
	if cfg.usesRouterService() {
		cc.Mode, cc.Approximate = core.ModeRoundRobin, false
		// One connection to every replica: it fails over between them, and
		// prefill completion and free go to the replica it is connected to.
		client, err := routerclient.Dial(splitAddrs(cfg.RouterAddr), routerclient.Options{Credentials: creds, Log: log, Token: auth})
		if err != nil {
			return nil, fmt.Errorf("router client: %w", err)
		}
		r.client, r.remotes = client, []routerv1.RouterServiceClient{client}
		r.streams = []*routeStreams{newRouteStreams(client)}
		r.reports = newReporter(client, log)
	}
	r.local = core.New(cc)
	return r, nil
}

func (r *routing) close() {
	for _, s := range r.streams {
		s.close()
	}
	if r.reports != nil {
		r.reports.close()
	}
	if r.client != nil {
		_ = r.client.Close()
	}
}

// routeKeys are what a request carries beside its tokens that the router
// keys its decision on: its session id, its cache salt and its LoRA
// adapter (empty: none).
type routeKeys struct{ session, salt, lora string }

// route chooses a worker for one attempt of a request. The router client
// fails over between replicas; when none answers, the in-process fallback
// decides.
func (r *routing) route(ctx context.Context, id, model string, tokens []uint32, exclude []uint64, keys routeKeys) (decision, error) {
	// The frontend uses only the decision, not the list of every worker.
	req := &routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: model}},
		TokenIds: tokens, ExcludeInstanceIds: exclude, OmitCandidates: true, SessionId: keys.session, CacheSalt: keys.salt, LoraName: keys.lora}
	if t, _ := ctx.Value(ticketKey{}).(*ticket); t != nil {
		req.Backlog, req.WithinLimit = t.backlog, t.withinLimit
	}
	if keys.lora != "" {
		// Errors name what the client asked for.
		model = fmt.Sprintf("%s (LoRA adapter %s)", model, keys.lora)
	}
	for i, remote := range r.remotes {
		rctx, cancel := context.WithTimeout(ctx, routeTimeout)
		resp, err := r.streams[i].route(rctx, req)
		cancel()
		if err == nil {
			if r.decided != nil {
				r.decided(ctx, model, resp.GetSaturated(), resp.GetRoom())
			}
			d, err := decisionOf(resp, remote, r.plane)
			if err != nil {
				r.reports.add(id, true)
			}
			return d, err
		}
		if ctx.Err() != nil {
			// The router may have decided before the wait ended.
			r.reports.add(id, true)
			return decision{}, ctx.Err()
		}
		switch {
		case apierr.Is(err, codes.NotFound, apierr.ReasonUnknownModel):
			return decision{}, fmt.Errorf("%w: %s", ErrUnknownModel, model)
		case status.Code(err) == codes.InvalidArgument:
			return decision{}, fmt.Errorf("%w: router: %s", ErrInvalidRequest, status.Convert(err).Message())
		case apierr.Is(err, codes.FailedPrecondition, apierr.ReasonNoWorker):
			return decision{}, fmt.Errorf("%w: %s", ErrNoInstance, model)
		}
		// A call or stream that broke after its request was sent may have
		// been decided by the router: it is freed there (an id the router
		// does not hold is nothing to free) before the request is routed
		// elsewhere.
		r.reports.add(id, true)
		r.log.Warn("router service unavailable", "request_id", id, "err", err.Error())
	}
	if len(r.remotes) > 0 {
		r.metrics.routerFallback.Inc()
	}
	resp, err := r.local.Route(req)
	switch {
	case errors.Is(err, core.ErrUnknownTarget):
		return decision{}, fmt.Errorf("%w: %s", ErrUnknownModel, model)
	case errors.Is(err, core.ErrNoWorker):
		return decision{}, fmt.Errorf("%w: %s", ErrNoInstance, model)
	case err != nil:
		return decision{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	// The decision keeps copies of what it needs (ids, strings, the
	// address), so the response goes back to the core's pool: it lists
	// every worker, and one left per request is garbage the collector
	// chases. The request's token ids are hashed by the core, which keeps
	// the hashes it made, so Route (not RouteOwned) costs no copy here.
	if r.decided != nil {
		r.decided(ctx, model, resp.GetSaturated(), resp.GetRoom())
	}
	d, err := decisionOf(resp, nil, r.plane)
	core.Recycle(resp)
	if err != nil {
		r.local.Free(id)
	}
	return d, err
}

// decisionOf is the decision resp names. Of the addresses a worker serves,
// the one on plane is called when it has one, otherwise its first (the
// frontend's client speaks every plane).
func decisionOf(resp *routerv1.RouteResponse, remote routerv1.RouterServiceClient, plane transport.Plane) (decision, error) {
	d := decision{instanceID: resp.GetInstanceId(), dpRank: resp.GetDpRank(), remote: remote, endpoint: resp.GetEndpoint().GetEndpoint()}
	if d.endpoint == "" {
		d.endpoint = wire.GenerateEndpoint
	}
	addr, ok := transport.Pick(resp.GetTransport(), plane)
	if !ok {
		return decision{}, fmt.Errorf("%w: instance %x has no request plane address", ErrNoInstance, d.instanceID)
	}
	d.addr = addr
	if p := resp.GetPrefill(); p != nil {
		// A prefill worker without an address on any plane this frontend
		// speaks cannot be called: the prefill stays local (the router's
		// record of the leg ends with the request's Free).
		if paddr, ok := transport.Pick(p.GetTransport(), plane); ok {
			d.prefill = &prefillTarget{instanceID: p.GetInstanceId(), dpRank: p.GetDpRank(), addr: paddr, endpoint: p.GetEndpoint().GetEndpoint()}
			if d.prefill.endpoint == "" {
				d.prefill.endpoint = wire.GenerateEndpoint
			}
		}
	}
	return d, nil
}

// prefillDone reports a request's first token to whoever routed it.
func (r *routing) prefillDone(d decision, id string) {
	if d.remote == nil {
		r.local.PrefillDone(id)
		return
	}
	r.reports.add(id, false)
}

// free reports a request's end to whoever routed it.
func (r *routing) free(d decision, id string) {
	if d.remote == nil {
		r.local.Free(id)
		return
	}
	r.reports.add(id, true)
}
