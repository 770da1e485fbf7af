package registryclient_test

import (
	"fmt"
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/registry/etcdcluster"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestSessionsThroughEtcdClusterFaults runs worker sessions through two
// registry replicas on a 3-member etcd cluster, kills the etcd leader (and
// brings it back), then stops another member (a partitioned one) and brings
// it back. Through all of it no watcher sees a DELETE, no session loses its
// lease, and every instance keeps its id. -short: 6 sessions and a 2 s TTL;
// make test-long: 20 sessions.
func TestSessionsThroughEtcdClusterFaults(t *testing.T) {
	t.Parallel()
	n, ttl := 20, 2*time.Second
	if testing.Short() {
		n = 6
	}
	cluster := etcdcluster.Start(t, 3)
	r1 := registrytest.StartRegistry(t, cluster.Endpoints)
	r2 := registrytest.StartRegistry(t, cluster.Endpoints)
	ctx := ctxT(t)
	rec := newRecorder()
	w := watch(t, dial(t, r2.Addr, r1.Addr), rec)

	type worker struct {
		s   *registryclient.Session
		key string
	}
	var workers []worker
	for i := range n {
		addrs := []string{r1.Addr, r2.Addr} // half start on each replica
		if i%2 == 1 {
			addrs[0], addrs[1] = addrs[1], addrs[0]
		}
		s := openSession(ctx, t, dial(t, addrs...), ttl)
		t.Cleanup(func() { _ = s.Close(ctx) })
		in := register(ctx, t, s, fmt.Sprintf("w%d", i))
		workers = append(workers, worker{s, registryclient.InstanceKey(in)})
	}
	testwait.Until(t, 20*time.Second, "the watcher to see every instance", func() bool { return len(w.Items()) == n })

	// hold waits, after a fault, for three keep-alives of every session
	// answered: half a TTL apart, they renew each lease through the fault
	// for longer than a TTL, so a lapse would have shown as a DELETE.
	hold := func(what string) {
		t.Helper()
		from := make([]registryclient.KeepAliveProgress, len(workers))
		for i, wk := range workers {
			from[i], _ = wk.s.Progress()
		}
		for i, wk := range workers {
			waitProgress(ctx, t, wk.s, what+": three keep-alives answered", answered(from[i], 3))
		}
		for _, wk := range workers {
			if _, d := rec.counts(wk.key); d != 0 {
				t.Fatalf("%s: the watcher saw %s deleted", what, wk.key)
			}
			select {
			case <-wk.s.Done():
				t.Fatalf("%s: a session lost its lease: %v", what, wk.s.Err())
			default:
			}
		}
	}
	leader := -1
	testwait.Until(t, 20*time.Second, "an etcd leader", func() bool { leader = cluster.Leader(); return leader >= 0 })
	cluster.Stop(leader)
	hold("leader killed")
	cluster.Start(leader)
	other := (leader + 1) % 3
	cluster.Stop(other)
	hold("member partitioned")
	cluster.Start(other)
	testwait.Until(t, 20*time.Second, "every session's keep-alive to be answered", func() bool {
		for _, wk := range workers {
			if wk.s.Expired() {
				return false
			}
		}
		return true
	})
	resp, err := dial(t, r1.Addr).Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	have := map[uint64]bool{}
	for _, in := range resp.Instances {
		have[in.InstanceId] = true
	}
	for _, wk := range workers {
		if !have[wk.s.ID()] {
			t.Errorf("instance of lease %x missing after the faults", wk.s.ID())
		}
	}
	if len(resp.Instances) != n {
		t.Fatalf("%d instances after the faults, want %d", len(resp.Instances), n)
	}
	t.Logf("FAULT etcd cluster: %d sessions through leader kill and member stop (three renewals each): 0 DELETEs, 0 leases lost, ids unchanged", n)
}
