package eventbusclient_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// A worker publishes its load on its component's load subject; a router or
// planner subscribes to every component's load in the namespace and reads
// typed messages. A publish that repeats a message id (a retry after a lost
// answer) is stored once. The eventbus here is a real one, on an embedded
// NATS JetStream in this process.
func Example() {
	cp, err := controlplane.Start("eventbus-example-*", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := eventbusclient.Dial([]string{cp.EventbusAddr()}, eventbusclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	load := &workerv1.LoadMetrics{InstanceId: 7, RunningRequests: 3}
	for range 2 {
		res, err := c.Publish(ctx, wire.LoadSubject("demo", "backend"), load, eventbusclient.WithMsgID("load-7-1"))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("published, duplicate:", res.GetDuplicate())
	}

	sub, err := c.Subscribe(ctx, &eventbusv1.SubscribeRequest{
		Namespace:     "demo",
		FilterSubject: wire.LoadFilter("demo"),
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL,
		AutoAck:       true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	m, ev, err := eventbusclient.NewTyped[workerv1.LoadMetrics](sub).Next(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: instance %d runs %d requests\n", ev.GetSubject(), m.GetInstanceId(), m.GetRunningRequests())
	// Output:
	// published, duplicate: false
	// published, duplicate: true
	// demo.backend.load_metrics: instance 7 runs 3 requests
}

// The object store holds files a worker shares by name, such as its
// tokenizer; GetObject checks the data it reads against the stored sha256.
func ExampleClient_PutObject() {
	cp, err := controlplane.Start("eventbus-example-*", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := eventbusclient.Dial([]string{cp.EventbusAddr()}, eventbusclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	name := wire.TokenizerObject("demo-model", "tokenizer_config.json")
	if _, err := c.PutObject(ctx, wire.TokenizerBucket, name, strings.NewReader(`{"bos_token":"<s>"}`), eventbusclient.PutObjectOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	var got bytes.Buffer
	info, err := c.GetObject(ctx, wire.TokenizerBucket, name, &got)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.GetSize(), "bytes:", got.String())
	// Output:
	// 19 bytes: {"bos_token":"<s>"}
}
