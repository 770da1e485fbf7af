package core

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// pairTiming is the timing model of the pair tests' workers, chosen so
// that costs are worked by hand: prefill(t) = t ms, a decode step 20 ms,
// steps of 100 tokens less one per decoding request.
var pairTiming = &workerv1.TimingModel{PrefillMsPerToken: 1, DecodeMsBase: 20, MaxBatchedTokens: 100}

// pairLink prices a block (4 tokens of 3,125 bytes: 100,000 bits) at
// 1 Gb/s: 0.1 ms, with no set-up.
func pairLink(cfg Config) Config {
	cfg.KVTransferGbps, cfg.KVBytesPerToken, cfg.KVTransferRTT = 1, 3125, 0
	return cfg
}

// pairCluster registers instances 1 and 2 as decode workers, 3 and 4 as
// prefill workers, and, when agg, 5 as an aggregated one, all serving
// model with blocks of 4 tokens, on a still clock.
func pairCluster(t *testing.T, cfg Config, agg bool) *Core {
	t.Helper()
	at := time.Unix(1000, 0)
	cfg.Clock = func() time.Time { return at }
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.OverlapWeight == 0 {
		cfg.OverlapWeight = 1
	}
	c := New(cfg)
	roles := map[uint64]commonv1.Role{1: commonv1.Role_ROLE_DECODE, 2: commonv1.Role_ROLE_DECODE,
		3: commonv1.Role_ROLE_PREFILL, 4: commonv1.Role_ROLE_PREFILL}
	if agg {
		roles[5] = commonv1.Role_ROLE_AGG
	}
	var ins []registryclient.Change[*registryv1.Instance]
	var cards []registryclient.Change[*registryv1.ModelCard]
	for id, role := range roles {
		ins = append(ins, registryclient.Change[*registryv1.Instance]{Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
			InstanceId: id, Role: role, Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}})
		cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate",
			InstanceId: id, ModelName: model, BlockSize: 4}})
	}
	c.OnInstances(ins)
	c.OnModels(cards)
	return c
}

// pairLoad reports instance's load: decoding requests in decode, and
// queued prompt tokens waiting for prefill, none of them the router's.
func pairLoad(c *Core, instance uint64, decoding, queued int) {
	m := &workerv1.LoadMetrics{InstanceId: instance, TimingModel: pairTiming, Requests: []*workerv1.RequestLoad{}}
	for i := range decoding {
		m.Requests = append(m.Requests, &workerv1.RequestLoad{RequestId: "d" + string(rune('a'+i)), DecodeBlocks: 1})
	}
	if queued > 0 {
		m.Requests = append(m.Requests, &workerv1.RequestLoad{RequestId: "q", PrefillTokens: uint32(queued)})
	}
	c.ReportLoad(m)
}

