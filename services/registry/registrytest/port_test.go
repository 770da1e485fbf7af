package registrytest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStoppedServicesKeepTheirPorts: while a test has its registry or etcd
// stopped, nobody else can bind their ports (other test processes bind
// 127.0.0.1:0 all the time), a client is refused at once, and the service
// started again on its address serves there.
func TestStoppedServicesKeepTheirPorts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, reg := registrytest.Start(t)
	addr := reg.Addr

	health := func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, err
		}
		defer cc.Close()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		r, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return 0, err
		}
		return r.Status, nil
	}
	if st, err := health(); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", st, err)
	}

	reg.Stop()
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("another listener could bind the stopped registry's address %s", addr)
	}
	// Refused (Unavailable), not left to hang until the deadline.
	if st, err := health(); status.Code(err) != codes.Unavailable {
		t.Fatalf("health of a stopped registry = %v, %v; want Unavailable", st, err)
	}

	etcd.Stop()
	// Taken: no port the kernel chooses for another listener lands on it.
	if taken, err := testport.Taken(etcd.Endpoints[0][len("http://"):]); err != nil || !taken {
		t.Fatalf("the stopped etcd's client port %s is free (%v)", etcd.Endpoints[0], err)
	}
	if _, err := net.Dial("tcp", etcd.Endpoints[0][len("http://"):]); err == nil {
		t.Fatalf("a connection to the stopped etcd's client port %s was taken", etcd.Endpoints[0])
	}
	etcd.Start()

	registrytest.StartRegistryAt(t, etcd.Endpoints, addr)
	for {
		st, err := health()
		if err == nil && st == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the registry started again on %s: health %v, %v", addr, st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
