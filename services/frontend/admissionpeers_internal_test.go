package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	frontendv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/frontend/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// replicaPair is two admission queues, as two frontend replicas hold them,
// sharing their state over a real eventbusclient.
func replicaPair(t *testing.T) (one, two *testAdmission) {
	t.Helper()
	ns := eventbustest.StartNATS(t)
	bus := eventbustest.StartEventbus(t, eventbustest.Config(ns.ClientURL()))
	ctx, cancel := context.WithCancel(context.Background())
	var waits []func()
	t.Cleanup(func() {
		cancel()
		for _, w := range waits {
			w()
		}
	})
	mk := func() *testAdmission {
		c, err := eventbusclient.Dial([]string{bus.Addr().String()}, eventbusclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ta := newTestAdmission(t, AdmissionConfig{})
		waits = append(waits, startPeers(ctx, ta.a, c, "fe", slog.New(slog.DiscardHandler)))
		return ta
	}
	return mk(), mk()
}

// TestAdmissionAcrossReplicas: tenant A floods replica two, which also
// holds A's requests in flight; tenant B waits at replica one. When the
// router says the fleet has room, both replicas hear it: replica two does
// not spend it on A, as B, queued elsewhere with less in flight, is owed
// it, and replica one releases B. Once B holds as much as A, replica two
// releases A again. Without the exchange, replica two would give A every
// room it hears of: N replicas, N times the share.
func TestAdmissionAcrossReplicas(t *testing.T) {
	one, two := replicaPair(t)
	var aRunning []*ticket
	for range 3 {
		aRunning = append(aRunning, two.inflight("A", 100))
	}
	// Replica one has a request of its own in flight (without one it
	// would send B on as a probe).
	one.inflight("C", 1000)
	for _, r := range []*testAdmission{one, two} {
		r.a.decided(context.Background(), "m", true)
	}
	ctx := context.Background()
	for _, name := range []string{"A1", "A2", "A3"} {
		two.queue(ctx, name, "A", 0, 100, 10)
	}
	one.queue(ctx, "B1", "B", 0, 100, 10)
	// Each replica sees the other's tenants.
	testwait.Until(t, 20*time.Second, "replica two to see B queued at one", func() bool {
		two.a.mu.Lock()
		defer two.a.mu.Unlock()
		return two.a.peers.queuedBelowLocked("m", 0, 300, 3, func(string) float64 { return 0 }, two.a.now())
	})
	testwait.Until(t, 20*time.Second, "replica one to see A's 300 tokens in flight at two", func() bool {
		one.a.mu.Lock()
		defer one.a.mu.Unlock()
		return one.a.peers.inflightLocked("m", "A", one.a.now()) == 300
	})
	// An A request ends at replica two: that releases nothing.
	aRunning[0].done()
	// The router says the fleet has room: replica two holds A back for
	// B, and replica one releases B.
	two.a.watched("m", false)
	if d := two.depth(); d != 3 {
		t.Fatalf("replica two released A (depth %d) while B, with nothing in flight, waits at replica one", d)
	}
	one.a.watched("m", false)
	r := one.next()
	if r.name != "B1" || r.err != nil {
		t.Fatalf("replica one released %s %v", r.name, r.err)
	}
	one.decide(r.tk, true)
	// B (100 in flight, nothing queued) no longer holds A back: replica
	// two, told of room, releases A1 once it hears. (C, with more in
	// flight than A, never held A back.)
	testwait.Until(t, 20*time.Second, "replica two to release A1", func() bool { return two.depth() == 2 })
	if r := two.next(); r.name != "A1" {
		t.Fatalf("replica two released %s", r.name)
	}
}

// TestAdmissionReplicasTakeTurns: tenant A queues at both replicas, with
// as much in flight everywhere (the same tenant): on a word of room that
// both hear, only the replica queueing more of A releases one; the other
// holds back, as one release fills the room.
func TestAdmissionReplicasTakeTurns(t *testing.T) {
	one, two := replicaPair(t)
	one.inflight("A", 100)
	two.inflight("A", 100)
	for _, r := range []*testAdmission{one, two} {
		r.a.decided(context.Background(), "m", true)
	}
	ctx := context.Background()
	one.queue(ctx, "one-A1", "A", 0, 100, 10)
	for _, name := range []string{"two-A1", "two-A2", "two-A3"} {
		two.queue(ctx, name, "A", 0, 100, 10)
	}
	sees := func(r *testAdmission, queued uint32) func() bool {
		return func() bool {
			r.a.mu.Lock()
			defer r.a.mu.Unlock()
			ok := false
			r.a.peers.liveLocked(r.a.now(), func(ps *peerState) {
				ok = ok || ps.queued[peerKey{"m", "A"}][0] == queued && ps.inflight[peerKey{"m", "A"}] == 100
			})
			return ok
		}
	}
	testwait.Until(t, 20*time.Second, "replica one to see two's 3 queued", sees(one, 3))
	testwait.Until(t, 20*time.Second, "replica two to see one's 1 queued", sees(two, 1))
	one.a.watched("m", false)
	if d := one.depth(); d != 1 {
		t.Fatalf("replica one released (depth %d) though replica two queues more of A", d)
	}
	two.a.watched("m", false)
	r := two.next()
	if r.name != "two-A1" || r.err != nil {
		t.Fatalf("replica two released %s %v", r.name, r.err)
	}
	two.decide(r.tk, true)
	if d := one.depth(); d != 1 {
		t.Fatalf("replica one released (depth %d) on the room replica two took", d)
	}
}

// TestPeerExpiry: a replica not heard from for peerExpiry is forgotten.
func TestPeerExpiry(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	now := time.Unix(1000, 0)
	ta.a.now = func() time.Time { return now }
	ta.a.peers = newPeerTable()
	one := &testAdmission{t: t, a: newAdmission(AdmissionConfig{}, newAdmissionMetrics(prometheus.NewRegistry()))}
	one.a.admit(context.Background(), "m", "A", 0, 50, 1)
	one.a.mu.Lock()
	st := one.a.stateLocked("r1")
	one.a.mu.Unlock()
	ta.a.mu.Lock()
	defer ta.a.mu.Unlock()
	ta.a.peers.applyLocked(st, now)
	if n := ta.a.peers.inflightLocked("m", "A", now.Add(peerExpiry)); n != 50 {
		t.Fatalf("in flight %d, want 50", n)
	}
	if n := ta.a.peers.inflightLocked("m", "A", now.Add(peerExpiry+time.Millisecond)); n != 0 {
		t.Fatalf("in flight %d after expiry, want 0", n)
	}
}

// TestPeerServedAges: another replica's service of a tenant counts as it
// said, aged by the time since (e^(-age/serviceLife)), until the replica
// expires.
func TestPeerServedAges(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name string
		age  time.Duration
		want float64
	}{
		{"as said", 0, 1000},
		{"a second later", time.Second, 1000 * math.Exp(-1/serviceLife.Seconds())},
		{"at the replica's expiry", peerExpiry, 1000 * math.Exp(-peerExpiry.Seconds()/serviceLife.Seconds())},
		{"past it", peerExpiry + time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPeerTable()
			p.applyLocked(&frontendv1.AdmissionState{ReplicaId: "one", Tenants: []*frontendv1.TenantLoad{
				{Model: "m", Tenant: "A", InflightTokens: 100, InflightRequests: 1, ServedTokens: 1000},
				{Model: "m", Tenant: "A", QueuedRequests: 2}}}, now)
			if got := p.servedLocked("m", "A", now.Add(tt.age)); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("served %v, want %v", got, tt.want)
			}
			if got := p.servedLocked("m", "B", now); got != 0 {
				t.Fatalf("another tenant's served %v", got)
			}
		})
	}
}