// TestPairRouting routes one request of 400 tokens (100 blocks) per case,
// on decode workers 1 and 2 (10 and 11 requests decoding: steps of 90 and
// 89 tokens, 20 ms of decode beside each) and prefill workers 3 and 4 (4
// with 100 tokens queued); worker 1 caches the prompt's first block. The
// costs, by hand:
//
//	whole on 1: 396 tokens = 4 steps of 90 + 36: 396 + 5*20 = 496
//	whole on 2: 400 tokens = 4 steps of 89 + 44: 400 + 5*20 = 500
//	prefill on 3: 400 tokens in steps of 100 = 400
//	prefill on 4: 100 queued + 400 = 500
//	decode leg on 1: its last block (4 tokens) + a decode step + 99 blocks moved: 4 + 20 + 9.9 = 33.9
//	decode leg on 2: 4 + 20 + 100 blocks moved = 34
//
// so the pair (3, 1) costs 433.9 against 496 whole on 1.
func TestPairRouting(t *testing.T) {
	prompt := tokens(400, 1)
	for _, tc := range []struct {
		name    string
		disagg  Disaggregation
		setup   func(c *Core)
		exclude []uint64
		agg     bool
		// want: the decode (or whole) worker and the prefill worker (0:
		// none), or the error.
		want, wantPrefill uint64
		wantDecision      string
		wantErr           error
	}{
		{name: "auto: the pair beats the prefill on a decoding worker", want: 1, wantPrefill: 3, wantDecision: DecisionRemotePrefill},
		{name: "zero value is auto", disagg: "", want: 1, wantPrefill: 3, wantDecision: DecisionRemotePrefill},
		{name: "off: prefill where it decodes", disagg: DisaggOff, want: 1, wantDecision: DecisionLocalPrefill},
		{
			// Whole on 1: 8 tokens + a step = 28; the pair 400 + 24 + 0.2.
			name: "auto: a short uncached suffix stays local", setup: func(c *Core) { stored(c, 1, 2, prompt[:392]) },
			want: 1, wantDecision: DecisionLocalPrefill,
		},
		{
			name: "always: even a short uncached suffix is prefilled remotely", disagg: DisaggAlways,
			setup: func(c *Core) { stored(c, 1, 2, prompt[:392]) },
			want:  1, wantPrefill: 3, wantDecision: DecisionRemotePrefill,
		},
		{
			// Whole on 1: 496, and its 10 decoding requests wait 396 ms
			// each for the prompt, 4,456 in all; prefill on 3: 5,000
			// queued + 400 = 5,400; the pair 5,433.9.
			name: "auto: a busy prefill pool keeps the prefill local",
			setup: func(c *Core) {
				pairLoad(c, 3, 0, 5000)
				pairLoad(c, 4, 0, 5100)
			},
			want: 1, wantDecision: DecisionLocalPrefill,
		},
		{
			// Prefill on 4: 100 queued + 40 new = 140; the pair 173.9.
			name: "auto: the prefill worker caching the prefix", setup: func(c *Core) { stored(c, 4, 1, prompt[:360]) },
			want: 1, wantPrefill: 4, wantDecision: DecisionRemotePrefill,
		},
		{
			// Decode leg on 2 holding 99 blocks: 24 + 0.1; on 1 33.9.
			name: "the decode leg goes where the blocks are", disagg: DisaggAlways, setup: func(c *Core) { stored(c, 2, 1, prompt[:396]) },
			want: 2, wantPrefill: 3, wantDecision: DecisionRemotePrefill,
		},
		{name: "no live prefill worker", exclude: []uint64{3, 4}, want: 1, wantDecision: DecisionLocalPrefill},
		{name: "only prefill workers", exclude: []uint64{1, 2}, wantErr: ErrNoWorker},
		{
			// Whole on 5 (idle): 400; the pair 433.9.
			name: "an idle aggregated worker beats the pair", agg: true,
			setup: func(c *Core) { pairLoad(c, 5, 0, 0) },
			want:  5, wantDecision: DecisionLocalPrefill,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: tc.disagg}), tc.agg)
			pairLoad(c, 1, 10, 0)
			pairLoad(c, 2, 11, 0)
			pairLoad(c, 3, 0, 0)
			pairLoad(c, 4, 0, 100)
			stored(c, 1, 1, prompt[:4])
			if tc.setup != nil {
				tc.setup(c)
			}
			// Explain first: it records nothing, and decides the same.
			ex, exErr := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: tc.exclude})
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: tc.exclude})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(exErr, tc.wantErr) {
					t.Fatalf("Route = %v, Explain = %v; want %v", err, exErr, tc.wantErr)
				}
				return
			}
			if err != nil || exErr != nil {
				t.Fatalf("Route: %v; Explain: %v", err, exErr)
			}
			remote, local := c.DisaggDecisions()
			if resp.InstanceId != tc.want || resp.GetPrefill().GetInstanceId() != tc.wantPrefill {
				t.Fatalf("routed to %d with prefill on %d; want %d and %d (%s)", resp.InstanceId, resp.GetPrefill().GetInstanceId(), tc.want, tc.wantPrefill, ex.Reason)
			}
			if ex.InstanceId != tc.want || ex.PrefillInstanceId != tc.wantPrefill || ex.Disaggregation != tc.wantDecision {
				t.Fatalf("Explain chose %d, prefill %d, %q; want %d, %d, %q", ex.InstanceId, ex.PrefillInstanceId, ex.Disaggregation, tc.want, tc.wantPrefill, tc.wantDecision)
			}
			if !strings.HasPrefix(ex.Reason, strings.ReplaceAll(tc.wantDecision, "_", " ")) {
				t.Fatalf("reason %q does not begin with the decision %q", ex.Reason, tc.wantDecision)
			}
			wantRemote := uint64(0)
			if tc.wantDecision == DecisionRemotePrefill {
				wantRemote = 1
			}
			if remote != wantRemote || local != 1-wantRemote {
				t.Fatalf("counted %d remote and %d local decisions; want %d and %d", remote, local, wantRemote, 1-wantRemote)
			}
			if p := resp.GetPrefill(); p != nil && (p.Transport.GetTcp() != "10.0.0.1:1" || p.Endpoint.GetEndpoint() != "generate") {
				t.Fatalf("prefill target = %v", p)
			}
			// The explanation lists each pool apart, in id order.
			var serve, pre []uint64
			for _, e := range ex.Candidates {
				serve = append(serve, e.Candidate.InstanceId)
			}
			for _, e := range ex.PrefillCandidates {
				pre = append(pre, e.Candidate.InstanceId)
			}
			wantServe, wantPre := []uint64{1, 2}, []uint64{3, 4}
			if tc.agg {
				wantServe = []uint64{1, 2, 5}
			}
			if len(tc.exclude) > 0 {
				wantPre = nil
			}
			if !slicesEqual(serve, wantServe) || !slicesEqual(pre, wantPre) {
				t.Fatalf("explained decode/whole candidates %v and prefill candidates %v; want %v and %v", serve, pre, wantServe, wantPre)
			}
		})
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPairCosts checks the hand-worked costs TestPairRouting's comment
// states, as Explain reports them for its first case.
func TestPairCosts(t *testing.T) {
	c := pairCluster(t, pairLink(Config{Mode: ModeKV}), false)
	pairLoad(c, 1, 10, 0)
	pairLoad(c, 2, 11, 0)
	pairLoad(c, 3, 0, 0)
	pairLoad(c, 4, 0, 100)
	stored(c, 1, 1, tokens(400, 1)[:4])
	ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(400, 1)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]float64{1: 33.9, 2: 34, 3: 400, 4: 500}
	for _, e := range append(ex.Candidates, ex.PrefillCandidates...) {
		if got := e.Candidate.Cost; got < want[e.Candidate.InstanceId]-1e-9 || got > want[e.Candidate.InstanceId]+1e-9 {
			t.Errorf("instance %d costs %v; want %v", e.Candidate.InstanceId, got, want[e.Candidate.InstanceId])
		}
	}
	// Had the prefill stayed local, the decode workers would show their
	// whole-request costs: their time to first token (496 and 500 ms) and
	// the wait the prompt's 396 and 400 uncached tokens (1 ms each) cause
	// their 10 and 11 decoding requests.
	off := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggOff}), false)
	pairLoad(off, 1, 10, 0)
	pairLoad(off, 2, 11, 0)
	stored(off, 1, 1, tokens(400, 1)[:4])
	ex, err = off.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(400, 1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ex.Candidates {
		if w := map[uint64]float64{1: 496 + 10*396, 2: 500 + 11*400}[e.Candidate.InstanceId]; e.Candidate.Cost != w {
			t.Errorf("off: instance %d costs %v; want %v", e.Candidate.InstanceId, e.Candidate.Cost, w)
		}
	}
}

