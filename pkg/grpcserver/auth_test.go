package grpcserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
)

// echoDesc is a two-method service for the interceptor tests: a unary Call
// that counts its invocations and a server stream Watch that holds a watch
// slot until the client leaves.
const (
	methodCall  = "/test.Echo/Call"
	methodWatch = "/test.Echo/Watch"
)

type echo struct {
	srv   *Server
	calls chan []authtoken.Role
}

func registerEcho(s *Server) *echo {
	e := &echo{srv: s, calls: make(chan []authtoken.Role, 16)}
	s.GRPC().RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := new(emptypb.Empty)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				c, _ := CallerFrom(ctx)
				e.calls <- c.Roles
				return &emptypb.Empty{}, nil
			}
			if in == nil {
				return h(ctx, req)
			}
			return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodCall}, h)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Watch", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			release, err := e.srv.WatchSlot(ss.Context())
			if err != nil {
				return err
			}
			defer release()
			if err := ss.SendMsg(&emptypb.Empty{}); err != nil {
				return err
			}
			<-ss.Context().Done()
			return nil
		}}},
	}, e)
	return e
}

func startAuth(t *testing.T, cfg Config) (*Server, *echo) {
	t.Helper()
	cfg.GRPCAddr = "127.0.0.1:0"
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e := registerEcho(s)
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
	return s, e
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func call(ctx context.Context, cc *grpc.ClientConn, token string) error {
	opts := []grpc.CallOption{}
	if token != "" {
		opts = append(opts, grpc.PerRPCCredentials(authtoken.Bearer(token)))
	}
	return cc.Invoke(ctx, methodCall, &emptypb.Empty{}, &emptypb.Empty{}, opts...)
}

func TestAuthRoles(t *testing.T) {
	tokens := writeFile(t, "# tokens of the test\nworker w-secret\nrouter "+authtoken.Hash("r-secret")+"\nadmin a-secret\n\nfrontend r-secret\n")
	s, e := startAuth(t, Config{AuthTokenFile: tokens, Policy: Policy{methodCall: {authtoken.RoleRouter}}})
	cc := dial(t, s.Addr().String(), insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	tests := []struct {
		name  string
		token string
		raw   string // an authorization value sent as is, instead of token
		code  codes.Code
	}{
		{name: "no token", code: codes.Unauthenticated},
		{name: "unknown token", token: "guess", code: codes.Unauthenticated},
		{name: "not bearer", raw: "Basic dXNlcjpwYXNz", code: codes.Unauthenticated},
		{name: "the digest itself is no token", token: authtoken.Hash("r-secret"), code: codes.Unauthenticated},
		{name: "role not allowed", token: "w-secret", code: codes.PermissionDenied},
		{name: "allowed role from a hashed entry", token: "r-secret", code: codes.OK},
		{name: "admin may call everything", token: "a-secret", code: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.raw != "" {
				err = cc.Invoke(ctx, methodCall, &emptypb.Empty{}, &emptypb.Empty{}, grpc.PerRPCCredentials(rawAuth(tt.raw)))
			} else {
				err = call(ctx, cc, tt.token)
			}
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.code)
			}
			if tt.code != codes.OK {
				select {
				case <-e.calls:
					t.Fatal("the handler ran for a refused call")
				default:
				}
				return
			}
			roles := <-e.calls
			if len(roles) == 0 {
				t.Fatal("the handler saw no caller roles")
			}
		})
	}

	// Health is open to probes without tokens; reflection is off unless
	// the flag turns it on.
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a token: %v", err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx, grpc.PerRPCCredentials(authtoken.Bearer("a-secret")))
	if err == nil {
		// Send returns io.EOF once the server has ended the stream; the
		// stream's status is then what Recv returns.
		_ = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection without --reflection: %v, want Unimplemented", err)
	}
}

type rawAuth string

func (r rawAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(r)}, nil
}
func (rawAuth) RequireTransportSecurity() bool { return false }

func TestReflectionNeedsAToken(t *testing.T) {
	s, _ := startAuth(t, Config{AuthTokenFile: writeFile(t, "worker w\n"), Reflection: true})
	cc := dial(t, s.Addr().String(), insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := func(opts ...grpc.CallOption) error {
		stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx, opts...)
		if err != nil {
			return err
		}
		// Send answers io.EOF once the server has ended the stream (as the
		// auth interceptor refusing it does); the stream's status is then
		// what Recv returns.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	if err := list(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("reflection without a token: %v, want Unauthenticated", err)
	}
	if err := list(grpc.PerRPCCredentials(authtoken.Bearer("w"))); err != nil {
		t.Fatalf("reflection with a worker token: %v", err)
	}
}

