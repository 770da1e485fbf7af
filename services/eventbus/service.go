// Package eventbus is Switchyard's event plane: a gRPC service
// (switchyard.eventbus.v1.EventBusService) in front of NATS JetStream. Events
// are published on {namespace}.{component}.{event_name} subjects into one
// persistent stream per namespace, and read back through pull consumers,
// ephemeral or durable, shared by the members of a consumer group, with
// explicit acknowledgement and redelivery. It also offers an object store with
// sha256-checked objects. When NATS_SERVER is unset it runs its own embedded
// nats-server with JetStream under --data-dir and talks to it in process.
//
// Acknowledgement is a unary Ack RPC rather than a bidi stream: Subscribe
// hands out each event's JetStream ack subject as an opaque ack token, and Ack
// passes tokens (in batches) back to NATS. Any eventbus replica can therefore
// acknowledge any event, so acks keep working across a failover, and the
// delivery stream stays a plain server stream. An event not acknowledged
// within its subscription's ack wait is delivered again; Ack with nak asks for
// that at once.
//
// Errors are domain sentinels (ErrInvalid, ErrNotFound, ErrUnavailable,
// ErrDataLoss) wrapped with context; server.go maps them to gRPC codes.
//
// The package is importable: Start runs the service in process (tests, an
// all-in-one binary); Run is what cmd/eventbus calls.
package eventbus

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// MaxMessageSize is the largest gRPC message the eventbus accepts and its
// client library receives: one event at NATS's largest max_payload (64 MiB)
// with room for its envelope.
const MaxMessageSize = 65 << 20

// Service is a running eventbus.
type Service struct {
	log     *slog.Logger
	grpc    *grpcserver.Server
	ns      *natsserver.Server // embedded nats-server; nil with NATS_SERVER
	natsURL string

	mu    sync.Mutex
	nc    *nats.Conn // publishing; nil until NATS is reached
	subNC *nats.Conn // consuming

	// watches are the jsWatch loops (minority.go), one per connection.
	watches sync.WaitGroup
	// coalesce is the bus's coalescer once connected; its senders end
	// with the service's context.
	coalesce *coalescer

	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	stopOnce sync.Once
}

