package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
)

// The first connection to NATS. An eventbus may start before NATS does (a
// fleet coming up at once, NATS restarting): it then serves gRPC at once,
// says NOT_SERVING on health and Unavailable to every EventBusService call,
// and keeps trying with jittered backoff until NATS answers, then runs its
// setup (connections, publisher, JetStream check) and serves. Only what no
// retry fixes fails Start: flags, TLS files, credentials, a refused TLS
// handshake or authorization. --nats-max-reconnects bounds the retries as
// it bounds reconnections: 0 fails Start at once, N gives up after N
// retries (Wait returns why), -1 (the default) never does.

// connectBackoff paces the first-connection attempts; each attempt is
// bounded by nats.go's dial timeout and setupTimeout.
var connectBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// setupTimeout bounds the JetStream check of one attempt.
const setupTimeout = 5 * time.Second

// errNotConnected answers every EventBusService call until the first
// connection to NATS is set up.
var errNotConnected = fmt.Errorf("%w: the eventbus has not reached NATS yet; retry, or use another eventbus", ErrUnavailable)

// gate holds back the EventBusService calls until the service is ready;
// health and reflection pass. It runs after authentication, so an
// unauthenticated caller still learns that first.
type gate struct{ ready atomic.Bool }

func (g *gate) held(method string) bool {
	return !g.ready.Load() && strings.HasPrefix(method, "/"+eventbusv1.EventBusService_ServiceDesc.ServiceName+"/")
}

func (g *gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if g.held(info.FullMethod) {
		return nil, toStatus(errNotConnected)
	}
	return handler(ctx, req)
}

func (g *gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if g.held(info.FullMethod) {
		return toStatus(errNotConnected)
	}
	return handler(srv, ss)
}

// connectOnce makes the two NATS connections and the bus over them and
// checks that JetStream answers. On failure it closes what it opened.
func (s *Service) connectOnce(ctx context.Context, cfg Config) (*bus, error) {
	nc, err := connectNATS(cfg, s.natsURL, s.ns, s.log)
	if err != nil {
		return nil, err
	}
	subNC, err := connectNATS(cfg, s.natsURL, s.ns, s.log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b, err := newBus(nc, subNC, cfg, s.log)
	if err == nil {
		b.coalesce = newCoalescer(ctx, b, cfg.coalesceEvents(), cfg.CoalesceGap)
		// A server without JetStream, or a cluster without a meta leader
		// yet, accepts connections but cannot store a thing.
		actx, cancel := context.WithTimeout(ctx, setupTimeout)
		_, err = b.js.AccountInfo(actx)
		cancel()
		if err != nil {
			err = fmt.Errorf("%w on NATS %s: %w", errJetStreamNotReady, s.natsURL, err)
		}
	}
	if err != nil {
		nc.Close()
		subNC.Close()
		return nil, err
	}
	s.mu.Lock()
	s.nc, s.subNC = nc, subNC
	s.mu.Unlock()
	return b, nil
}

// connectLoop retries connectOnce until it succeeds (then ready runs), ctx
// ends (nil), an attempt fails in a way no retry fixes (that error) or
// --nats-max-reconnects retries have failed (ErrUnavailable with the last
// error): the flag bounds the first connection as it bounds reconnections.
func (s *Service) connectLoop(ctx context.Context, cfg Config, first error, ready func(*bus)) error {
	bo := backoff.New(connectBackoff)
	err := first
	limit := cfg.maxReconnects()
	for attempt := 1; ; attempt++ {
		if limit >= 0 && attempt > limit {
			return fmt.Errorf("%w: NATS %s not reachable after %d retries (--nats-max-reconnects %d): %w", ErrUnavailable, s.natsURL, limit, limit, err)
		}
		d := bo.Next()
		s.log.Warn("NATS is not reachable yet; serving NOT_SERVING and retrying",
			"url", s.natsURL, "attempt", attempt, "retry_in", d.String(), "err", err.Error())
		if backoff.Sleep(ctx, d) != nil {
			return nil
		}
		var b *bus
		if b, err = s.connectOnce(ctx, cfg); err == nil {
			ready(b)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if !retryableConnect(err) {
			return err
		}
	}
}

// retryableConnect tells a NATS that is not there yet from a configuration
// no retry fixes. Retried: no server took the connection (refused: nats.go's
// ErrNoServers), a dial that failed or timed out, a name that does not
// resolve yet, a server that did not answer in time (nats.go's ErrTimeout,
// or the i/o timeout of a connection accepted and never answered: a NATS
// still starting behind its port, a load balancer with no backend yet), a
// JetStream not ready.
// Everything after a connection was made fails: a TLS handshake either side
// refuses (with TLS 1.3 the server's refusal of a client certificate may
// come as an alert, a reset or an EOF after the handshake), a wrong password
// or token, a credentials file that does not load.
func retryableConnect(err error) bool {
	var (
		opErr  *net.OpError
		dnsErr *net.DNSError
	)
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errJetStreamNotReady) ||
		errors.As(err, &dnsErr) || errors.As(err, &opErr) && opErr.Op == "dial"
}

// errJetStreamNotReady is a server that answers without JetStream: not
// enabled yet, or a cluster still electing its meta leader.
var errJetStreamNotReady = errors.New("JetStream does not answer")

// logConnected logs the effective connection once.
func logConnected(log *slog.Logger, cfg Config, nc *nats.Conn) {
	log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted(), "max_payload", nc.MaxPayload(),
		"stream_max_age", cfg.StreamMaxAge.String(), "grpc_addr", cfg.Server.GRPCAddr, "metrics_addr", cfg.Server.MetricsAddr)
}