func TestRequireAuthAndExposure(t *testing.T) {
	tokens := writeFile(t, "admin a\n")
	tests := []struct {
		name string
		cfg  Config
		err  error
	}{
		{name: "loopback without auth starts", cfg: Config{GRPCAddr: "127.0.0.1:0"}},
		{name: "all interfaces without auth starts with a warning", cfg: Config{GRPCAddr: ":0"}},
		{name: "require-auth without auth fails", cfg: Config{GRPCAddr: "127.0.0.1:0", RequireAuth: true}, err: ErrNoAuth},
		{name: "require-auth with tokens starts", cfg: Config{GRPCAddr: ":0", RequireAuth: true, AuthTokenFile: tokens}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, slog.New(slog.DiscardHandler))
			if !errors.Is(err, tt.err) {
				t.Fatalf("New = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestIsLoopbackAndMetricsAddr(t *testing.T) {
	loop := map[string]bool{
		"127.0.0.1:7001": true, "localhost:7001": true, "[::1]:7001": true, "127.0.0.2:1": true,
		":7001": false, "0.0.0.0:7001": false, "[::]:7001": false, "10.0.0.1:7001": false, "example.com:7001": false,
	}
	for addr, want := range loop {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
	metrics := []struct{ metrics, grpc, want string }{
		{":9101", "127.0.0.1:7001", "127.0.0.1:9101"},
		{":9101", ":7001", ":9101"},
		{"0.0.0.0:9101", "127.0.0.1:7001", "0.0.0.0:9101"},
		{"", "127.0.0.1:7001", ""},
		{":9101", "[::1]:7001", "[::1]:9101"},
	}
	for _, m := range metrics {
		if got := metricsListenAddr(m.metrics, m.grpc); got != m.want {
			t.Errorf("metricsListenAddr(%q, %q) = %q, want %q", m.metrics, m.grpc, got, m.want)
		}
	}
}

func TestWatchesPerClient(t *testing.T) {
	tokens := writeFile(t, "router r1\nrouter r2\n")
	s, _ := startAuth(t, Config{AuthTokenFile: tokens, Limits: Limits{MaxWatchesPerClient: 2},
		Policy: Policy{methodWatch: {authtoken.RoleRouter}}})
	cc := dial(t, s.Addr().String(), insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	desc := &grpc.StreamDesc{ServerStreams: true}
	open := func(ctx context.Context, token string) error {
		st, err := cc.NewStream(ctx, desc, methodWatch, grpc.PerRPCCredentials(authtoken.Bearer(token)))
		if err != nil {
			return err
		}
		if err := st.SendMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		if err := st.CloseSend(); err != nil {
			return err
		}
		return st.RecvMsg(new(emptypb.Empty))
	}
	first, cancelFirst := context.WithCancel(ctx)
	for i := 0; i < 2; i++ {
		if err := open(first, "r1"); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	if err := open(ctx, "r1"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third watch of one token: %v, want ResourceExhausted", err)
	}
	if err := open(ctx, "r2"); err != nil {
		t.Fatalf("another token's watch: %v", err)
	}
	cancelFirst()
	// The slots come back once the server sees the streams end.
	for {
		err := open(ctx, "r1")
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("watch after closing: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the slots never came back")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestNamespaceChecker: the checker read once from a call's context answers
// as CheckNamespace does for callers limited to namespaces, callers that
// are not, and servers without tokens.
func TestNamespaceChecker(t *testing.T) {
	t.Parallel()
	limited := context.WithValue(context.Background(), callerKey{}, Caller{Namespaces: []string{"team-a", "team-c"}})
	unlimited := context.WithValue(context.Background(), callerKey{}, Caller{Roles: []authtoken.Role{authtoken.RoleWorker}})
	for _, tc := range []struct {
		name string
		ctx  context.Context
		ns   string
		want codes.Code
	}{
		{"limited, its namespace", limited, "team-c", codes.OK},
		{"limited, another", limited, "team-b", codes.PermissionDenied},
		{"unlimited", unlimited, "team-b", codes.OK},
		{"no tokens", context.Background(), "team-b", codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := NamespaceChecker(tc.ctx)
			for range 2 {
				if got := status.Code(check(tc.ns)); got != tc.want {
					t.Errorf("checker: %v, want %v", got, tc.want)
				}
			}
			if got := status.Code(CheckNamespace(tc.ctx, tc.ns)); got != tc.want {
				t.Errorf("CheckNamespace: %v, want %v", got, tc.want)
			}
		})
	}
}
