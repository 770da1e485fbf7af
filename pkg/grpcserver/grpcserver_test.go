package grpcserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig/tlsconfigtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs a server until the test ends and returns it once it is serving.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestHealthReflectionMetrics(t *testing.T) {
	s := start(t, Config{MetricsAddr: "127.0.0.1:0", Reflection: true})
	cc := dial(t, s.Addr().String(), insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, want SERVING", resp.Status)
	}

	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range r.GetListServicesResponse().GetService() {
		names = append(names, svc.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "grpc.health.v1.Health") {
		t.Fatalf("reflection lists %v, want grpc.health.v1.Health among them", names)
	}
	stream.CloseSend()

	res, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `grpc_server_handled_total{grpc_code="OK",grpc_method="Check"`) {
		t.Fatalf("/metrics lacks the health check count:\n%.2000s", body)
	}
}

func TestMutualTLS(t *testing.T) {
	files, err := tlsconfigtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Config{TLS: files.Server()})
	addr := s.Addr().String()

	tests := []struct {
		name   string
		client tlsconfig.Config
		ok     bool
	}{
		{name: "mutual TLS", client: files.Client(), ok: true},
		{name: "no client certificate", client: tlsconfig.Config{CAFile: files.CA}, ok: false},
		{name: "plaintext", client: tlsconfig.Config{}, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			creds, err := tt.client.ClientCredentials()
			if err != nil {
				t.Fatal(err)
			}
			cc := dial(t, addr, creds)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if tt.ok && err != nil {
				t.Fatalf("Check: %v", err)
			}
			if !tt.ok && err == nil {
				t.Fatal("Check succeeded, want a TLS failure")
			}
		})
	}
}

func TestTLSValidate(t *testing.T) {
	tests := []struct {
		name   string
		cfg    tlsconfig.Config
		tokens string
		want   string
	}{
		{name: "cert without key", cfg: tlsconfig.Config{CertFile: "x"}, want: "--tls-cert and --tls-key must be given together"},
		{name: "missing file", cfg: tlsconfig.Config{CAFile: "/nonexistent/ca.pem"}, want: "--tls-ca"},
		{name: "missing token file", cfg: tlsconfig.Config{}, tokens: "/nonexistent/tokens", want: "/nonexistent/tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{GRPCAddr: ":1", TLS: tt.cfg, AuthTokenFile: tt.tokens}
			err := c.Validate()
			if err == nil {
				err = c.Complete()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate+Complete = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestValidateReadsNothing: Validate passes on settings whose files do not
// exist; reading them is Complete's job.
func TestValidateReadsNothing(t *testing.T) {
	c := Config{GRPCAddr: ":1", AuthTokenFile: "/nonexistent/tokens", TLS: tlsconfig.Config{CertFile: "/nonexistent/c", KeyFile: "/nonexistent/k", CAFile: "/nonexistent/ca"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate = %v, want nil: it must not read files", err)
	}
}

// TestCloseReleasesPorts: a server whose service fails to start after
// Listen gives its gRPC, metrics and debug ports back on Close.
func TestCloseReleasesPorts(t *testing.T) {
	s, err := New(Config{GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	addrs := []string{s.Addr().String(), s.MetricsAddr().String(), s.DebugAddr().String()}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s still bound after Close: %v", a, err)
		}
		l.Close()
	}
}

func TestShutdownEndsStreamsAndReportsNotServing(t *testing.T) {
	s, err := New(Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 200 * time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	desc := grpc.ServiceDesc{
		ServiceName: "test.Block",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Hold",
			ServerStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				close(started)
				<-stream.Context().Done() // ignores Stopping: only Stop ends it
				return stream.Context().Err()
			},
		}},
	}
	s.GRPC().RegisterService(&desc, nil)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var beforeStopStatus healthpb.HealthCheckResponse_ServingStatus
	cc := dial(t, s.Addr().String(), insecure.NewCredentials())
	hc := healthpb.NewHealthClient(cc)
	done := make(chan error, 1)
	go func() {
		done <- s.Serve(ctx, func() {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err == nil {
				beforeStopStatus = r.Status
			}
		})
	}()
	stream, err := cc.NewStream(context.Background(), &desc.Streams[0], "/test.Block/Hold", grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if beforeStopStatus != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("status during drain = %v, want NOT_SERVING", beforeStopStatus)
	}
	err = stream.RecvMsg(&healthpb.HealthCheckResponse{})
	if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
		t.Fatalf("held stream ended with %v, want Unavailable after the Stop fallback", err)
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	s, err := New(Config{GRPCAddr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	desc := grpc.ServiceDesc{
		ServiceName: "test.Panic",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Boom",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := &healthpb.HealthCheckRequest{}
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(context.Context, any) (any, error) { panic("boom") }
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Panic/Boom"}, h)
			},
		}},
	}
	s.GRPC().RegisterService(&desc, nil)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, nil) }()
	defer func() { cancel(); <-done }()
	cc := dial(t, s.Addr().String(), insecure.NewCredentials())
	err = cc.Invoke(context.Background(), "/test.Panic/Boom", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Internal {
		t.Fatalf("panicking call = %v, want Internal", err)
	}
}

// TestHealthProbeFailureThreshold feeds the health probe one result per
// call and reads the status a client sees after each: a serving server
// turns NOT_SERVING only when probeFailures probes in a row fail, and
// serves again at the first that passes. Each probe call announces itself
// and then waits for the test to hand it its result, so the next call
// having begun means the loop applied the previous result.
func TestHealthProbeFailureThreshold(t *testing.T) {
	errDown := errors.New("backend down")
	s, err := New(Config{GRPCAddr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	calls, results := make(chan struct{}), make(chan error)
	s.SetHealthProbe(time.Millisecond, func(ctx context.Context) error {
		select {
		case calls <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-results:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	hc := healthpb.NewHealthClient(dial(t, s.Addr().String(), insecure.NewCredentials()))
	const (
		up   = healthpb.HealthCheckResponse_SERVING
		down = healthpb.HealthCheckResponse_NOT_SERVING
	)
	steps := []struct {
		probe error
		want  healthpb.HealthCheckResponse_ServingStatus
	}{
		{nil, up},       // the probe at start
		{errDown, up},   // one miss is not an outage
		{nil, up},       // and a pass clears it
		{errDown, up},   // a first miss again
		{errDown, down}, // the second in a row takes it out
		{errDown, down}, // it stays out while the probe fails
		{nil, up},       // and serves at the first pass
		{errDown, up},
	}
	for i := range len(steps) + 1 {
		<-calls // the probe after step i-1 began: step i-1 was applied
		if i > 0 {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if err != nil {
				t.Fatal(err)
			}
			if prev := steps[i-1]; r.Status != prev.want {
				t.Fatalf("after step %d (probe error %v): health %v, want %v", i-1, prev.probe, r.Status, prev.want)
			}
		}
		if i < len(steps) {
			results <- steps[i].probe
		}
	}
}