// TestPairLoad follows a pair's two legs through the load record: the
// prefill leg on its prefill worker until the prefill completes (the
// handoff), the decode leg on the decode worker until the free; a free
// before the handoff ends both, and a free that came before the decision
// leaves nothing counted. The decode leg holds its blocks on the decode
// worker from its admission there: once the worker's load report lists
// it decoding, or, from a worker whose reports do not list requests, at
// the handoff.
func TestPairLoad(t *testing.T) {
	type load struct{ reqs, prefill, decode uint32 }
	prompt := tokens(400, 1)
	for _, tc := range []struct {
		name string
		// steps after routing "r" (a pair: prefill on 3, decode on 1);
		// listed: the decode worker reported its requests before.
		freeFirst, listed bool
		steps             []string
		// want is each worker's load after the steps.
		want map[uint64]load
	}{
		{name: "routed", want: map[uint64]load{1: {1, 0, 0}, 3: {1, 100, 0}}},
		{name: "handoff", steps: []string{"done"}, want: map[uint64]load{1: {1, 0, 100}, 3: {}}},
		{name: "handoff to a listing worker", listed: true, steps: []string{"done"}, want: map[uint64]load{1: {1, 0, 0}, 3: {}}},
		{name: "listed waiting", listed: true, steps: []string{"done", "waiting"}, want: map[uint64]load{1: {1, 0, 0}, 3: {}}},
		{name: "listed decoding", listed: true, steps: []string{"done", "decoding"}, want: map[uint64]load{1: {1, 0, 100}, 3: {}}},
		{name: "listed decoding then free", listed: true, steps: []string{"done", "decoding", "free"}, want: map[uint64]load{1: {}, 3: {}}},
		{name: "free waiting for admission", listed: true, steps: []string{"done", "free"}, want: map[uint64]load{1: {}, 3: {}}},
		{name: "handoff then free", steps: []string{"done", "free"}, want: map[uint64]load{1: {}, 3: {}}},
		{name: "free before the handoff", steps: []string{"free"}, want: map[uint64]load{1: {}, 3: {}}},
		{name: "free twice", steps: []string{"free", "free", "done"}, want: map[uint64]load{1: {}, 3: {}}},
		{name: "free before the route", freeFirst: true, want: map[uint64]load{1: {}, 3: {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggAlways}), false)
			if tc.freeFirst {
				c.Free("r")
			}
			report := func(reqs ...*workerv1.RequestLoad) {
				c.ReportLoad(&workerv1.LoadMetrics{InstanceId: 1, Requests: reqs, RunningRequests: uint32(len(reqs)), KvBlocksTotal: 1000})
			}
			if tc.listed {
				report()
			}
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: []uint64{2, 4}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.InstanceId != 1 || resp.GetPrefill().GetInstanceId() != 3 {
				t.Fatalf("routed to %d, prefill %d; want 1 and 3", resp.InstanceId, resp.GetPrefill().GetInstanceId())
			}
			for _, s := range tc.steps {
				switch s {
				case "done":
					c.PrefillDone("r")
				case "free":
					c.Free("r")
				case "waiting":
					report(&workerv1.RequestLoad{RequestId: "r", PrefillTokens: 4})
				case "decoding":
					report(&workerv1.RequestLoad{RequestId: "r", DecodeBlocks: 100})
				}
			}
			for _, w := range c.Stats().Workers {
				if got := (load{w.Requests, w.PrefillBlocks, w.DecodeBlocks}); got != tc.want[w.InstanceId] {
					t.Errorf("instance %d: load %+v; want %+v", w.InstanceId, got, tc.want[w.InstanceId])
				}
			}
		})
	}
}

