package routerclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/routerclient"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// A frontend asks the router which worker should serve a prompt, sends the
// request there, and frees it at the router when it ends, so that the
// router's load of that worker goes back down. Here a real router runs in
// this process over a real registry and eventbus, and one worker is
// registered with the registry (its instance and its model card) as the
// worker SDK registers one.
func Example() {
	log := slog.New(slog.DiscardHandler)
	cp, err := controlplane.Start("routerclient-example-*", log)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The router stops when cp closes (its Context ends) and cp.Close waits
	// for it.
	svc, err := router.Start(cp.Context(), routertest.Config(cp.RegistryAddr(), cp.EventbusAddr()), log)
	if err != nil {
		fmt.Println(err)
		return
	}
	cp.OnClose(svc.Wait)
	if err := routertest.WaitReady(ctx, svc); err != nil {
		fmt.Println(err)
		return
	}

	// One worker of model "demo-model", with 4-token KV blocks.
	dc, err := registryclient.Dial([]string{cp.RegistryAddr()}, registryclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dc.Close()
	sess, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sess.Close(ctx)
	in, err := sess.Register(ctx, &registryv1.Instance{Namespace: "demo", Component: "backend", Endpoint: "generate",
		Transport: &commonv1.Transport{Tcp: "127.0.0.1:9999"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "demo", Component: "backend", Endpoint: "generate",
		ModelName: "demo-model", BlockSize: 4}); err != nil {
		fmt.Println(err)
		return
	}

	c, err := routerclient.Dial([]string{svc.Addr().String()}, routerclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	req := &routerv1.RouteRequest{
		RequestId: "req-1",
		Target:    &routerv1.Target{Kind: &routerv1.Target_Model{Model: "demo-model"}},
		TokenIds:  []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9},
	}
	// The router learns of the worker from its registry watch, a moment
	// after the registration: until then it has no worker for the model.
	res, err := c.Route(ctx, req)
	for err != nil {
		if ctx.Err() != nil {
			fmt.Println(err)
			return
		}
		time.Sleep(10 * time.Millisecond)
		res, err = c.Route(ctx, req)
	}
	fmt.Println("routed to the worker:", res.GetInstanceId() == in.GetInstanceId())
	fmt.Println("send it to:", res.GetTransport().GetTcp())
	fmt.Println("full blocks:", res.GetRequestBlocks())

	requests := func() uint32 {
		st, err := c.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err != nil || len(st.GetWorkers()) != 1 {
			return 0
		}
		return st.GetWorkers()[0].GetRequests()
	}
	fmt.Println("requests on the worker:", requests())
	if _, err := c.Free(ctx, &routerv1.FreeRequest{RequestId: "req-1"}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after Free:", requests())
	// Output:
	// routed to the worker: true
	// send it to: 127.0.0.1:9999
	// full blocks: 2
	// requests on the worker: 1
	// after Free: 0
}
