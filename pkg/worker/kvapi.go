package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// stateChunk is how many hashes one GetKvState message carries (512 KiB).
const stateChunk = 65536

// APIPolicy is who may call each WorkerService RPC when the worker API has
// an --auth-token-file: routers read the KV calls, frontends generate.
var APIPolicy = grpcserver.Policy{
	workerv1.WorkerService_Generate_FullMethodName:      {authtoken.RoleFrontend},
	workerv1.WorkerService_GetKvEvents_FullMethodName:   {authtoken.RoleRouter, authtoken.RoleFrontend},
	workerv1.WorkerService_GetKvState_FullMethodName:    {authtoken.RoleRouter, authtoken.RoleFrontend},
	workerv1.WorkerService_WatchKvEvents_FullMethodName: {authtoken.RoleRouter, authtoken.RoleFrontend},
	// A decode worker pulls a prefill worker's handoff; a frontend (or the
	// decode worker) releases one whose request ended.
	workerv1.WorkerService_PullKvHandoff_FullMethodName:    {authtoken.RoleWorker},
	workerv1.WorkerService_ReleaseKvHandoff_FullMethodName: {authtoken.RoleWorker, authtoken.RoleFrontend},
}

// apiCodes maps the SDK's errors to gRPC codes and reasons, once.
var apiCodes = []grpcserver.Code{
	{Err: ErrOutOfRange, Code: codes.OutOfRange, Reason: apierr.ReasonKVEventsOutOfRange},
	{Err: ErrInvalidRequest, Code: codes.InvalidArgument},
}

func apiStatus(err error) error { return grpcserver.ToStatus(err, apiCodes) }

// api serves WorkerService from the worker's local indexer and its handler.
type api struct {
	workerv1.UnimplementedWorkerServiceServer
	w *Worker
	h Handler
}

// Generate implements WorkerService: the same handler as the request plane.
func (a *api) Generate(req *workerv1.GenerateRequest, stream grpc.ServerStreamingServer[workerv1.GenerateResponse]) error {
	return handlerStatus(a.h(stream.Context(), req, stream.Send))
}

// handlerCodes are the gRPC codes of the request-plane handler error codes
// (transport.HandlerError.Code), so that a bad request over WorkerService is
// InvalidArgument, as it is over the request plane, not Unknown.
var handlerCodes = map[string]codes.Code{
	transport.CodeInvalidArgument: codes.InvalidArgument,
	transport.CodeInternal:        codes.Internal,
	transport.CodeTooLarge:        codes.ResourceExhausted,
	transport.CodeDraining:        codes.Unavailable,
	transport.CodeTimeout:         codes.DeadlineExceeded,
	transport.CodeDisconnected:    codes.Unavailable,
	CodeKVHandoffFailed:           codes.Unavailable,
}

// handlerStatus turns a handler's error into a status.
func handlerStatus(err error) error {
	var he *transport.HandlerError
	if err == nil || !errors.As(err, &he) {
		return err
	}
	c, ok := handlerCodes[he.Code]
	if !ok {
		c = codes.Unknown
	}
	return status.Error(c, he.Message)
}

// GetKvEvents implements WorkerService.
func (a *api) GetKvEvents(_ context.Context, req *workerv1.GetKvEventsRequest) (*workerv1.GetKvEventsResponse, error) {
	b, last, err := a.w.kvIndex.Events(req.GetDpRank(), req.GetFromEventId(), int(req.GetMaxEvents()))
	if err != nil {
		return nil, apiStatus(err)
	}
	b.InstanceId = a.w.InstanceID()
	return &workerv1.GetKvEventsResponse{Batch: b, LastEventId: last}, nil
}