// Start connects to NATS (starting the embedded nats-server when
// cfg.NATSServer is empty), binds the gRPC and metrics addresses and serves in
// the background. It returns once the service is listening. When an external
// NATS is not reachable yet, the service serves anyway: NOT_SERVING on health,
// Unavailable on every call, while it retries in the background (startup.go);
// only errors no retry fixes fail Start. The service stops when ctx ends or
// Stop is called; Wait returns its error.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NATSServer != "" && cfg.NATSTLS.Enabled() {
		// TLS files that do not load fail now, not after NATS answers.
		if _, err := cfg.NATSTLS.ClientTLS(); err != nil {
			return nil, fmt.Errorf("NATS TLS: %w", err)
		}
	}
	if cfg.NATSServer != "" && cfg.NATSCreds != "" {
		// nats.go reads it only once a server answers.
		if _, err := os.ReadFile(cfg.NATSCreds); err != nil {
			return nil, fmt.Errorf("NATS credentials file (--nats-creds): %w", err)
		}
	}
	s := &Service{log: log, done: make(chan struct{})}
	url := cfg.NATSServer
	if url == "" {
		ns, err := StartEmbeddedNATS(embeddedStoreDir(cfg.DataDir), cfg.EmbeddedNATSPort, log)
		if err != nil {
			return nil, err
		}
		s.ns = ns
		url = ns.ClientURL()
		log.Info("started embedded nats-server with JetStream; set NATS_SERVER to use an external one",
			"url", url, "store_dir", embeddedStoreDir(cfg.DataDir))
	}
	s.natsURL = url
	ctx, s.cancel = context.WithCancel(ctx)
	b, connErr := s.connectOnce(ctx, cfg)
	if connErr != nil && (s.ns != nil || !retryableConnect(connErr) || cfg.maxReconnects() == 0) {
		if s.ns == nil && retryableConnect(connErr) {
			connErr = fmt.Errorf("%w (--nats-max-reconnects 0: not retried)", connErr)
		}
		s.cancel()
		s.closeNATS()
		return nil, connErr
	}
	cfg.Server.Policy = Policy
	g := &gate{}
	// Room for one event at the largest max_payload NATS allows (64 MiB),
	// with its envelope.
	gs, err := grpcserver.New(cfg.Server, log, grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream))
	if err != nil {
		s.cancel()
		s.closeNATS()
		return nil, err
	}
	s.grpc = gs
	gs.SetHealthProbe(time.Second, func(context.Context) error {
		if !g.ready.Load() {
			return errNotConnected
		}
		for _, c := range s.conns() {
			if st := c.Status(); st != nats.CONNECTED {
				return fmt.Errorf("NATS connection is %s", st)
			}
		}
		return nil
	})
	srv := &server{metrics: newMetrics(gs.Registry()), stopping: gs.Stopping(), watchSlot: gs.WatchSlot, pace: newPacer(cfg.publishRateTarget(), time.Now())}
	eventbusv1.RegisterEventBusServiceServer(gs.GRPC(), srv)
	gs.Registry().MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_eventbus_publish_interval_seconds",
		Help: "Least time the eventbus asks each publisher to leave between two batches it may merge (0: at once), while its publishers together send more batches a second than --publish-rate-target.",
	}, func() float64 { return time.Duration(srv.pace.interval.Load()).Seconds() }))
	// ready opens the gate; the atomic store orders the fields' writes
	// before every call that passes it.
	moves := newMovesCounter(gs.Registry())
	ready := func(b *bus) {
		srv.bus, srv.objects = b, &objects{js: b.js}
		s.mu.Lock()
		s.coalesce = b.coalesce
		s.mu.Unlock()
		gs.Registry().MustRegister(newLagCollector(b), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "switchyard_eventbus_envelopes_total",
			Help: "Stream messages stored holding several events of a busy subject (--coalesce-events).",
		}, func() float64 { return float64(b.coalesce.envelopes.Load()) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "switchyard_eventbus_enveloped_events_total",
			Help: "Events stored in those messages.",
		}, func() float64 { return float64(b.coalesce.events.Load()) }))
		g.ready.Store(true)
		logConnected(log, cfg, b.nc)
		s.watchJetStream(ctx, map[string]*nats.Conn{"publishing": b.nc, "consuming": b.subNC}, moves)
	}
	if err := gs.Listen(); err != nil {
		s.cancel()
		s.closeNATS()
		return nil, err
	}
	setupDone := make(chan struct{})
	var setupErr error
	if connErr == nil {
		ready(b)
		close(setupDone)
	} else {
		go func() {
			defer close(setupDone)
			if setupErr = s.connectLoop(ctx, cfg, connErr, ready); setupErr != nil {
				log.Error("cannot connect to NATS; giving up", "url", url, "err", setupErr.Error())
				s.cancel()
			}
		}()
	}
	go func() {
		defer close(s.done)
		s.err = gs.Serve(ctx, nil)
		<-setupDone
		if setupErr != nil {
			s.err = setupErr
		}
		s.cancel()
		s.watches.Wait()
		s.mu.Lock()
		co := s.coalesce
		s.mu.Unlock()
		if co != nil {
			co.wait()
		}
		s.closeNATS()
	}()
	return s, nil
}

// Run runs the eventbus until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Addr is the bound gRPC address.
func (s *Service) Addr() net.Addr { return s.grpc.Addr() }

// MetricsAddr is the bound metrics address; nil when metrics are off.
func (s *Service) MetricsAddr() net.Addr { return s.grpc.MetricsAddr() }

// NATSURL is the URL of the NATS server the service uses: the embedded one's
// when it runs one.
func (s *Service) NATSURL() string { return s.natsURL }

// Stop begins a graceful shutdown and waits for it; it returns Wait's error.
func (s *Service) Stop() error {
	s.cancel()
	return s.Wait()
}

// Wait waits until the service has stopped and returns why: nil after a
// shutdown asked for through ctx or Stop.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}

// watchJetStream starts a jsWatch on each connection, until ctx ends.
func (s *Service) watchJetStream(ctx context.Context, conns map[string]*nats.Conn, moves prometheus.Counter) {
	for name, nc := range conns {
		w, err := newJSWatch(name, nc, moves, s.log)
		if err != nil {
			s.log.Warn("cannot watch JetStream through the NATS connection", "connection", name, "err", err.Error())
			continue
		}
		s.watches.Add(1)
		go func() {
			defer s.watches.Done()
			w.run(ctx)
		}()
	}
}

// conns is the NATS connections once made: none before.
func (s *Service) conns() []*nats.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc == nil {
		return nil
	}
	return []*nats.Conn{s.nc, s.subNC}
}

// closeNATS drains the NATS connection and shuts the embedded server down.
func (s *Service) closeNATS() {
	s.stopOnce.Do(func() {
		for _, nc := range s.conns() {
			nc.Close()
		}
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
			s.log.Info("embedded nats-server stopped")
		}
	})
}
