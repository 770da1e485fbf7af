package registryclient_test

import (
	"testing"

	"google.golang.org/grpc"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestDialSkipsADeadReplica dials a dead address before a live registry, as
// one comma-separated string: the call reaches the live one.
func TestDialSkipsADeadReplica(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	c := dial(t, "127.0.0.1:1,"+reg.Addr)
	if _, err := c.Raw().ListInstances(ctxT(t), &registryv1.ListInstancesRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
}
