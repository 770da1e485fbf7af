package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// A worker is a Handler (the engine: a prompt's token ids in, a stream of
// responses out) and a Config that says where it registers. Start serves
// the handler on the request plane, registers the instance and its model
// card with the registry, and publishes load and KV events through the
// eventbus; Shutdown deregisters, then lets requests in flight finish.
// Here the engine echoes the prompt, a real registry and eventbus run in
// this process, and the caller does what a frontend does: finds the worker
// in the registry and calls generate over the request plane.
func Example() {
	cp, err := controlplane.Start("worker-example-*", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The engine: each prompt token back, one response each, then the
	// finish reason.
	echo := func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
		for _, tok := range req.GetTokenIds() {
			if err := send(&workerv1.GenerateResponse{TokenIds: []uint32{tok}}); err != nil {
				return err
			}
		}
		return send(&workerv1.GenerateResponse{FinishReason: workerv1.FinishReason_FINISH_REASON_STOP})
	}
	tc := transport.DefaultConfig()
	tc.TCP.Host, tc.TCP.Port = "127.0.0.1", 0
	w, err := worker.Start(ctx, worker.Config{
		Namespace: "demo", Component: "backend",
		Model:        worker.Model{Name: "demo-model", BlockSize: 16, ContextLength: 4096},
		RegistryAddr: cp.RegistryAddr(), EventbusAddr: cp.EventbusAddr(),
		Transport: tc, DrainTimeout: 5 * time.Second,
	}, echo)
	if err != nil {
		fmt.Println(err)
		return
	}

	// A frontend's view: the model's instances in the registry.
	dc, err := registryclient.Dial([]string{cp.RegistryAddr()}, registryclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dc.Close()
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "demo"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	in := list.GetInstances()[0]
	fmt.Printf("registered: %s/%s/%s, the worker's instance: %v\n", in.GetNamespace(), in.GetComponent(), in.GetEndpoint(), in.GetInstanceId() == w.InstanceID())

	// Generate over the request plane the instance registered.
	addr, _ := transport.Pick(in.GetTransport(), transport.PlaneTCP)
	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	payload, _ := proto.Marshal(&workerv1.GenerateRequest{RequestId: "req-1", Model: "demo-model", TokenIds: []uint32{11, 22, 33}})
	st, err := c.Call(ctx, addr, wire.GenerateEndpoint, nil, payload)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	for {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		var r workerv1.GenerateResponse
		if err := proto.Unmarshal(b, &r); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("response:", r.GetTokenIds(), r.GetFinishReason())
	}

	if err := w.Shutdown(ctx); err != nil {
		fmt.Println(err)
		return
	}
	list, err = dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "demo"}})
	fmt.Println("instances after Shutdown:", len(list.GetInstances()), err)
	// Output:
	// registered: demo/backend/generate, the worker's instance: true
	// response: [11] FINISH_REASON_UNSPECIFIED
	// response: [22] FINISH_REASON_UNSPECIFIED
	// response: [33] FINISH_REASON_UNSPECIFIED
	// response: [] FINISH_REASON_STOP
	// instances after Shutdown: 0 <nil>
}
