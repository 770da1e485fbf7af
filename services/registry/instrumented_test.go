package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/testport"
)

// TestInstrumentedBackend drives a real Store on embedded etcd through the
// decorator: live instances by namespace and component, a keep-alive of a
// revoked lease counted as lost, and calls failing once etcd is gone.
func TestInstrumentedBackend(t *testing.T) {
	t.Parallel()
	st, cli, stopEtcd := etcdStoreStop(t)
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	// The store's default bound: a shorter one counts a slow answer of etcd on
	// a loaded machine as an outage; the call once etcd is gone waits it out.
	b := instrument(withDeadline(st, DefaultStoreTimeout), m)
	reg.MustRegister(newInstancesCollector(b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var leases []uint64
	for _, in := range []*registryv1.Instance{
		{Namespace: "a", Component: "backend", Endpoint: "generate"},
		{Namespace: "a", Component: "backend", Endpoint: "generate"},
		{Namespace: "b", Component: "prefill", Endpoint: "generate"},
	} {
		in.Transport = &commonv1.Transport{Tcp: "127.0.0.1:1"}
		r, err := b.Register(ctx, in, 10*time.Second, 0, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, r.GetInstanceId())
	}
	want := `
# HELP switchyard_registry_live_instances Registered (live) instances, by namespace and component.
# TYPE switchyard_registry_live_instances gauge
switchyard_registry_live_instances{component="backend",namespace="a"} 2
switchyard_registry_live_instances{component="prefill",namespace="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "switchyard_registry_live_instances"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Deregister(ctx, leases[0]); err != nil {
		t.Fatal(err)
	}
	if _, found, err := b.KeepAlive(ctx, leases[0]); err != nil || found {
		t.Fatalf("keep-alive of a revoked lease: found %v, err %v", found, err)
	}
	if got := testutil.ToFloat64(m.leasesLost); got != 1 {
		t.Fatalf("leases lost = %v, want 1", got)
	}
	// A caller's mistake is not a backend error.
	if _, err := b.Deregister(ctx, leases[0]); err == nil {
		t.Fatal("deregistering twice succeeded")
	}
	if n := testutil.CollectAndCount(m.backendErrors); n != 0 {
		t.Fatalf("%d backend error series after caller mistakes only", n)
	}
	stopEtcd()
	// Its port stays the test's: no etcd another test binds on
	// 127.0.0.1:0 can take it and answer the client, still dialling.
	for _, ep := range cli.Endpoints() {
		if taken, err := testport.Taken(strings.TrimPrefix(ep, "http://")); err != nil || !taken {
			t.Fatalf("the stopped etcd's port %s is free for another listener (%v)", ep, err)
		}
	}
	if _, _, err := b.ListInstances(ctx, &registryv1.InstanceFilter{}); err == nil {
		t.Fatal("ListInstances without etcd succeeded")
	}
	if n := testutil.CollectAndCount(m.backendErrors); n != 1 {
		t.Fatalf("%d backend error series after etcd went away, want 1", n)
	}
}
