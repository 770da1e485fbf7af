package router_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestSessionsSurviveReplicaRestart binds 40 sessions through two router
// replicas with replica sync (each session's first turn on one replica,
// alternating), checks that both hold every binding, then restarts one
// replica with the same --router-replica-id: it learns the bindings back
// from the sync stream, and every session's next turn, routed through the
// restarted replica, goes to its bound worker. It counts the bindings the
// restart lost and the turns routed away from their worker: none of
// either.
func TestSessionsSurviveReplicaRestart(t *testing.T) {
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	for i := range 4 {
		s, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: fmt.Sprintf("127.0.0.1:%d", 9100+i)}}
		if _, err := s.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
			t.Fatal(err)
		}
	}
	type replica struct {
		svc  *router.Service
		rpc  routerv1.RouterServiceClient
		stop func()
	}
	start := func(i int) *replica {
		rctx, rcancel := context.WithCancel(ctx)
		svc, err := router.Start(rctx, router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0"}, Mode: "kv", NoKVEvents: true,
			Core: core.DefaultConfig(), RegistryAddr: reg.Addr,
			EventbusAddr: bus.Addr().String(), ReplicaSync: true, ReplicaID: fmt.Sprintf("r%d", i)}, slog.New(slog.DiscardHandler))
		if err != nil {
			rcancel()
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{svc: svc, rpc: routerv1.NewRouterServiceClient(cc)}
		stopped := false
		r.stop = func() {
			if stopped {
				return
			}
			stopped = true
			cc.Close()
			rcancel()
			if err := svc.Wait(); err != nil {
				t.Errorf("router %d: %v", i, err)
			}
		}
		t.Cleanup(r.stop)
		if err := routertest.WaitReady(rctx, svc); err != nil {
			t.Fatal(err)
		}
		return r
	}
	reps := []*replica{start(0), start(1)}
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: "m"}}
	prompt := func(s, turn int) []uint32 {
		p := make([]uint32, 16*turn)
		for j := range p {
			p[j] = uint32(s*10000 + j)
		}
		return p
	}
	route := func(rpc routerv1.RouterServiceClient, id string, s, turn int) uint64 {
		req := &routerv1.RouteRequest{RequestId: id, Target: target, TokenIds: prompt(s, turn), SessionId: fmt.Sprint("s", s)}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := rpc.Route(ctx, req)
			if err == nil {
				if _, err := rpc.Free(ctx, &routerv1.FreeRequest{RequestId: id}); err != nil {
					t.Fatal(err)
				}
				return resp.InstanceId
			}
			if time.Now().After(deadline) {
				t.Fatalf("route %s: %v", id, err)
			}
		}
	}
	const sessions = 40
	bound := map[string]uint64{}
	for s := range sessions {
		bound[fmt.Sprint("s", s)] = route(reps[s%2].rpc, fmt.Sprintf("s%d-1", s), s, 1)
	}
	// lost counts the sessions a replica does not bind as they were bound.
	lost := func(svc *router.Service) int {
		n := 0
		for id, w := range bound {
			if got, ok := svc.Core().SessionWorker(id); !ok || got.Instance != w {
				n++
			}
		}
		return n
	}
	waitLost := func(svc *router.Service) int {
		n := lost(svc)
		for deadline := time.Now().Add(20 * time.Second); n > 0 && time.Now().Before(deadline); n = lost(svc) {
			time.Sleep(20 * time.Millisecond)
		}
		return n
	}
	for i, r := range reps {
		if n := waitLost(r.svc); n > 0 {
			t.Fatalf("replica %d lacks %d of %d bindings before the restart", i, n, sessions)
		}
	}
	reps[0].stop()
	reps[0] = start(0)
	// It becomes ready once it has replayed the sync stream: nothing is
	// missing then.
	n := lost(reps[0].svc)
	// Every session's next turn through the restarted replica.
	away := 0
	for s := range sessions {
		id := fmt.Sprint("s", s)
		if w := route(reps[0].rpc, fmt.Sprintf("s%d-2", s), s, 2); w != bound[id] {
			away++
		}
	}
	t.Logf("bindings the restarted replica lacked when it became ready: %d of %d; turns routed away from their worker: %d", n, sessions, away)
	if n > 0 || away > 0 {
		t.Fatalf("the restart lost %d of %d bindings and %d turns went away from their worker", n, sessions, away)
	}
	st, err := reps[0].rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.SessionBindings != sessions {
		t.Fatalf("GetStats session_bindings = %d, want %d", st.SessionBindings, sessions)
	}
}