// TestPairReplicaSync routes pairs on one of two replicas joined as
// replica sync joins them: the other counts both legs, ends the prefill
// leg at the handoff and both at the free, and a pair it heard of after
// its own free counts nothing.
func TestPairReplicaSync(t *testing.T) {
	prompt := tokens(400, 1)
	a := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggAlways}), false)
	b := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggAlways}), false)
	at := time.Unix(1000, 0)
	net := &replicaNet{cores: []*Core{a, b}, now: &at}
	a.SetObserver(netObserver{n: net, from: 0})
	deliver := net.deliver
	loadOf := func(c *Core, id uint64) [3]uint32 {
		for _, w := range c.Stats().Workers {
			if w.InstanceId == id {
				return [3]uint32{w.Requests, w.PrefillBlocks, w.DecodeBlocks}
			}
		}
		return [3]uint32{}
	}
	exclude := []uint64{2, 4}
	if _, err := a.Route(&routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: exclude}); err != nil {
		t.Fatal(err)
	}
	deliver()
	if got, got3 := loadOf(b, 1), loadOf(b, 3); got != [3]uint32{1, 0, 0} || got3 != [3]uint32{1, 100, 0} {
		t.Fatalf("the other replica counts %v on the decode worker and %v on the prefill worker; want [1 0 0] and [1 100 0]", got, got3)
	}
	a.PrefillDone("r")
	deliver()
	if got, got3 := loadOf(b, 1), loadOf(b, 3); got != [3]uint32{1, 0, 100} || got3 != [3]uint32{} {
		t.Fatalf("after the handoff: %v and %v; want [1 0 100] and [0 0 0]", got, got3)
	}
	a.Free("r")
	deliver()
	if got, got3 := loadOf(b, 1), loadOf(b, 3); got != [3]uint32{} || got3 != [3]uint32{} {
		t.Fatalf("after the free: %v and %v; want none", got, got3)
	}
	// b frees "s" before hearing a's decision for it.
	b.Free("s")
	if _, err := a.Route(&routerv1.RouteRequest{RequestId: "s", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: exclude}); err != nil {
		t.Fatal(err)
	}
	deliver()
	if got, got3 := loadOf(b, 1), loadOf(b, 3); got != [3]uint32{} || got3 != [3]uint32{} {
		t.Fatalf("a pair heard after its free counts %v and %v; want none", got, got3)
	}
}