// TestAdmissionPeerPending: requests another replica let go and whose
// route decision has not come back take the room every replica heard of,
// as this replica's own do: a word of room lets go as many as it counts
// less those, here and there. Four requests of A wait here, where one of
// A's is in flight (so no probe goes); the other replica says it let go
// pending requests of tenant C, which holds far more in flight than A, was
// served far more lately, and queues a backlog there (so the last room is
// not kept for it).
func TestAdmissionPeerPending(t *testing.T) {
	tests := []struct {
		name          string
		pending, room uint32
		want          int
	}{
		{"no peer's pending: the room counted", 0, 3, 3},
		{"a peer's pending take their share", 1, 3, 2},
		{"a peer's pending fill the room", 3, 3, 0},
		{"more pending than the room", 5, 3, 0},
		{"plenty: no bound", 5, core.MaxRoom, 4},
		{"a room not counted: one at a time, as without peers", 5, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			ta.a.mu.Lock()
			ta.a.peers = newPeerTable()
			ta.a.peers.self = "two"
			ta.a.mu.Unlock()
			// Its decision back: saturated.
			ta.decide(ta.inflight("A", 100), true)
			for i := range 4 {
				ta.queue(context.Background(), fmt.Sprint("A", i), "A", 0, 100, 10)
			}
			ta.a.mu.Lock()
			ta.a.applyPeerLocked(&frontendv1.AdmissionState{ReplicaId: "one", Tenants: []*frontendv1.TenantLoad{
				{Model: "m", Tenant: "C", InflightTokens: 1 << 20, InflightRequests: tt.pending + 100, PendingRequests: tt.pending, ServedTokens: 1 << 20},
				{Model: "m", Tenant: "C", QueuedRequests: 2}}})
			ta.a.mu.Unlock()
			ta.a.watchedRoom("m", false, tt.room)
			if got := 4 - ta.depth(); got != tt.want {
				t.Fatalf("released %d on a room of %d with %d pending at the other replica, want %d", got, tt.room, tt.pending, tt.want)
			}
		})
	}
}