// GetKvState implements WorkerService.
func (a *api) GetKvState(_ *workerv1.GetKvStateRequest, stream grpc.ServerStreamingServer[workerv1.GetKvStateResponse]) error {
	id := a.w.InstanceID()
	for _, r := range a.w.kvIndex.State() {
		hs, ms := r.Hashes, r.Media
		for {
			n := min(len(hs), stateChunk)
			resp := &workerv1.GetKvStateResponse{InstanceId: id, DpRank: r.DPRank, EventId: r.EventID, SequenceHashes: hs[:n], Last: n == len(hs)}
			if len(ms) > 0 {
				resp.Media, ms = ms[:n], ms[n:]
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
			hs = hs[n:]
			if len(hs) == 0 {
				break
			}
		}
	}
	return nil
}

// WatchKvEvents implements WorkerService: it reads the ring from each rank's
// cursor and then waits for more, so a slow watcher costs no buffer here;
// one that falls behind the ring gets OUT_OF_RANGE.
func (a *api) WatchKvEvents(req *workerv1.WatchKvEventsRequest, stream grpc.ServerStreamingServer[workerv1.WatchKvEventsResponse]) error {
	next := map[uint32]uint64{}
	for r, id := range req.GetFromEventIds() {
		next[r] = max(id, 1)
	}
	ctx := stream.Context()
	for {
		last, changed := a.w.kvIndex.Last()
		sent := false
		for r, l := range last {
			from, ok := next[r]
			if !ok {
				from = 1
			}
			if from > l {
				continue
			}
			b, _, err := a.w.kvIndex.Events(r, from, 0)
			if err != nil {
				return apiStatus(err)
			}
			if len(b.Events) == 0 {
				continue
			}
			b.InstanceId = a.w.InstanceID()
			if err := stream.Send(&workerv1.WatchKvEventsResponse{Batch: b}); err != nil {
				return err
			}
			next[r] = b.FirstEventId + uint64(len(b.Events))
			sent = true
		}
		if sent {
			continue // more may have come while sending
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.w.apiStopping():
			return apiStatus(errors.New("worker shutting down"))
		case <-changed:
		}
	}
}

// startAPI builds and binds the WorkerService server; serveAPI serves it.
func (w *Worker) startAPI(h Handler) error {
	cfg := w.cfg.API
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = net.JoinHostPort(w.cfg.Transport.TCP.Host, "0")
	}
	cfg.Policy = APIPolicy
	srv, err := grpcserver.New(cfg, w.log.With("component", "worker-api"))
	if err != nil {
		return fmt.Errorf("worker: worker API: %w", err)
	}
	workerv1.RegisterWorkerServiceServer(srv.GRPC(), &api{w: w, h: h})
	if err := srv.Listen(); err != nil {
		return fmt.Errorf("worker: worker API: %w", err)
	}
	w.api = srv
	return nil
}

// apiAddr is the address routers dial: the bound port with the configured
// (or the request plane's) host, since a wildcard bind is not dialable.
func (w *Worker) apiAddr() string {
	_, port, _ := net.SplitHostPort(w.api.Addr().String())
	host, _, err := net.SplitHostPort(w.cfg.API.GRPCAddr)
	if err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
		host = w.cfg.Transport.TCP.Host
	}
	if p, _ := strconv.Atoi(port); p == 0 {
		return w.api.Addr().String()
	}
	return net.JoinHostPort(host, port)
}

func (w *Worker) apiStopping() <-chan struct{} {
	if w.api == nil {
		return nil
	}
	return w.api.Stopping()
}

// KVIndex is the worker's local indexer.
func (w *Worker) KVIndex() *KVIndex { return w.kvIndex }

// APIAddr is the dialable address of the worker's WorkerService, as
// registered in its instance metadata.
func (w *Worker) APIAddr() string { return w.apiAddr() }

// KVFlags are a worker command's KV event flags: --kv-events-mode,
// --kv-events-ring, --kv-publish-interval and --worker-api-addr.
type KVFlags struct {
	Mode            string
	Ring            int
	PublishInterval time.Duration
	APIAddr         string
}

// RegisterFlags adds the flags.
func (f *KVFlags) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Mode, "kv-events-mode", string(kvevents.JetStream), "where KV events go: jetstream (the eventbus stream), core (NATS Core subjects through the eventbus), "+
		"direct (nowhere: routers watch this worker's WorkerService), none")
	fs.IntVar(&f.Ring, "kv-events-ring", DefaultKVEventsRing, "recent KV events kept per dp rank for routers to fill gaps from (about a minute of a busy engine)")
	fs.DurationVar(&f.PublishInterval, "kv-publish-interval", 0, "least time between two publishes of KV events: the batches that come meanwhile go out together, merged (fewer eventbus messages for a fleet of thousands of workers, for up to this much delay; 0: each batch at once)")
	fs.StringVar(&f.APIAddr, "worker-api-addr", "", "WorkerService gRPC listen address (empty: the request plane's host, a free port)")
}

// Validate checks the flags.
func (f KVFlags) Validate() error {
	if _, err := kvevents.Parse(f.Mode); err != nil {
		return err
	}
	if f.Ring < 0 {
		return fmt.Errorf("--kv-events-ring %d must not be negative (0: the default, %d)", f.Ring, DefaultKVEventsRing)
	}
	if f.PublishInterval < 0 {
		return fmt.Errorf("--kv-publish-interval %s must not be negative (0: each batch at once)", f.PublishInterval)
	}
	return nil
}

// Apply sets the flags into a worker configuration.
func (f KVFlags) Apply(c *Config) {
	c.KVEventsMode, _ = kvevents.Parse(f.Mode)
	c.KVEventsRing = f.Ring
	c.KVPublishInterval = f.PublishInterval
	c.API.GRPCAddr = f.APIAddr
}