// TestPairReplicaArrivalWork routes a pair (prefill on 3, decode on 1)
// on one of two replicas: both record its arrival's work as the prefill
// of its prompt where it is computed, on the prefill worker with that
// worker's model. Worker 3 prefills at 2 ms a token (1 and the others at
// pairTiming's 1 ms), no per-step constant: 400 uncached tokens take
// 800 ms there (the decode leg's own single block on worker 1's model
// would be 4 ms). Before the prefill worker's model is heard the
// decode worker's prices the prompt: 400 ms.
func TestPairReplicaArrivalWork(t *testing.T) {
	prompt := tokens(400, 1)
	slow := &workerv1.TimingModel{PrefillMsPerToken: 2, DecodeMsBase: 20, MaxBatchedTokens: 100}
	for _, tc := range []struct {
		name     string
		reported bool
		want     float64
	}{
		{name: "the prefill worker's model", reported: true, want: 800},
		{name: "no model of the prefill worker yet", want: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggAlways}), false)
			b := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggAlways}), false)
			at := time.Unix(1000, 0)
			net := &replicaNet{cores: []*Core{a, b}, now: &at}
			a.SetObserver(netObserver{n: net, from: 0})
			for _, c := range []*Core{a, b} {
				pairLoad(c, 1, 0, 0)
				if tc.reported {
					c.ReportLoad(&workerv1.LoadMetrics{InstanceId: 3, TimingModel: slow, Requests: []*workerv1.RequestLoad{}})
				}
			}
			if !tc.reported {
				// The deciding router knows worker 3's model; the
				// other replica has not heard its report.
				a.ReportLoad(&workerv1.LoadMetrics{InstanceId: 3, TimingModel: pairTiming, Requests: []*workerv1.RequestLoad{}})
			}
			resp, err := a.Route(&routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), TokenIds: prompt, ExcludeInstanceIds: []uint64{2, 4}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.InstanceId != 1 || resp.GetPrefill().GetInstanceId() != 3 {
				t.Fatalf("routed to %d, prefill %d; want 1 and 3", resp.InstanceId, resp.GetPrefill().GetInstanceId())
			}
			net.deliver()
			last := func(c *Core) float64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.arrivals.n != 1 {
					t.Fatalf("%d arrivals recorded, want 1", c.arrivals.n)
				}
				return c.arrivals.work[(c.arrivals.next-1+rateWindow)%rateWindow]
			}
			if got := last(b); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("the other replica records %v ms of work, want %v", got, tc.want)
			}
			if tc.reported {
				if got := last(a); math.Abs(got-tc.want) > 1e-9 {
					t.Errorf("the deciding replica records %v ms of work, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestPairPredictsBothLegs routes two requests with the same prompt in a
// row: the first's blocks, predicted on its prefill and its decode worker
// until their events store them, draw the second to the same pair, and
// its free before the handoff drops the prefill worker's prediction.
func TestPairPredictsBothLegs(t *testing.T) {
	prompt := tokens(400, 1)
	c := pairCluster(t, pairLink(Config{Mode: ModeKV, Disaggregation: DisaggAlways}), false)
	first, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: prompt})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: prompt})
	if err != nil {
		t.Fatal(err)
	}
	overlap := map[uint64]uint32{}
	for _, e := range append(ex.Candidates, ex.PrefillCandidates...) {
		overlap[e.Candidate.InstanceId] = e.Candidate.OverlapBlocks
	}
	p, d := first.GetPrefill().GetInstanceId(), first.InstanceId
	if overlap[p] != 100 || overlap[d] != 100 {
		t.Fatalf("after routing to prefill %d and decode %d, predicted overlaps are %v; want 100 on both", p, d, overlap)
	}
	c.Free("a")
	ex, err = c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: prompt})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range append(ex.Candidates, ex.PrefillCandidates...) {
		if e.Candidate.OverlapBlocks != 0 {
			t.Fatalf("after a free before the handoff instance %d is still predicted %d blocks", e.Candidate.InstanceId, e.Candidate.OverlapBlocks)
		}
	}
}

