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
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestWatchSaturation: a watcher gets every model first, then only the
// changes: the model becomes saturated as routed requests queue up on its
// only worker (--queue-prefill-budget 5000, prompts of 4,000 tokens), and
// stops being saturated when their prefills complete, without routing
// anything.
func TestWatchSaturation(t *testing.T) {
	_, reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := routertest.Config(reg.Addr, "")
	cfg.Core.QueuePrefillBudget = 5000
	rpc, _ := routertest.Start(t, ctx, cfg)
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	sess, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "127.0.0.1:9999"}}
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	prompt := func(salt uint32) []uint32 {
		out := make([]uint32, 4000)
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
	// is within the budget, 8,000 is not).
	if got, want := next(), fmt.Sprint([]*routerv1.ModelSaturation{{Model: "m", Room: 2}}); got != want {
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
	until([]*routerv1.ModelSaturation{{Model: "m", Saturated: true}})
	for _, id := range []string{"b", "c"} {
		if _, err := rpc.MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	// d's prompt alone is left to prefill: room for one more.
	until([]*routerv1.ModelSaturation{{Model: "m", Room: 1}})

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