// TestPeersExpected: replicas agree on when a tenant is expected. Tenant b
// sends at 0.6 a second for 20 s through two replicas in turn (x at 0,
// 10/3, ..., 20 s; y at 5/3, 5, ..., 55/3 s). Worked by hand (TestRequestRate's
// terms, d = e^(-1/9) for gaps of 10/3 s): x's 6 gaps weigh
// (1-d^6)/(1-d) = 4.627042 over 15.423473 s, rate 4.627042/21.937890 =
// 0.210916; y's 5 gaps 4.053288 over 13.510961 s, rate 0.202408; together
// 0.413323, expected for ln(100)/0.413323 = 11.142 s after the last
// request (x's at 20 s), at both replicas, each adding what the other
// said (TenantLoad.request_rate, .idle_seconds) to its own.
func TestPeersExpected(t *testing.T) {
	tests := []struct {
		name     string
		after    time.Duration
		expected bool
	}{
		{"11 s after", 11 * time.Second, true},
		{"11.3 s after", 11300 * time.Millisecond, false},
		{"at once", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			now := start
			x, y := newTestAdmission(t, AdmissionConfig{}), newTestAdmission(t, AdmissionConfig{})
			for i, r := range []*testAdmission{x, y} {
				r.a.now = func() time.Time { return now }
				r.a.peers = newPeerTable()
				r.a.peers.self = fmt.Sprint("r", i)
			}
			for i := range 13 {
				now = start.Add(time.Duration(i) * 5 * time.Second / 3)
				r := []*testAdmission{x, y}[i%2]
				r.inflight("b", 20).done()
			}
			if want := start.Add(20 * time.Second); !now.Equal(want) {
				t.Fatalf("last request at %v, want %v", now, want)
			}
			now = now.Add(tt.after)
			x.a.mu.Lock()
			xs := x.a.stateLocked("r0")
			x.a.mu.Unlock()
			y.a.mu.Lock()
			ys := y.a.stateLocked("r1")
			y.a.applyPeerLocked(xs)
			y.a.mu.Unlock()
			x.a.mu.Lock()
			x.a.applyPeerLocked(ys)
			x.a.mu.Unlock()
			for _, r := range []*testAdmission{x, y} {
				r.a.mu.Lock()
				mq := r.a.models["m"]
				s := mq.seen["b"]
				rate := requestRate(s.gaps, s.gapTime) + r.a.peers.rateLocked("m", "b", now)
				got := r.a.expectedLocked(mq, "b", s, now)
				r.a.mu.Unlock()
				if math.Abs(rate-0.413323) > 1e-6 {
					t.Errorf("replica %s: rate %.6f, want 0.413323", r.a.peers.self, rate)
				}
				if got != tt.expected {
					t.Errorf("replica %s: expected %v %v after b's last request, want %v", r.a.peers.self, got, tt.after, tt.expected)
				}
			}
		})
	}
}

