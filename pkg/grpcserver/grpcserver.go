// Package grpcserver is the one place Switchyard builds a gRPC server: health
// and reflection services, recovery, structured logging and Prometheus
// interceptors, TLS from the shared flags, a /metrics endpoint, and one
// graceful shutdown path (NOT_SERVING, drain, GracefulStop with a Stop
// fallback), after etcd's v3rpc/grpc.go and grpc-go's gracefulstop example.
package grpcserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/obs"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// Config is what every gRPC service shares: where it listens and how it stops.
type Config struct {
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string
	// Listener, when set, is served instead of binding GRPCAddr (which
	// should then name its address). No flag sets it: tests hand one over
	// so that a service they stop and start again keeps its port, which
	// another process could take while it is released. The server closes
	// it when it stops.
	Listener net.Listener
	// MetricsAddr serves /metrics over HTTP; empty disables it.
	MetricsAddr string
	// DebugAddr serves /debug/pprof over HTTP, on loopback unless it names
	// a host; empty (the default) disables it.
	DebugAddr string
	// TLS is the server's TLS identity; empty means plaintext.
	TLS tlsconfig.Config
	// DrainDelay is how long the server reports NOT_SERVING while still
	// serving, so that load balancers and clients move away first.
	DrainDelay time.Duration
	// ShutdownTimeout bounds GracefulStop; in-flight calls still running
	// after it are cut off by Stop.
	ShutdownTimeout time.Duration
	// AuthTokenFile lists the bearer tokens the server accepts, one
	// "role token-or-sha256" per line; empty means no tokens (mutual TLS,
	// when configured, is then the only check).
	AuthTokenFile string
	// RequireAuth refuses to start without tokens or mutual TLS.
	RequireAuth bool
	// Reflection registers the gRPC reflection service (for grpcurl); with
	// tokens it needs one of any role.
	Reflection bool
	// Policy is the service's table of the roles allowed per RPC, set by the
	// service before New; it applies when AuthTokenFile is set.
	Policy Policy
	// Limits bound what one client may hold open or send.
	Limits Limits
}

// RegisterFlags adds the shared server flags with the service's defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet, grpcAddr, metricsAddr string) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", grpcAddr, "gRPC listen address")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", metricsAddr, "HTTP listen address for /metrics (empty: off)")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", obs.DebugFlagUsage)
	fs.DurationVar(&c.DrainDelay, "drain-delay", 0, "time to report NOT_SERVING before stopping on shutdown")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on graceful stop before in-flight calls are cut")
	fs.StringVar(&c.AuthTokenFile, "auth-token-file", "", "file of accepted bearer tokens, one \"role token-or-sha256:<hex>\" per line (roles: worker, router, frontend, admin)")
	fs.BoolVar(&c.RequireAuth, "require-auth", false, "refuse to start without --auth-token-file or mutual TLS")
	fs.BoolVar(&c.Reflection, "reflection", false, "serve gRPC reflection (grpcurl); with tokens, any role may use it")
	c.Limits.RegisterFlags(fs)
	c.TLS.RegisterFlags(fs)
}

