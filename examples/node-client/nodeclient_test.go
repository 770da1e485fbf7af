// Package nodeclient_test runs the example Node client (src/client.ts, on
// the generated TypeScript stubs with @connectrpc/connect-node over gRPC)
// against a registry, an eventbus and a router in this process, with Go SDK
// workers registered on them, and reads its protobuf JSON back into the Go
// types.
package nodeclient_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	routersvc "github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

const (
	namespace = "nodeclient"
	model     = "test/node-client"
)

func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "tsx"))
	}
	if err != nil {
		msg := fmt.Sprintf("the Node client needs node and `npm ci` in examples/node-client: %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node
}

// startWorker registers a Go SDK worker of the test model.
func startWorker(t *testing.T, ctx context.Context, regAddr, busAddr string) *worker.Worker {
	t.Helper()
	tc := transport.DefaultConfig()
	tc.TCP.Host = "127.0.0.1"
	w, err := worker.Start(ctx, worker.Config{Namespace: namespace, Component: "backend", Model: worker.Model{Name: model, BlockSize: 4, ContextLength: 1024},
		RegistryAddr: regAddr, EventbusAddr: busAddr, Transport: tc, LeaseTTL: 10 * time.Second, DrainTimeout: time.Second,
		Log: slog.New(slog.DiscardHandler)},
		func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	return w
}

// run runs the client and decodes each line of its output into the next
// message of out.
func run(t *testing.T, ctx context.Context, node string, env []string, args []string, out ...proto.Message) {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, append([]string{"--import", "tsx", "src/client.ts"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("client %v: %v\n%s", args, err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for i, m := range out {
		if !sc.Scan() {
			t.Fatalf("client %v printed %d lines; want %d:\n%s", args, i, len(out), stdout)
		}
		if err := protojson.Unmarshal(sc.Bytes(), m); err != nil {
			t.Fatalf("client %v line %d: %v: %s", args, i+1, err, sc.Bytes())
		}
	}
}

func ids(ins []*registryv1.Instance) []uint64 {
	var out []uint64
	for _, in := range ins {
		out = append(out, in.InstanceId)
	}
	slices.Sort(out)
	return out
}

func TestNodeClient(t *testing.T) {
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	router, routerAddr := startRouter(t, ctx, reg.Addr, bus.Addr().String())
	env := []string{"SWITCHYARD_REGISTRY_ADDR=" + reg.Addr}
	w1 := startWorker(t, ctx, reg.Addr, bus.Addr().String())

	t.Run("list", func(t *testing.T) {
		var list registryv1.ListInstancesResponse
		var models registryv1.ListModelsResponse
		run(t, ctx, node, env, []string{"list", "--namespace", namespace}, &list, &models)
		if got := ids(list.Instances); !slices.Equal(got, []uint64{w1.InstanceID()}) || list.Revision == 0 {
			t.Errorf("instances %v at revision %d; want [%d]", got, list.Revision, w1.InstanceID())
		}
		if len(models.Cards) != 1 || models.Cards[0].ModelName != model || models.Cards[0].InstanceId != w1.InstanceID() || models.Cards[0].BlockSize != 4 {
			t.Errorf("models %v; want the card of %s on %x", models.Cards, model, w1.InstanceID())
		}
	})

	var w2 *worker.Worker
	t.Run("watch resumes from a revision", func(t *testing.T) {
		var snap registryv1.WatchInstancesResponse
		run(t, ctx, node, env, []string{"watch", "--namespace", namespace, "--max-responses", "1"}, &snap)
		if snap.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_SNAPSHOT || snap.SnapshotReason != registryv1.SnapshotReason_SNAPSHOT_REASON_INITIAL ||
			!slices.Equal(ids(snap.Instances), []uint64{w1.InstanceID()}) || snap.Revision == 0 {
			t.Fatalf("first watch response = %v; want the initial snapshot of %x", &snap, w1.InstanceID())
		}
		// A worker registers after the snapshot: a watch resumed from the
		// snapshot's revision starts with its PUT, not a snapshot.
		w2 = startWorker(t, ctx, reg.Addr, bus.Addr().String())
		var ev registryv1.WatchInstancesResponse
		run(t, ctx, node, env, []string{"watch", "--namespace", namespace, "--resume-revision", fmt.Sprint(snap.Revision), "--max-responses", "1"}, &ev)
		if ev.Kind != registryv1.WatchResponseKind_WATCH_RESPONSE_KIND_EVENTS || len(ev.Events) == 0 ||
			ev.Events[0].Type != registryv1.EventType_EVENT_TYPE_PUT || ev.Events[0].Instance.GetInstanceId() != w2.InstanceID() ||
			ev.Events[0].Revision <= snap.Revision {
			t.Errorf("watch resumed after %d = %v; want events starting with the PUT of %x", snap.Revision, &ev, w2.InstanceID())
		}
	})

	t.Run("route", func(t *testing.T) {
		if w2 == nil {
			t.Skip("no second worker")
		}
		// Wait until the router knows a worker of the model.
		for {
			st, err := router.GetStats(ctx, &routerv1.GetStatsRequest{})
			if err == nil && len(st.Workers) > 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the router never saw a worker: %v, %v", st, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		var r routerv1.RouteResponse
		run(t, ctx, node, append(env, "SWITCHYARD_ROUTER_ADDR="+routerAddr),
			[]string{"route", "--model", model, "--tokens", "1,2,3,4,5,6,7,8,9", "--request-id", "node-route"}, &r)
		if r.InstanceId != w1.InstanceID() && r.InstanceId != w2.InstanceID() || r.RequestBlocks != 2 || r.Transport.GetTcp() == "" {
			t.Errorf("route = %v; want one of %x and %x with its address, 2 request blocks", &r, w1.InstanceID(), w2.InstanceID())
		}
		// The client freed its decision: the router holds no request for it.
		st, err := router.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ws := range st.Workers {
			if ws.Requests != 0 {
				t.Errorf("worker %x still has %d requests after the client's Free", ws.InstanceId, ws.Requests)
			}
		}
	})
}

// startRouter starts a KV router service and dials it.
func startRouter(t *testing.T, ctx context.Context, regAddr, busAddr string) (routerv1.RouterServiceClient, string) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	svc, err := routersvc.Start(rctx, routertest.Config(regAddr, busAddr), slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("router: %v", err)
		}
	})
	return routerv1.NewRouterServiceClient(cc), svc.Addr().String()
}
