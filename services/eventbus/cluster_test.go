package eventbus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestNATSClusterStreamLeaderKilled runs the eventbus on a 3-node JetStream
// cluster (nats-server processes with routes) with --stream-replicas=3,
// kills the member that leads the stream (SIGKILL) while publishers publish
// without pause, brings it back, and reads the stream from the start: every
// event the eventbus acknowledged is there exactly once, and publishing
// resumes on the new leader. The long form (make test-long) kills the leader
// three times, with more publishers.
func TestNATSClusterStreamLeaderKilled(t *testing.T) {
	t.Parallel()
	kills, publishers := 1, 2
	if !testing.Short() {
		kills, publishers = 3, 4
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*time.Minute+time.Minute)
	defer cancel()
	cl := eventbustest.StartNATSCluster(t, 3)
	cfg := eventbustest.Config(cl.URLs())
	cfg.StreamReplicas = 3
	svc := eventbustest.StartEventbus(t, cfg)
	c := eventbustest.Client(t, svc.Addr().String())
	const namespace = "cluster"
	subject := namespace + ".backend.kv_cache_update"
	start := time.Now()
	if _, err := c.PublishEvent(ctx, &eventbusv1.Event{Subject: subject, Payload: []byte("first"), MsgId: "first"}); err != nil {
		t.Fatalf("first publish on the cluster: %v", err)
	}
	t.Logf("first publish on the 3-replica stream acknowledged after %s", time.Since(start).Round(time.Millisecond))

	// Publishers send batches of 8 and count what the eventbus acknowledged.
	var (
		mu      sync.Mutex
		acked   = map[string]bool{"first": true}
		sent    atomic.Int64
		stopPub = make(chan struct{})
		wg      sync.WaitGroup
	)
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pub := c.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
			defer pub.Close()
			for n := 0; ; n++ {
				select {
				case <-stopPub:
					return
				default:
				}
				batch := make([]*eventbusv1.Event, 8)
				for i := range batch {
					batch[i] = &eventbusv1.Event{Subject: subject, Payload: []byte("x"), MsgId: fmt.Sprintf("p%d-%d-%d", p, n, i)}
				}
				sent.Add(int64(len(batch)))
				if _, err := pub.PublishBatch(ctx, batch); err != nil {
					if ctx.Err() == nil {
						t.Errorf("publisher %d batch %d: %v", p, n, err)
					}
					return
				}
				mu.Lock()
				for _, ev := range batch {
					acked[ev.MsgId] = true
				}
				mu.Unlock()
			}
		}()
	}
	ackedNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	// Within 30s: a new stream leader is elected within about 10s, and the
	// eventbus publishes what is unanswered again every second (resendAfter).
	waitAcked := func(more int) {
		t.Helper()
		want := ackedNow() + more
		deadline := time.Now().Add(30 * time.Second)
		for ackedNow() < want {
			if time.Now().After(deadline) {
				t.Fatalf("acknowledged %d events, waited for %d", ackedNow(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for k := range kills {
		waitAcked(200)
		leader := cl.StreamLeader(namespace, 30*time.Second)
		before := ackedNow()
		killed := time.Now()
		cl.Kill(leader)
		next := cl.StreamLeader(namespace, 30*time.Second)
		elected := time.Since(killed)
		waitAcked(200) // publishing resumed on the new leader
		t.Logf("kill %d: stream leader %s killed with %d acknowledged; %s leads after %s, 200 more acknowledged after %s",
			k+1, cl.Name(leader), before, cl.Name(next), elected.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
		cl.Start(leader)
		cl.WaitHealthy(time.Minute)
	}
	close(stopPub)
	wg.Wait()

	// Read the stream back straight from NATS.
	nc, err := nats.Connect(cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, eventbus.StreamName(namespace))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 {
		t.Errorf("stream has %d replicas, want 3", info.Config.Replicas)
	}
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		// An envelope's events count one by one.
		ids, err := eventbus.StoredMsgIDs(m.Header, m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		for _, id := range ids {
			seen[id]++
		}
	}
	lost, twice := 0, 0
	for id := range acked {
		switch n := seen[id]; {
		case n == 0:
			lost++
		case n > 1:
			twice++
		}
	}
	for id, n := range seen {
		if n > 1 && !acked[id] {
			twice++
		}
	}
	t.Logf("%d leader kill(s): %d events sent, %d acknowledged, %d stored (in %d stream messages), %d acknowledged and lost, %d stored twice",
		kills, sent.Load(), len(acked), len(seen), info.State.Msgs, lost, twice)
	if lost > 0 || twice > 0 {
		t.Fatalf("%d acknowledged events lost, %d stored more than once", lost, twice)
	}
}
