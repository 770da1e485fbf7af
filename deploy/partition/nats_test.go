package partition_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

// natsCluster is three nats-server processes forming one JetStream
// cluster, each in a namespace of its own, and an eventbus on them.
type natsCluster struct {
	l       *lab
	servers []*host
	bus     *host
}

// startNATSCluster starts the three servers (client port 4222, routes on
// 6222, monitoring on 8222) and an eventbus that creates its streams with 3
// replicas, and waits until the cluster has a meta leader known to all
// three and the eventbus serves.
func startNATSCluster(t *testing.T, ctx context.Context, l *lab) *natsCluster {
	t.Helper()
	bin := binaries(t)
	c := &natsCluster{l: l}
	var routes, clients []string
	for i := range 3 {
		h := l.host(fmt.Sprintf("nats%d", i+1))
		c.servers = append(c.servers, h)
		routes = append(routes, "nats://"+h.addr+":6222")
		clients = append(clients, "nats://"+h.addr+":4222")
	}
	for _, h := range c.servers {
		l.start(h, h.name, filepath.Join(bin, "nats-server"), "--server_name", h.name, "-a", h.addr, "-p", "4222", "-m", "8222",
			"-js", "-sd", filepath.Join(l.dir, h.name), "--cluster_name", "sy"+l.id, "--cluster", "nats://"+h.addr+":6222",
			"--routes", strings.Join(routes, ","))
	}
	if err := c.waitHealthy(ctx, c.servers...); err != nil {
		t.Fatal(err)
	}
	c.bus = l.host("eventbus")
	l.start(c.bus, "eventbus", filepath.Join(bin, "eventbus"), "--grpc-addr", c.bus.addr+":7002",
		"--nats-server", strings.Join(clients, ","), "--stream-replicas", "3")
	if err := waitServing(ctx, c.bus.addr+":7002"); err != nil {
		t.Fatalf("eventbus: %v", err)
	}
	return c
}

func (c *natsCluster) urls() string {
	var u []string
	for _, h := range c.servers {
		u = append(u, "nats://"+h.addr+":4222")
	}
	return strings.Join(u, ",")
}

// monitor reads a NATS monitoring endpoint of h into v.
func monitor(ctx context.Context, h *host, path string, v any) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+h.addr+":8222"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d", h.name, path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitHealthy waits until each of hs answers /healthz ok (its JetStream is
// current with the meta leader and with every stream it holds) and knows a
// meta leader of all three servers.
func (c *natsCluster) waitHealthy(ctx context.Context, hs ...*host) error {
	var err error
	for i := 0; i < 1200; i++ {
		err = nil
		// A server cut off while it led the meta group still names itself
		// leader until it hears the majority's higher term: healthy means
		// every server names the same leader, not just some leader.
		leaders := map[string]string{}
		for _, h := range hs {
			var hz struct{ Status string }
			var jsz struct {
				Meta *struct {
					Leader  string `json:"leader"`
					Size    int    `json:"cluster_size"`
					Replica []struct {
						Current bool `json:"current"`
					} `json:"replicas"`
				} `json:"meta_cluster"`
			}
			if e := monitor(ctx, h, "/healthz", &hz); e != nil {
				err = e
			} else if e := monitor(ctx, h, "/jsz", &jsz); e != nil {
				err = e
			} else if jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size != len(c.servers) {
				err = fmt.Errorf("%s: no meta leader of %d servers yet", h.name, len(c.servers))
			} else {
				leaders[h.name] = jsz.Meta.Leader
			}
		}
		if err == nil && len(hs) > 1 && len(slices.Compact(slices.Sorted(maps.Values(leaders)))) > 1 {
			err = fmt.Errorf("the servers name different meta leaders: %v", leaders)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("NATS cluster not healthy: %w (%v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("NATS cluster not healthy: %v", err)
}

// busServers names the servers the eventbus's NATS connections are on.
func (c *natsCluster) busServers(ctx context.Context) []string {
	var on []string
	for _, h := range c.servers {
		var connz struct {
			Conns []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		if err := monitor(ctx, h, "/connz", &connz); err != nil {
			continue
		}
		for _, cn := range connz.Conns {
			if cn.Name == "switchyard-eventbus" {
				on = append(on, h.name)
			}
		}
	}
	return on
}

// streamInfo asks the cluster about the namespace's stream.
func streamInfo(ctx context.Context, js jetstream.JetStream, namespace string) (*jetstream.StreamInfo, error) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ictx, eventbus.StreamName(namespace))
	if err != nil {
		return nil, err
	}
	return st.Info(ictx)
}

// retryJS runs a JetStream call until it succeeds, for at most 20
// attempts 250 ms apart. A converged cluster can still elect a leader again
// (a server that led before a cut steps down when it hears the majority's
// term), and for that moment every JetStream call answers "temporarily
// unavailable": the reads that check what was stored wait it out.
func retryJS[T any](ctx context.Context, call func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 20 {
		if v, err = call(); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(250 * time.Millisecond):
		}
	}
	return v, err
}

// TestNATSServerCutFromCluster cuts one NATS server of three from the
// other two (each still reaches the eventbus, and the eventbus them) while
// publishers publish through the eventbus without pause, heals the cut and
// reads the stream back: every event the eventbus acknowledged must be
// stored exactly once (counted by message id), at the sequence its
// acknowledgement named, and publishing must resume during the cut. The cut
// server is the one the eventbus is connected to (which stays reachable to
// it and answers no JetStream call), and in the long form also the stream's
// leader and a follower the eventbus is not on.
func TestNATSServerCutFromCluster(t *testing.T) {
	t.Parallel()
	binaries(t) // before the clock starts: a cold build takes minutes
	cases := []struct{ name, cut string }{
		{name: "the eventbus's server", cut: "bus"},
		{name: "stream leader", cut: "leader"},
		{name: "follower", cut: "follower"},
	}
	if testing.Short() {
		cases = cases[:1] // make test's form: the cut a client cannot see
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testNATSServerCut(t, tc.cut) })
	}
}

