package eventbus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestEventbusStartsBeforeNATS starts the eventbus while its NATS is not
// there: it serves, says NOT_SERVING and Unavailable, and once NATS starts
// on that port it becomes SERVING and publishes and delivers.
func TestEventbusStartsBeforeNATS(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	port := eventbustest.ReserveNATSPort(t)
	svc := eventbustest.StartEventbus(t, eventbustest.Config(fmt.Sprintf("nats://127.0.0.1:%d", port)))

	conn, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	health := healthpb.NewHealthClient(conn)
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health before NATS: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before NATS = %v, want NOT_SERVING", resp.GetStatus())
	}
	raw := eventbusv1.NewEventBusServiceClient(conn)
	ev := &eventbusv1.Event{Subject: "early.comp.ev"}
	_, err = raw.Publish(ctx, &eventbusv1.PublishRequest{Event: ev})
	if !apierr.Is(err, codes.Unavailable, apierr.ReasonBackendUnavailable) {
		t.Fatalf("publish before NATS: %v, want Unavailable %s", err, apierr.ReasonBackendUnavailable)
	}
	stream, err := raw.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "early", AutoAck: true})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("subscribe before NATS: %v, want Unavailable", err)
	}

	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("first health watch status = %v, %v; want NOT_SERVING", first.GetStatus(), err)
	}
	eventbustest.StartNATSAt(t, port, t.TempDir())
	for {
		r, err := watch.Recv()
		if err != nil {
			t.Fatalf("health watch after NATS started: %v", err)
		}
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}

	c := eventbustest.Client(t, svc.Addr().String())
	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "early",
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true})
	if err != nil {
		t.Fatalf("subscribe after NATS started: %v", err)
	}
	defer sub.Close()
	publishN(ctx, t, c, "early.comp.ev", 0, 3)
	if got, _ := next(ctx, t, sub, 3, false); fmt.Sprint(got) != fmt.Sprint(seq(0, 3)) {
		t.Fatalf("delivered %v, want %v", got, seq(0, 3))
	}
}

// TestEventbusFailsFastOnConfig: what no retry fixes fails Start at once,
// with an error that says what is wrong, even while NATS is down.
func TestEventbusFailsFastOnConfig(t *testing.T) {
	t.Parallel()
	// A nats-server that wants a token.
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, Authorization: "right-token"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { eventbustest.StopNATS(ns) })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	down := "nats://" + testport.Refusing(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")

	tests := []struct {
		name    string
		edit    func(*eventbus.Config)
		wantErr string
	}{
		{name: "TLS CA file missing, NATS down", wantErr: "missing.pem",
			edit: func(c *eventbus.Config) { c.NATSServer, c.NATSTLS = down, tlsconfig.Config{CAFile: missing} }},
		{name: "URL that does not parse", wantErr: "NATS_SERVER",
			edit: func(c *eventbus.Config) { c.NATSServer = "nats://[::1" }},
		{name: "credentials file missing, NATS down", wantErr: "missing.pem",
			edit: func(c *eventbus.Config) { c.NATSServer, c.NATSCreds = down, missing }},
		{name: "wrong token", wantErr: "authorization",
			edit: func(c *eventbus.Config) { c.NATSServer, c.NATSToken = ns.ClientURL(), "wrong-token" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := eventbustest.Config("")
			tc.edit(&cfg)
			svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
			if err == nil {
				svc.Stop()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.wantErr)) {
				t.Errorf("error %q does not name %q", err, tc.wantErr)
			}
		})
	}
}

// TestEventbusGivesUpOnConfigLater: an eventbus that started before its
// NATS and then finds a NATS that refuses its credentials stops with that
// error instead of retrying forever.
func TestEventbusGivesUpOnConfigLater(t *testing.T) {
	t.Parallel()
	// The port is held until NATS takes it (a port closed and bound later
	// can become another test process's meanwhile).
	port := eventbustest.ReserveNATSPort(t)
	cfg := eventbustest.Config(fmt.Sprintf("nats://127.0.0.1:%d", port))
	cfg.NATSToken = "wrong-token"
	svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
	if err != nil {
		t.Fatalf("start with NATS down: %v", err)
	}
	eventbustest.StartNATSWithOptions(t, &natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, Authorization: "right-token"})
	done := make(chan error, 1)
	go func() { done <- svc.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("eventbus stopped with %v, want an authorization error", err)
		}
	case <-time.After(guard):
		svc.Stop()
		t.Fatal("eventbus still retrying a NATS that refuses its token")
	}
}

// TestNATSMaxReconnectsBoundsStartup: --nats-max-reconnects means the same
// at startup as after a disconnection. With 0 an eventbus whose NATS is not
// there fails Start at once; with N it serves NOT_SERVING, retries the first
// connection N times and then stops, Wait saying why; -1 is the forever of
// TestEventbusStartsBeforeNATS.
func TestNATSMaxReconnectsBoundsStartup(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{0, 2} {
		t.Run(fmt.Sprintf("max %d", retries), func(t *testing.T) {
			cfg := eventbustest.Config("nats://" + testport.Refusing(t))
			cfg.NATSMaxReconnects, cfg.NATSReconnectWait = retries, 50*time.Millisecond
			logs := &retryLog{}
			svc, err := eventbus.Start(context.Background(), cfg, slog.New(logs))
			if retries == 0 {
				if err == nil {
					svc.Stop()
					t.Fatal("Start succeeded without NATS and with --nats-max-reconnects 0")
				}
				if !errors.Is(err, nats.ErrNoServers) || !strings.Contains(err.Error(), "--nats-max-reconnects 0") {
					t.Fatalf("Start = %v; want no servers, naming --nats-max-reconnects 0", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("start with NATS down: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- svc.Wait() }()
			select {
			case err := <-done:
				if !errors.Is(err, eventbus.ErrUnavailable) || !errors.Is(err, nats.ErrNoServers) ||
					!strings.Contains(err.Error(), fmt.Sprintf("after %d retries", retries)) {
					t.Fatalf("eventbus stopped with %v; want Unavailable after %d retries", err, retries)
				}
			case <-time.After(guard):
				svc.Stop()
				t.Fatalf("eventbus still retrying after %d retries", retries)
			}
			if got := logs.count(); got != retries {
				t.Errorf("%d retries logged; want %d", got, retries)
			}
		})
	}
}

// retryLog counts the eventbus's "retrying" warnings.
type retryLog struct {
	mu sync.Mutex
	n  int
}

func (l *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *retryLog) WithGroup(string) slog.Handler            { return l }
func (l *retryLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "NATS is not reachable yet") {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
	return nil
}

func (l *retryLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}