// Validate checks the shared server settings; it reads nothing (see
// Complete).
func (c Config) Validate() error {
	if c.GRPCAddr == "" {
		return errors.New("--grpc-addr must not be empty")
	}
	if c.DebugAddr != "" {
		if _, err := obs.LoopbackAddr(c.DebugAddr); err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
	}
	if c.DrainDelay < 0 || c.ShutdownTimeout < 0 {
		return errors.New("--drain-delay and --shutdown-timeout must not be negative")
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	return c.TLS.Validate()
}

// Complete reads the files the settings name: the token file is parsed
// and the TLS files must be there, so that a bad one is a configuration
// error before anything binds. New reads them again.
func (c Config) Complete() error {
	if c.AuthTokenFile != "" {
		if _, err := loadTokens(c.AuthTokenFile); err != nil {
			return err
		}
	}
	return c.TLS.Complete()
}

// Server is a gRPC server with its health service, metrics and shutdown.
type Server struct {
	cfg      Config
	log      *slog.Logger
	grpc     *grpc.Server
	health   *health.Server
	metrics  *grpcprom.ServerMetrics
	registry *prometheus.Registry

	watches *watchSlots

	lis, metricsLis, debugLis net.Listener
	stopping                  chan struct{}
	stopOnce                  sync.Once

	probe         func(context.Context) error
	probeInterval time.Duration
}

// New builds a server. Services register on GRPC() before Listen. The
// returned Registry is the process's Prometheus registry, with Go and process
// collectors and the gRPC metrics; services add their own collectors to it.
func New(cfg Config, log *slog.Logger, opts ...grpc.ServerOption) (*Server, error) {
	creds, err := cfg.TLS.ServerCredentials()
	if err != nil {
		return nil, err
	}
	if cfg.TLS.Enabled() {
		log.Info("gRPC server uses TLS", "mutual", cfg.TLS.CAFile != "")
	} else {
		log.Info("gRPC server is plaintext; pass --tls-cert and --tls-key (and --tls-ca for mutual TLS) to encrypt")
	}
	tokens, err := loadTokens(cfg.AuthTokenFile)
	if err != nil {
		return nil, err
	}
	if err := checkExposure(cfg, tokens.Len(), log); err != nil {
		return nil, err
	}
	cfg.MetricsAddr = metricsListenAddr(cfg.MetricsAddr, cfg.GRPCAddr)
	unary := []grpc.UnaryServerInterceptor{}
	stream := []grpc.StreamServerInterceptor{}
	if tokens.Len() > 0 {
		a := &authorizer{tokens: tokens, policy: cfg.Policy}
		unary, stream = append(unary, a.unary), append(stream, a.stream)
		log.Info("gRPC server requires bearer tokens", "tokens", tokens.Len())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(metrics)

	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLevel)}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in gRPC handler", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	all := append([]grpc.ServerOption{
		grpc.Creds(creds),
		// Spans for every call, with the caller's W3C trace context; a no-op
		// until obs.SetupTracing installs a provider (OTEL_* variables).
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(append(append([]grpc.UnaryServerInterceptor{
			metrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(logger, logOpts...),
		}, unary...), recovery.UnaryServerInterceptor(recoverOpt))...),
		grpc.ChainStreamInterceptor(append(append([]grpc.StreamServerInterceptor{
			metrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(logger, logOpts...),
		}, stream...), recovery.StreamServerInterceptor(recoverOpt))...),
		// Clients ping idle connections to notice dead peers quickly; allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, cfg.Limits.serverOptions()...)
	all = append(all, opts...)
	s := &Server{
		cfg:      cfg,
		log:      log,
		grpc:     grpc.NewServer(all...),
		health:   health.NewServer(),
		metrics:  metrics,
		registry: reg,
		stopping: make(chan struct{}),
		watches:  &watchSlots{max: cfg.Limits.MaxWatchesPerClient, open: map[string]int{}},
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if cfg.Reflection {
		reflection.Register(s.grpc)
	}
	return s, nil
}

// callLevel logs successful calls at debug, the caller's mistakes at info and
// the server's failures at error.
func callLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK:
		return logging.LevelDebug
	case codes.Canceled, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition,
		codes.OutOfRange, codes.DeadlineExceeded, codes.Aborted:
		return logging.LevelInfo
	case codes.Unavailable, codes.ResourceExhausted:
		return logging.LevelWarn
	default:
		return logging.LevelError
	}
}

// WatchSlot takes one of the calling client's --max-watches-per-client
// slots for a long-lived stream (a watch or a subscription); the stream calls
// release when it ends. Over the limit it returns a ResourceExhausted status.
func (s *Server) WatchSlot(ctx context.Context) (release func(), err error) {
	return s.watches.acquire(ctx)
}

// GRPC is the underlying server, for registering services.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Registry is the process's Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// SetServing sets the health status of one service ("" is the whole server).
func (s *Server) SetServing(service string, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(service, st)
}

// SetHealthProbe makes health tell the truth about what the server fronts:
// from Serve until shutdown, probe runs every interval (bounded by the
// interval, at least a second), and while it fails every service reports
// NOT_SERVING, so that load balancers and clients prefer a replica whose
// backend answers. Serve runs it once before the first status too. A serving
// server turns NOT_SERVING only after probeFailures probes in a row fail, and
// serves again at the first that passes. Call it before Serve.
func (s *Server) SetHealthProbe(interval time.Duration, probe func(context.Context) error) {
	s.probe, s.probeInterval = probe, interval
}

// probeOnce runs the probe once, bounded by the interval (at least a second).
func (s *Server) probeOnce(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, max(s.probeInterval, time.Second))
	defer cancel()
	return s.probe(pctx)
}

// probeFailures is how many probes in a row must fail before a serving
// server reports NOT_SERVING. One probe that overran its timeout while the
// machine was starved of CPU is not an outage, and replicas probing the same
// backend tend to miss together: flipping on the first miss would take every
// replica out of clients' health-checked balancers at once, and their calls
// would fail fast while the backend was answering. A backend that is really
// gone fails every probe and is reported one interval later.
const probeFailures = 2

// runProbe is the loop of SetHealthProbe, from the status serving that Serve
// set; it returns when ctx ends.
func (s *Server) runProbe(ctx context.Context, serving bool) {
	t := time.NewTicker(s.probeInterval)
	defer t.Stop()
	failed := 0 // probes failed in a row
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		case <-t.C:
		}
		err := s.probeOnce(ctx)
		if err != nil {
			failed++
		} else {
			failed = 0
		}
		if ok := failed == 0 || (serving && failed < probeFailures); ok != serving {
			serving = ok
			select {
			case <-s.stopping:
				return // shutdown owns the status now
			default:
			}
			if ok {
				s.log.Info("health probe passes again: SERVING")
			} else {
				s.log.Warn("health probe fails: NOT_SERVING", "err", err.Error())
			}
			s.SetServing("", ok)
			for name := range s.grpc.GetServiceInfo() {
				if name != healthpb.Health_ServiceDesc.ServiceName {
					s.SetServing(name, ok)
				}
			}
		}
	}
}