func testNATSServerCut(t *testing.T, which string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLab(t)
	c := startNATSCluster(t, ctx, l)
	publishers := 4
	if testing.Short() {
		publishers = 2
	}
	bus, err := eventbusclient.Dial([]string{c.bus.addr + ":7002"}, eventbusclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	const namespace = "partition"
	subject := namespace + ".backend.kv_cache_update"
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	_, err = bus.PublishEvent(fctx, &eventbusv1.Event{Subject: subject, Payload: []byte("first"), MsgId: "first"})
	fcancel()
	if err != nil {
		t.Fatalf("first publish: %v", err)
	}
	nc, err := nats.Connect(c.urls(), nats.Timeout(2*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// Publishers send batches of 8 until stopped and record each event the
	// eventbus acknowledged with the sequence it named.
	var (
		mu      sync.Mutex
		acked   = map[string]uint64{"first": 0}
		sent    atomic.Int64
		pubErrs atomic.Int64
		gotAck  = make(chan struct{}, 1)
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pub := bus.NewPublisher(pctx, eventbusclient.PublisherOptions{MaxInFlight: 4})
			defer pub.Close()
			for n := 0; n < 1_000_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				batch := make([]*eventbusv1.Event, 8)
				for i := range batch {
					batch[i] = &eventbusv1.Event{Subject: subject, Payload: []byte("x"), MsgId: fmt.Sprintf("p%d-%d-%d", p, n, i)}
				}
				sent.Add(int64(len(batch)))
				acks, err := pub.PublishBatch(pctx, batch)
				if err != nil {
					if pctx.Err() == nil {
						pubErrs.Add(1)
						t.Errorf("publisher %d batch %d: %v", p, n, err)
					}
					return
				}
				mu.Lock()
				for i, ev := range batch {
					acked[ev.MsgId] = acks[i].GetSequence()
				}
				mu.Unlock()
				select {
				case gotAck <- struct{}{}:
				default:
				}
			}
		}()
	}
	ackedNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	// waitAcked waits until more events are acknowledged than now.
	waitAcked := func(more int, within time.Duration) error {
		want := ackedNow() + more
		deadline := time.After(within)
		for ackedNow() < want {
			select {
			case <-gotAck:
			case <-deadline:
				return fmt.Errorf("%d events acknowledged, waited for %d", ackedNow(), want)
			}
		}
		return nil
	}
	if err := waitAcked(200, time.Minute); err != nil {
		t.Fatal(err)
	}
	info, err := streamInfo(ctx, js, namespace)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.Config.Replicas != 3 {
		t.Fatalf("stream has %d replicas, want 3", info.Config.Replicas)
	}
	busOn := c.busServers(ctx)
	pick := func(ok func(leads, bus bool) bool) *host {
		for _, h := range c.servers {
			if ok(h.name == info.Cluster.Leader, slices.Contains(busOn, h.name)) {
				return h
			}
		}
		return nil
	}
	var cut *host
	switch which {
	case "bus":
		cut = pick(func(_, bus bool) bool { return bus })
	case "leader":
		cut = pick(func(leads, _ bool) bool { return leads })
	case "follower":
		// One the eventbus is not on, if its two connections left one.
		if cut = pick(func(leads, bus bool) bool { return !leads && !bus }); cut == nil {
			cut = pick(func(leads, _ bool) bool { return !leads })
		}
	}
	if cut == nil {
		t.Fatalf("no %s server to cut (stream leader %s, the eventbus on %v)", which, info.Cluster.Leader, busOn)
	}
	role := map[string]string{"bus": "the eventbus's", "leader": "stream leader", "follower": "follower"}[which]
	d := cutDuration()
	r := row{fault: fmt.Sprintf("NATS server (%s) cut from the other two", role), duration: d}
	before := ackedNow()
	for _, o := range c.servers {
		if o != cut {
			l.cut(cut, o)
		}
	}
	cutAt := time.Now()
	// Publishing goes on through the majority side: wait for it (a new
	// stream leader is elected there when the leader was cut), then hold the
	// cut for its duration.
	if err := waitAcked(200, d+30*time.Second); err != nil {
		t.Errorf("publishing did not resume during the cut: %v", err)
	}
	resumed := time.Since(cutAt)
	if rest := d - time.Since(cutAt); rest > 0 {
		time.Sleep(rest) // the cut itself: nothing to wait for
	}
	during := ackedNow() - before
	for _, o := range c.servers {
		if o != cut {
			l.heal(cut, o)
		}
	}
	healed := time.Now()
	// Converged: the cut server is healthy again (current with the meta
	// leader and every stream it holds) and the stream's replicas are all
	// current.
	if err := c.waitHealthy(ctx, c.servers...); err != nil {
		t.Error(err)
	}
	for i := 0; i < 1200; i++ {
		info, err = streamInfo(ctx, js, namespace)
		if err == nil && info.Cluster != nil && len(info.Cluster.Replicas) == 2 && info.Cluster.Replicas[0].Current && info.Cluster.Replicas[1].Current {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the stream's replicas never all current after the heal: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.converge = time.Since(healed)
	if err := waitAcked(200, time.Minute); err != nil {
		t.Errorf("publishing after the heal: %v", err)
	}
	close(stop)
	pcancel()
	wg.Wait()

	// Read the stream back straight from NATS, by sequence.
	info, err = retryJS(ctx, func() (*jetstream.StreamInfo, error) { return streamInfo(ctx, js, namespace) })
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, eventbus.StreamName(namespace))
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string][]uint64{} // msg id -> sequences
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := retryJS(ctx, func() (*jetstream.RawStreamMsg, error) { return st.GetMsg(ctx, seq) })
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		// A busy subject's events are stored together, in one envelope:
		// each counts at the envelope's sequence.
		ids, err := eventbus.StoredMsgIDs(m.Header, m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		for _, id := range ids {
			stored[id] = append(stored[id], seq)
		}
	}
	mu.Lock()
	lost, twice, moved := 0, 0, 0
	for id, seq := range acked {
		switch seqs := stored[id]; {
		case len(seqs) == 0:
			lost++
		case len(seqs) > 1:
			twice++
		case id != "first" && seqs[0] != seq:
			moved++
		}
	}
	for id, seqs := range stored {
		if _, ok := acked[id]; !ok && len(seqs) > 1 {
			twice++
		}
	}
	r.tried, r.succeeded = int(sent.Load())+1, len(acked)
	mu.Unlock()
	r.eventsLost = lost
	printRow(t, r)
	moves, err := metric(ctx, "http://"+c.bus.addr+":9102/metrics", "switchyard_eventbus_nats_moves_total")
	if err != nil {
		t.Error(err)
	}
	t.Logf("the eventbus's NATS connections were on %v at the cut; it moved them %.0f times", busOn, moves)
	t.Logf("cut %s (%s): %d acknowledged during the cut, publishing resumed %s after it; %d stored (%d messages), %d acknowledged and lost, %d stored twice, %d at another sequence than acknowledged",
		cut.name, role, during, resumed.Round(100*time.Millisecond), len(stored), info.State.Msgs, lost, twice, moved)
	if lost != 0 || twice != 0 || moved != 0 {
		t.Errorf("%d acknowledged events lost, %d stored more than once, %d at another sequence than acknowledged", lost, twice, moved)
	}
}
