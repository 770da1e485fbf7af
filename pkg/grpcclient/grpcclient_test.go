package grpcclient_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitAddrs(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{nil, nil},
		{[]string{""}, nil},
		{[]string{"a:1"}, []string{"a:1"}},
		{[]string{"a:1,b:2"}, []string{"a:1", "b:2"}},
		{[]string{" a:1 , ,b:2,", "c:3"}, []string{"a:1", "b:2", "c:3"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, grpcclient.SplitAddrs(tt.in...)); diff != "" {
			t.Errorf("SplitAddrs(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestDialNoAddress(t *testing.T) {
	for _, addrs := range [][]string{nil, {""}, {" , "}} {
		if _, err := grpcclient.Dial("test", addrs, grpcclient.Options{}); !errors.Is(err, grpcclient.ErrNoAddress) {
			t.Errorf("Dial(%q) = %v, want ErrNoAddress", addrs, err)
		}
	}
}

// serveHealth starts a gRPC server with only the health service.
func serveHealth(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

// TestDialFailsOver dials a dead address before a live one, as one
// comma-separated string and as a list: the call reaches the live one.
func TestDialFailsOver(t *testing.T) {
	good := serveHealth(t)
	for name, addrs := range map[string][]string{
		"comma list": {"127.0.0.1:1," + good},
		"list":       {"127.0.0.1:1", good},
	} {
		t.Run(name, func(t *testing.T) {
			cc, err := grpcclient.Dial("test", addrs, grpcclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("status %v", resp.Status)
			}
		})
	}
}
