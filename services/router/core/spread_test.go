package core

import (
	"fmt"
	"math"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// replicaNet delivers replica sync messages between cores a fixed delay
// after they were sent, stamped with when they were sent: the service's
// sync over the eventbus on a virtual clock.
type replicaNet struct {
	cores  []*Core
	delay  time.Duration
	now    *time.Time
	queued []netMsg
}

type netMsg struct {
	from int
	at   time.Time
	ev   *routerv1.ReplicaEvent
}

// deliver applies every message due by now, in sending order.
func (n *replicaNet) deliver() {
	rest := n.queued[:0]
	for _, m := range n.queued {
		if m.at.Add(n.delay).After(*n.now) {
			rest = append(rest, m)
			continue
		}
		for i, c := range n.cores {
			if i != m.from {
				c.ApplyReplica(m.ev, m.at)
			}
		}
	}
	n.queued = rest
}

// netObserver is one core's side of a replicaNet.
type netObserver struct {
	n    *replicaNet
	from int
}

func (o netObserver) send(ev *routerv1.ReplicaEvent) {
	o.n.queued = append(o.n.queued, netMsg{o.from, *o.n.now, ev})
	o.n.deliver()
}

func (o netObserver) Routed(id, _ string, w index.WorkerID, prefill int, hashes []uint64, leg Leg, session, _ string) {
	o.send(SessionRoutedEvent(id, w, prefill, hashes, leg, session))
}
func (o netObserver) PrefillDone(id string) { o.send(PrefillDoneEvent(id)) }
func (o netObserver) Freed(id string)       { o.send(FreedEvent(id)) }

// TestReplicasSpreadNearTiesAsOneRouter is the herding case. Four idle
// workers differ by a percent in speed, so each decision has one cheapest
// worker and three close behind. Requests come in bursts of three, a
// millisecond apart, each burst done before the next: one router sends a
// burst to three workers (each decision sees the last one's queue).
// Replicas that hear each other a sync delay late saw the same idle
// workers for the whole burst, and without accounting for the decisions
// they had not heard all took the fastest one. Now they spread: with the
// delay, a burst reaches more than two workers on average (three
// requests landing uniformly on four workers reach 2.3); heard at once
// they decide exactly as one router; and a worker holding the requests'
// prefix, cheaper by far more than the unheard decisions could add, keeps
// every request of every replica.
func TestReplicasSpreadNearTiesAsOneRouter(t *testing.T) {
	const (
		workers = 4
		burst   = 3
		bursts  = 120
	)
	shared := tokens(2048, 777) // the cached prefix of the last case
	type result struct {
		chosen   [][]uint64 // per burst, each request's worker
		distinct float64    // mean distinct workers per burst
	}
	run := func(t *testing.T, replicas int, delay time.Duration, cached bool) result {
		now := time.Unix(1_700_000_000, 0)
		net := &replicaNet{delay: delay, now: &now}
		for i := range replicas {
			c := cluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return now }, Seed: uint64(i + 1)}, workers)
			for w := 1; w <= workers; w++ {
				// Worker 1 is the fastest, by a percent a worker.
				m := timingmodel.Default().Scaled(1 + 0.01*float64(workers-w))
				c.ReportLoad(&workerv1.LoadMetrics{InstanceId: uint64(w), KvBlocksTotal: 1 << 16, TimingModel: m.Proto()})
			}
			if cached {
				stored(c, workers, 1, shared)
			}
			if replicas > 1 {
				c.SetObserver(netObserver{net, i})
			}
			net.cores = append(net.cores, c)
		}
		var res result
		n := 0
		for b := range bursts {
			start := now
			var ids []string
			var owners []int
			var got []uint64
			for r := range burst {
				now = start.Add(time.Duration(r) * time.Millisecond)
				net.deliver()
				toks := tokens(512, uint32(1000+n))
				if cached {
					toks = append(append([]uint32(nil), shared...), tokens(48, uint32(1000+n))...)
				}
				n++
				owner := r % replicas
				id := fmt.Sprintf("b%d-%d", b, r)
				resp, err := net.cores[owner].Route(&routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: toks})
				if err != nil {
					t.Fatal(err)
				}
				ids, owners, got = append(ids, id), append(owners, owner), append(got, resp.InstanceId)
			}
			// The burst's prefills end and the requests finish; every
			// replica hears of it before the next burst.
			now = start.Add(30 * time.Millisecond)
			net.deliver()
			for i, id := range ids {
				net.cores[owners[i]].PrefillDone(id)
				net.cores[owners[i]].Free(id)
			}
			now = start.Add(60 * time.Millisecond)
			net.deliver()
			seen := map[uint64]bool{}
			for _, w := range got {
				seen[w] = true
			}
			res.distinct += float64(len(seen)) / bursts
			res.chosen = append(res.chosen, got)
		}
		return res
	}
	oneRouter := run(t, 1, 0, false)
	t.Logf("one router: %.2f workers per burst", oneRouter.distinct)
	for _, tc := range []struct {
		name     string
		replicas int
		delay    time.Duration
		cached   bool
		check    func(t *testing.T, r result)
	}{
		{"three replicas heard at once decide as one router", 3, 0, false, func(t *testing.T, r result) {
			if fmt.Sprint(r.chosen) != fmt.Sprint(oneRouter.chosen) {
				t.Fatalf("decisions differ from one router's:\n got %v\nwant %v", r.chosen, oneRouter.chosen)
			}
		}},
		{"three replicas heard 5 ms late spread their bursts", 3, 5 * time.Millisecond, false, func(t *testing.T, r result) {
			if r.distinct < 2 {
				t.Fatalf("a burst reached %.2f workers on average, want >= 2 (herding reaches 1)", r.distinct)
			}
		}},
		{"two replicas heard 20 ms late spread their bursts", 2, 20 * time.Millisecond, false, func(t *testing.T, r result) {
			// Replica 0 routes the first and third request of a burst,
			// and sees its own first: herding reaches 2.
			if r.distinct < 2.3 {
				t.Fatalf("a burst reached %.2f workers on average, want >= 2.3 (herding reaches 2)", r.distinct)
			}
		}},
		{"a cached prefix keeps every request however late", 3, 5 * time.Millisecond, true, func(t *testing.T, r result) {
			for i, b := range r.chosen {
				for _, w := range b {
					if w != workers {
						t.Fatalf("burst %d went to %v, want every request on worker %d, which caches the prefix", i, b, workers)
					}
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.replicas, tc.delay, tc.cached)
			t.Logf("%.2f workers per burst", r.distinct)
			tc.check(t, r)
		})
	}
}

