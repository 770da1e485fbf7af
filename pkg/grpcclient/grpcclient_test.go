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

// serveNamed starts a server with the health service, reporting the whole
// server's status as given and SERVING for a service called name, so that
// a Check of name succeeds on this server alone.
func serveNamed(t *testing.T, name string, serving bool) (string, *health.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	if !serving {
		h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(s, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String(), h
}

// TestPreferServing puts a replica that is up but NOT_SERVING first in the
// list. Plain pick_first stays on it; with PreferServing every call goes to
// the serving one, and when the two swap, calls follow.
func TestPreferServing(t *testing.T) {
	for _, prefer := range []bool{false, true} {
		t.Run(map[bool]string{false: "pick first", true: "prefer serving"}[prefer], func(t *testing.T) {
			a, ha := serveNamed(t, "a", false)
			b, hb := serveNamed(t, "b", true)
			cc, err := grpcclient.Dial("test", []string{a, b}, grpcclient.Options{PreferServing: prefer})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			hc := healthpb.NewHealthClient(cc)
			reached := func(name string) int {
				n := 0
				for range 20 {
					if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name}, grpc.WaitForReady(true)); err == nil {
						n++
					}
				}
				return n
			}
			if !prefer {
				if n := reached("b"); n != 0 {
					t.Fatalf("pick_first reached the second replica %d times of 20", n)
				}
				return
			}
			if n := reached("b"); n != 20 {
				t.Fatalf("%d of 20 calls reached the serving replica", n)
			}
			// Swap: a serves, b does not. The client hears it on its health
			// watch; wait (bounded) for the first call to reach a.
			ha.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			hb.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			for i := 0; ; i++ {
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "a"}, grpc.WaitForReady(true)); err == nil {
					break
				}
				if i == 1000 || ctx.Err() != nil {
					t.Fatal("no call reached the replica that serves now")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := reached("a"); n != 20 {
				t.Fatalf("after the swap %d of 20 calls reached the serving replica", n)
			}
		})
	}
}
