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
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	nc      *nats.Conn         // publishing
	subNC   *nats.Conn         // consuming
	ns      *natsserver.Server // embedded nats-server; nil with NATS_SERVER
	natsURL string

	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	stopOnce sync.Once
}

// Start connects to NATS (starting the embedded nats-server when
// cfg.NATSServer is empty), binds the gRPC and metrics addresses and serves in
// the background. It returns once the service is listening. The service stops
// when ctx ends or Stop is called; Wait returns its error.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
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
	nc, err := connectNATS(cfg, url, s.ns, log)
	if err != nil {
		s.closeNATS()
		return nil, err
	}
	s.nc = nc
	if s.subNC, err = connectNATS(cfg, url, s.ns, log); err != nil {
		s.closeNATS()
		return nil, err
	}
	log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted(), "max_payload", nc.MaxPayload(),
		"stream_max_age", cfg.StreamMaxAge.String(), "grpc_addr", cfg.Server.GRPCAddr, "metrics_addr", cfg.Server.MetricsAddr)
	b, err := newBus(nc, s.subNC, cfg, log)
	if err != nil {
		s.closeNATS()
		return nil, err
	}
	cfg.Server.Policy = Policy
	// Room for one event at the largest max_payload NATS allows (64 MiB),
	// with its envelope.
	gs, err := grpcserver.New(cfg.Server, log, grpc.MaxRecvMsgSize(MaxMessageSize))
	if err != nil {
		s.closeNATS()
		return nil, err
	}
	s.grpc = gs
	gs.SetHealthProbe(time.Second, func(context.Context) error {
		for _, c := range []*nats.Conn{nc, s.subNC} {
			if st := c.Status(); st != nats.CONNECTED {
				return fmt.Errorf("NATS connection is %s", st)
			}
		}
		return nil
	})
	gs.Registry().MustRegister(newLagCollector(b))
	eventbusv1.RegisterEventBusServiceServer(gs.GRPC(), &server{
		bus: b, objects: &objects{js: b.js}, metrics: newMetrics(gs.Registry()), stopping: gs.Stopping(), watchSlot: gs.WatchSlot,
	})
	if err := gs.Listen(); err != nil {
		s.closeNATS()
		return nil, err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go func() {
		defer close(s.done)
		s.err = gs.Serve(ctx, nil)
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

// closeNATS drains the NATS connection and shuts the embedded server down.
func (s *Service) closeNATS() {
	s.stopOnce.Do(func() {
		for _, nc := range []*nats.Conn{s.nc, s.subNC} {
			if nc != nil {
				nc.Close()
			}
		}
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
			s.log.Info("embedded nats-server stopped")
		}
	})
}