// TestWaterLevel checks the filling of the unheard decisions' expected
// cost onto the cheapest workers by hand.
func TestWaterLevel(t *testing.T) {
	for _, tc := range []struct {
		costs     []float64 // cheapest first
		water     float64
		wantK     int
		wantLevel float64
	}{
		{[]float64{10}, 3, 1, 13},
		{[]float64{10, 20}, 3, 1, 13},                      // the next is above the level: a clear winner
		{[]float64{10, 11}, 3, 2, 12},                      // (3 + 21) / 2
		{[]float64{10, 11, 12, 30}, 3, 2, 12},              // the level reaches the third cost: the third holds nothing
		{[]float64{10, 10, 10}, 1.5, 3, 10.5},              // exact ties share equally
		{[]float64{10, 11, 14, 15}, 10, 3, 15},             // (10 + 35) / 3
		{[]float64{10, 11, 14, 15}, 20, 4, (20 + 50) / 4.}, // all reached
	} {
		near := make([]int, len(tc.costs))
		for i := range tc.costs {
			near[i] = i
		}
		k, level := waterLevel(tc.costs, near, tc.water)
		if k != tc.wantK || math.Abs(level-tc.wantLevel) > 1e-9 {
			t.Errorf("waterLevel(%v, %v) = %d, %v; want %d, %v", tc.costs, tc.water, k, level, tc.wantK, tc.wantLevel)
		}
		held := 0.0
		for _, i := range near[:k] {
			held += level - tc.costs[i]
		}
		if math.Abs(held-tc.water) > 1e-9 && tc.wantK == k {
			t.Errorf("waterLevel(%v, %v): the shares hold %v, want all the water", tc.costs, tc.water, held)
		}
	}
}

// TestUnheardExpected: the decisions expected unheard are the peers' rate
// times the mean sync delay; none before a peer is heard or without delay.
func TestUnheardExpected(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name  string
		every time.Duration // between the peers' decisions
		delay time.Duration
		want  float64
	}{
		{"one a millisecond, heard 5 ms late", time.Millisecond, 5 * time.Millisecond, 5},
		{"one every 10 ms, heard 5 ms late", 10 * time.Millisecond, 5 * time.Millisecond, 0.5},
		{"heard at once", time.Millisecond, 0, 0},
		{"a peer clock ahead reads as no delay", time.Millisecond, -3 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u unheard
			if got := u.expected(t0); got != 0 {
				t.Fatalf("nothing heard: %v expected, want 0", got)
			}
			var last time.Time
			for i := range 200 {
				last = t0.Add(time.Duration(i) * tc.every)
				u.heardRoute(last, last.Add(tc.delay), 10)
			}
			// As of when the last one is heard, the window's 64 decisions
			// spanned 63 intervals and the delay.
			now := last.Add(max(tc.delay, 0))
			span := 63*tc.every + max(tc.delay, 0)
			want := 0.0
			if tc.want > 0 {
				want = rateWindow / (float64(span) / float64(time.Millisecond)) * float64(tc.delay) / float64(time.Millisecond)
			}
			if got := u.expected(now); math.Abs(got-want) > 1e-9 {
				t.Fatalf("expected %v unheard, want %v (about %v)", got, want, tc.want)
			}
		})
	}
}