// TestAdmissionReplicasTakeTurnsOnStaleCounts: tenant A queues at two
// replicas, each having said one queued; since, one queued two more and
// the other one more, unsaid. On a word of room for two that both hear,
// the two requests go from one replica only: both compare the counts they
// last said (one each: a tie, the lower id goes). Compared with its count
// now, each would find its own queue the longer and both would go: four
// requests on room for two.
func TestAdmissionReplicasTakeTurnsOnStaleCounts(t *testing.T) {
	now := time.Unix(1000, 0)
	x, y := newTestAdmission(t, AdmissionConfig{}), newTestAdmission(t, AdmissionConfig{})
	for i, r := range []*testAdmission{x, y} {
		r.a.now = func() time.Time { return now }
		r.a.peers = newPeerTable()
		r.a.peers.self = fmt.Sprint("r", i)
		// Something in flight, so that neither sends a probe.
		r.decide(r.inflight("A", 100), true)
	}
	ctx := context.Background()
	x.queue(ctx, "x-A1", "A", 0, 100, 10)
	y.queue(ctx, "y-A1", "A", 0, 100, 10)
	publish := func(r *testAdmission) *frontendv1.AdmissionState {
		r.a.mu.Lock()
		defer r.a.mu.Unlock()
		st := r.a.stateLocked(r.a.peers.self)
		r.a.published = queuedOf(st)
		return st
	}
	xs, ys := publish(x), publish(y)
	x.a.mu.Lock()
	x.a.applyPeerLocked(ys)
	x.a.mu.Unlock()
	y.a.mu.Lock()
	y.a.applyPeerLocked(xs)
	y.a.mu.Unlock()
	x.queue(ctx, "x-A2", "A", 0, 100, 10)
	x.queue(ctx, "x-A3", "A", 0, 100, 10)
	y.queue(ctx, "y-A2", "A", 0, 100, 10)
	for _, r := range []*testAdmission{x, y} {
		r.a.watchedRoom("m", false, 2)
	}
	released := 5 - x.depth() - y.depth()
	if released != 2 || x.depth() != 1 || y.depth() != 2 {
		t.Fatalf("released %d on room for 2 (x queues %d of 3, y %d of 2), want 2, both from x (the lower id)", released, x.depth(), y.depth())
	}
}

// TestPeersPrefilling: a tenant's requests without a first token are
// counted over every replica, each replica's as it last published them.
func TestPeersPrefilling(t *testing.T) {
	tests := []struct {
		name string
		// x and y are a's requests in flight at each replica, of which
		// firstX and firstY had their first token.
		x, y, firstX, firstY int
		want                 int
	}{
		{"one at each", 1, 1, 0, 0, 2},
		{"two at x, one decoding; one at y", 2, 1, 1, 0, 2},
		{"all decoding", 1, 2, 1, 2, 0},
		{"two at x; y's one decoding", 2, 1, 0, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			x, y := newTestAdmission(t, AdmissionConfig{}), newTestAdmission(t, AdmissionConfig{})
			for i, r := range []*testAdmission{x, y} {
				r.a.now = func() time.Time { return now }
				r.a.peers = newPeerTable()
				r.a.peers.self = fmt.Sprint("r", i)
				n, first := tt.x, tt.firstX
				if i == 1 {
					n, first = tt.y, tt.firstY
				}
				for j := range n {
					tk := r.inflight("a", 20)
					if j < first {
						tk.firstToken()
					}
				}
			}
			x.a.mu.Lock()
			xs := x.a.stateLocked("r0")
			x.a.mu.Unlock()
			y.a.mu.Lock()
			ys := y.a.stateLocked("r1")
			y.a.applyPeerLocked(xs)
			y.a.mu.Unlock()
			x.a.mu.Lock()
			x.a.applyPeerLocked(ys)
			x.a.mu.Unlock()
			for _, r := range []*testAdmission{x, y} {
				r.a.mu.Lock()
				var got int
				if mq := r.a.models["m"]; mq != nil {
					got = r.a.prefillingFleetLocked(mq, "a")
				}
				r.a.mu.Unlock()
				if got != tt.want {
					t.Errorf("replica %s: a's prefilling over every replica %d, want %d", r.a.peers.self, got, tt.want)
				}
			}
		})
	}
}