// Stopping is closed when shutdown begins. Long-lived streams select on it
// and end with Unavailable so that clients reconnect to another replica
// instead of holding GracefulStop open.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// Listen binds the gRPC and metrics addresses. After it, Addr is known.
func (s *Server) Listen() error {
	lis := s.cfg.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
			return fmt.Errorf("listen on --grpc-addr %s: %w", s.cfg.GRPCAddr, err)
		}
	}
	if s.cfg.MetricsAddr != "" {
		mlis, err := net.Listen("tcp", s.cfg.MetricsAddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen on --metrics-addr %s: %w", s.cfg.MetricsAddr, err)
		}
		s.metricsLis = mlis
	}
	if s.cfg.DebugAddr != "" {
		addr, err := obs.LoopbackAddr(s.cfg.DebugAddr)
		if err == nil {
			s.debugLis, err = net.Listen("tcp", addr)
		}
		if err != nil {
			lis.Close()
			if s.metricsLis != nil {
				s.metricsLis.Close()
			}
			return fmt.Errorf("listen on --debug-addr %s: %w", s.cfg.DebugAddr, err)
		}
	}
	s.lis = lis
	return nil
}

// Close releases what Listen bound and stops the server at once: the
// cleanup of a service whose startup fails between Listen and Serve. It may
// be called without Listen and more than once. A serving server stops
// through Serve's context instead.
func (s *Server) Close() error {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.grpc.Stop()
	var errs []error
	for _, l := range []net.Listener{s.lis, s.metricsLis, s.debugLis} {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Addr is the bound gRPC address; nil before Listen.
func (s *Server) Addr() net.Addr {
	if s.lis == nil {
		return nil
	}
	return s.lis.Addr()
}

// DebugAddr is the bound pprof address; nil when --debug-addr is off.
func (s *Server) DebugAddr() net.Addr {
	if s.debugLis == nil {
		return nil
	}
	return s.debugLis.Addr()
}

// MetricsAddr is the bound metrics address; nil when metrics are off.
func (s *Server) MetricsAddr() net.Addr {
	if s.metricsLis == nil {
		return nil
	}
	return s.metricsLis.Addr()
}

// Serve serves until ctx ends, then shuts down: health NOT_SERVING, Stopping
// closed, DrainDelay, GracefulStop bounded by ShutdownTimeout, then Stop. It
// returns nil after a shutdown caused by ctx, or the error that ended serving.
// beforeStop, when not nil, runs after NOT_SERVING and before the drain delay
// (deregister, drain consumers).
func (s *Server) Serve(ctx context.Context, beforeStop func()) error {
	if s.lis == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	s.metrics.InitializeMetrics(s.grpc)
	// With a probe, the first status is the probe's (a registry started
	// while its etcd is down says NOT_SERVING from its first answer, not a
	// probe interval later). Connections wait in the listen backlog
	// meanwhile: at most one probe timeout.
	serving := true
	if s.probe != nil {
		if err := s.probeOnce(ctx); err != nil {
			serving = false
			s.log.Warn("health probe fails at start: NOT_SERVING", "err", err.Error())
		}
	}
	s.SetServing("", serving)
	for name := range s.grpc.GetServiceInfo() {
		s.SetServing(name, serving)
	}
	s.log.Info("gRPC server listening", "addr", s.lis.Addr().String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("gRPC serve: %w", err)
		}
		return nil
	})
	var side []*http.Server
	serveHTTP := func(what string, lis net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		side = append(side, srv)
		s.log.Info(what+" listening", "addr", lis.Addr().String())
		g.Go(func() error {
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("%s serve: %w", what, err)
			}
			return nil
		})
	}
	if s.metricsLis != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
		serveHTTP("metrics", s.metricsLis, mux)
	}
	if s.debugLis != nil {
		serveHTTP("debug (pprof)", s.debugLis, obs.DebugHandler())
	}
	if s.probe != nil {
		g.Go(func() error {
			s.runProbe(gctx, serving)
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		s.shutdown(beforeStop)
		for _, srv := range side {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
		}
		return nil
	})
	return g.Wait()
}

func (s *Server) shutdown(beforeStop func()) {
	s.stopOnce.Do(func() {
		s.log.Info("shutting down", "drain_delay", s.cfg.DrainDelay.String())
		s.health.Shutdown() // every service NOT_SERVING
		close(s.stopping)
		if beforeStop != nil {
			beforeStop()
		}
		time.Sleep(s.cfg.DrainDelay)
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		timeout := s.cfg.ShutdownTimeout
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-done:
			s.log.Info("gRPC server stopped gracefully")
		case <-t.C:
			s.log.Warn("graceful stop timed out; cutting in-flight calls", "timeout", timeout.String())
			s.grpc.Stop()
			<-done
		}
	})
}