// TestAggregatedModelsAreNotPaired checks that a model without the roles
// routes as before: no prefill target, no disaggregation decision counted.
func TestAggregatedModelsAreNotPaired(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 3)
	resp, err := c.Route(&routerv1.RouteRequest{RequestId: "a", Target: modelTarget(), TokenIds: tokens(64, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: tokens(64, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if r, l := c.DisaggDecisions(); resp.Prefill != nil || ex.Disaggregation != "" || len(ex.PrefillCandidates) != 0 || r+l != 0 {
		t.Fatalf("an aggregated model got prefill %v, explained %q with %d prefill candidates, %d+%d decisions counted", resp.Prefill, ex.Disaggregation, len(ex.PrefillCandidates), r, l)
	}
}

func TestParseDisaggregation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Disaggregation
		err  bool
	}{{"auto", DisaggAuto, false}, {"ALWAYS", DisaggAlways, false}, {"off", DisaggOff, false}, {"", "", true}, {"on", "", true}} {
		got, err := ParseDisaggregation(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseDisaggregation(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), "auto, always, off") {
			t.Errorf("error %q does not name the valid values", err)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"bad setting", func(c *Config) { c.Disaggregation = "sometimes" }, false},
		{"free link", func(c *Config) { c.KVTransferGbps = 0 }, true},
		{"negative bandwidth", func(c *Config) { c.KVTransferGbps = -1 }, false},
		{"negative size", func(c *Config) { c.KVBytesPerToken = -1 }, false},
		{"negative latency", func(c *Config) { c.KVTransferRTT = -time.Millisecond }, false},
	} {
		cfg := DefaultConfig()
		tc.cfg(&cfg)
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
}

// TestPoolGroupsAreSorted checks that every group pools.each hands out is
// sorted by instance id, as the binary search that finds a candidate's
// cached blocks there needs, for pools that mix aggregated, decode and
// prefill workers in any order of ids: each worker's overlap is found.
func TestPoolGroupsAreSorted(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		agg, decode, prefill []uint64
	}{
		{name: "aggregated ids above the decode ones", agg: []uint64{5, 9}, decode: []uint64{2, 7}, prefill: []uint64{1, 3}},
		{name: "interleaved", agg: []uint64{1, 4, 8}, decode: []uint64{2, 6}, prefill: []uint64{3, 5, 7}},
		{name: "no aggregated worker", decode: []uint64{4, 2}, prefill: []uint64{3, 1}},
		{name: "no decode worker", agg: []uint64{9, 1}, prefill: []uint64{5}},
		{name: "no prefill worker", agg: []uint64{6, 8}, decode: []uint64{7, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cands []candidate
			for _, g := range []struct {
				ids  []uint64
				role commonv1.Role
			}{{tc.agg, commonv1.Role_ROLE_AGG}, {tc.decode, commonv1.Role_ROLE_DECODE}, {tc.prefill, commonv1.Role_ROLE_PREFILL}} {
				for _, id := range g.ids {
					cands = append(cands, candidate{in: &registryv1.Instance{InstanceId: id, Role: g.role}})
				}
			}
			// The core hands poolsOf its candidates sorted by id.
			slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.in.InstanceId, b.in.InstanceId) })
			pl := poolsOf(cands)
			if pl == nil {
				t.Fatal("no pools for a fleet with decode or prefill workers")
			}
			workers := make([]index.WorkerID, len(cands))
			var overlaps []index.Overlap
			for i, c := range cands {
				workers[i] = index.WorkerID{Instance: c.in.InstanceId}
				overlaps = append(overlaps, index.Overlap{Worker: workers[i], Blocks: int(c.in.InstanceId)})
			}
			// The index lists overlaps in its own (slot) order, not the
			// pools': by instance id here.
			slices.SortFunc(overlaps, func(a, b index.Overlap) int { return cmp.Compare(a.Worker.Instance, b.Worker.Instance) })
			indexed := make([]int, len(workers))
			covered := 0
			pl.each(len(workers), func(from, to int) {
				if from > to || from != covered {
					t.Fatalf("group [%d, %d) after %d covered", from, to, covered)
				}
				covered = to
				if !slices.IsSortedFunc(workers[from:to], func(a, b index.WorkerID) int { return cmp.Compare(a.Instance, b.Instance) }) {
					t.Errorf("group [%d, %d) not sorted by instance: %v", from, to, workers[from:to])
				}
				setIndexed(indexed[from:to], nil, workers[from:to], overlaps, false)
			})
			if covered != len(workers) {
				t.Fatalf("groups cover %d of %d candidates", covered, len(workers))
			}
			for i, w := range workers {
				if indexed[i] != int(w.Instance) {
					t.Errorf("worker %d: %d blocks found, want %d", w.Instance, indexed[i], w.Instance)
				}
			}
		})
	}
}
