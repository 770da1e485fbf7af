package nodeworker_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestNodeWorkerRetriesItsCardOnTheSameLease refuses the worker's first two
// RegisterModel calls with Unavailable, as a registry replica that lost etcd
// between the instance's call and the card's would: the worker retries the
// card on the lease it holds, so it is granted one lease and its instance
// keeps its id. Giving up at the first refusal revoked the lease and
// registered again under a new one: every watcher saw a live instance
// deleted.
func TestNodeWorkerRetriesItsCardOnTheSameLease(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	const ns = "nodecard"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	dc, watch := watchInstances(t, reg.Addr, ns)
	defer dc.Close()
	defer watch.Close()
	proxy, calls := conformance.RefuseFirst(t, reg.Addr, registryv1.RegistryService_RegisterModel_FullMethodName, 2, codes.Unavailable)
	w := startWorker(t, node, proxy, bus.Addr().String(), workerOpts{namespace: ns, model: "test/echo", blockSize: 4, leaseTTL: 5})
	in := conformance.WaitInstances(ctx, t, watch, 1, w.Logs)[0]
	w.Logs.WaitFor(ctx, t, "worker registered", map[string]any{"instance": fmt.Sprintf("%x", in.InstanceId)})
	if g, c := calls(registryv1.RegistryService_GrantLease_FullMethodName), calls(registryv1.RegistryService_RegisterModel_FullMethodName); g != 1 || c != 3 {
		t.Fatalf("GrantLease called %d times and RegisterModel %d; want 1 lease and 3 card calls (2 refused)\n%s", g, c, w.Logs.String())
	}
	list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: ns}})
	if err != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != in.InstanceId {
		t.Fatalf("ListInstances = %v, %v; want only instance %x", list, err, in.InstanceId)
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: ns}})
	if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != in.InstanceId {
		t.Fatalf("ListModels = %v, %v; want the card of instance %x", cards, err, in.InstanceId)
	}
	if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.Wait(t); code != 0 {
		t.Fatalf("the worker exited with %d after SIGTERM; want 0", code)
	}
}
