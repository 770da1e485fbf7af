package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestWatchSaturation: a watcher gets every model first, then only the
// changes: the model becomes saturated as routed requests queue up on its
// only worker (--queue-prefill-budget 5000, prompts of 4,000 tokens), and
// stops being saturated when their prefills complete, without routing
// anything.
func TestWatchSaturation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rpc, route := saturationStack(t, ctx, func(cfg *router.Config) { cfg.Core.QueuePrefillBudget = 5000 }, 4000)
	if r := route("a", 1); r.Saturated {
		t.Fatal("the first request saturates")
	}
	if _, err := rpc.Free(ctx, &routerv1.FreeRequest{RequestId: "a"}); err != nil {
		t.Fatal(err)
	}

	w, err := rpc.WatchSaturation(ctx, &routerv1.WatchSaturationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		return fmt.Sprint(resp.Models)
	}
	// until reads answers until one is want: changes that come together
	// are folded into one answer, or not, as the watch keeps up.
	until := func(want []*routerv1.ModelSaturation) {
		t.Helper()
		for got := next(); got != fmt.Sprint(want); got = next() {
			t.Logf("answer %s on the way to %s", got, fmt.Sprint(want))
		}
	}
	// Room for two typical prompts (4,000 tokens: a queue of 0 and 4,000
	// is within the budget, 8,000 is not). The capacity, the room with
	// nothing queued, is the same two whatever is queued.
	if got, want := next(), fmt.Sprint([]*routerv1.ModelSaturation{{Model: "m", Room: 2, Capacity: 2}}); got != want {
		t.Fatalf("first answer %s, want %s", got, want)
	}
	// One prompt queued (4,000 tokens): room. Three: full whatever the
	// router thinks the first of them has computed by now (it leaves the
	// head at least a block), so neither the decisions nor the watch
	// depend on how fast the test runs.
	if r := route("b", 2); r.Saturated || r.Room != 1 {
		t.Fatalf("one request queued: saturated %v, room %d; want room 1", r.Saturated, r.Room)
	}
	route("c", 3)
	if r := route("d", 4); !r.Saturated {
		t.Fatal("three requests queued do not saturate")
	}
	until([]*routerv1.ModelSaturation{{Model: "m", Saturated: true, Capacity: 2}})
	for _, id := range []string{"b", "c"} {
		if _, err := rpc.MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	// d's prompt alone is left to prefill: room for one more.
	until([]*routerv1.ModelSaturation{{Model: "m", Room: 1, Capacity: 2}})

	many := make([]string, 4097)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	bad, err := rpc.WatchSaturation(ctx, &routerv1.WatchSaturationRequest{Models: many})
	if err == nil {
		_, err = bad.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("4097 models: %v, want InvalidArgument", err)
	}
}

// saturationStack starts a registry and a router configured by configure,
// with one worker of model "m" (blocks of 4 tokens) registered, and
// returns the router's client and a function routing a prompt of
// tokens tokens (salt makes it its own) once the router sees the worker.
func saturationStack(t *testing.T, ctx context.Context, configure func(*router.Config), tokens int) (routerv1.RouterServiceClient, func(id string, salt uint32) *routerv1.RouteResponse) {
	t.Helper()
	_, reg := registrytest.Start(t)
	cfg := routertest.Config(reg.Addr, "")
	configure(&cfg)
	rpc, _ := routertest.Start(t, ctx, cfg)
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	sess, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "127.0.0.1:9999"}}
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	prompt := func(salt uint32) []uint32 {
		out := make([]uint32, tokens)
		for i := range out {
			out[i] = uint32(i)*7 + salt
		}
		return out
	}
	route := func(id string, salt uint32) *routerv1.RouteResponse {
		t.Helper()
		for {
			resp, err := rpc.Route(ctx, &routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "m"}}, TokenIds: prompt(salt)})
			if err == nil {
				return resp
			}
			if ctx.Err() != nil {
				t.Fatalf("Route: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // the router has not seen the worker yet
		}
	}
	return rpc, route
}

// TestWatchSaturationHeadProgress: the room a worker's head of queue makes
// as it computes on reaches the watchers though nothing in the load
// record changes. One worker, the default timing model (an H100's: a
// prompt of 32,000 tokens takes about 0.7 s, in four steps), prompts of
// 32,000 tokens, a 1 s threshold: an idle worker takes one; behind a head
// just begun, the next is predicted at about 1.4 s, and fits once the
// head has less than about 0.3 s left. Nothing is marked complete or
// freed, and the worker sends no load report: only the head's progress
// makes that room.
func TestWatchSaturationHeadProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rpc, route := saturationStack(t, ctx, func(cfg *router.Config) { cfg.Core.QueueTTFTThreshold = time.Second }, 32000)
	if r := route("a", 1); !r.Saturated {
		t.Fatalf("a head just begun leaves room for %d", r.Room)
	}
	w, err := rpc.WatchSaturation(ctx, &routerv1.WatchSaturationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("Recv: %v (no word of the room the head made)", err)
		}
		if got := resp.GetModels(); len(got) == 1 && got[0].GetModel() == "m" && got[0].GetRoom() == 1 {
			return
		}
		// On a slow machine the first answer may come once the head
		// is far enough along already: then it is the room.
		t.Logf("answer %v on the way to room 1", resp.GetModels())
	}
}
