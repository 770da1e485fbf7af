package registryclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// A worker registers itself through a Session, whose lease keeps the
// instance alive; a frontend or router keeps a live map of the instances
// with a Watcher. Closing the session revokes the lease, and the watcher
// sees the instance leave. The registry here is a real one, on an embedded
// etcd in this process.
func Example() {
	cp, err := controlplane.Start("discovery-example-*", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := registryclient.Dial([]string{cp.RegistryAddr()}, registryclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// The watcher's changes arrive in order on its goroutine.
	changes := make(chan registryclient.Change[*registryv1.Instance], 8)
	w := registryclient.WatchInstances(c, &registryv1.InstanceFilter{Namespace: "demo"},
		registryclient.WatchOptions[*registryv1.Instance]{OnChange: func(cs []registryclient.Change[*registryv1.Instance]) {
			for _, ch := range cs {
				changes <- ch
			}
		}})
	defer w.Close()
	if err := w.WaitReady(ctx); err != nil {
		fmt.Println(err)
		return
	}

	s, err := registryclient.NewSession(ctx, c, registryclient.SessionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	in, err := s.Register(ctx, &registryv1.Instance{
		Namespace: "demo", Component: "backend", Endpoint: "generate",
		Transport: &commonv1.Transport{Tcp: "127.0.0.1:9999"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("registered under the session's lease:", in.GetInstanceId() == s.ID())
	ch := <-changes
	fmt.Println("watcher: put", ch.Item.GetComponent(), ch.Item.GetTransport().GetTcp(), "deleted:", ch.Deleted)

	if err := s.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}
	ch = <-changes
	fmt.Println("watcher: deleted:", ch.Deleted, "instances left:", len(w.Items()))
	// Output:
	// registered under the session's lease: true
	// watcher: put backend 127.0.0.1:9999 deleted: false
	// watcher: deleted: true instances left: 0
}
