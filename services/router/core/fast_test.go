package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// A fleet for the sparse decision tests: the same operations applied to a
// core that prices every candidate and to one that prices sparsely
// whenever it may (sparseMin 0), on one virtual clock each. Every
// operation is drawn before either core runs it.
type sparseFleet struct {
	cfg Config
	ops []func(c *Core, at *time.Time) (string, *routerv1.RouteResponse, float64, error)
}

// twin runs f on a full and a sparse core and fails on the first answer
// that differs; it returns the sparse core. With groupAll, the sparse
// core's lookups list only the longest overlap's workers (see
// index.Grouped.GroupAll), and it reads every other's through the group.
func (f *sparseFleet) twin(t *testing.T, groupAll bool) *Core {
	t.Helper()
	mk := func(sparseMin int) (*Core, *time.Time) {
		at := time.Unix(1_700_000_000, 0)
		cfg := f.cfg
		cfg.Clock = func() time.Time { return at }
		c := New(cfg)
		c.sparseMin = sparseMin
		return c, &at
	}
	full, fullAt := mk(math.MaxInt)
	sparse, sparseAt := mk(0)
	sparse.groupAll = groupAll
	for i, op := range f.ops {
		what, a, ac, aerr := op(full, fullAt)
		_, b, bc, berr := op(sparse, sparseAt)
		if (aerr == nil) != (berr == nil) || aerr != nil && aerr.Error() != berr.Error() {
			t.Fatalf("op %d (%s): full error %v, sparse error %v", i, what, aerr, berr)
		}
		if a == nil {
			continue
		}
		if got, want := answer(b, bc), answer(a, ac); got != want {
			t.Fatalf("op %d (%s): sparse decision\n  %s\nfull decision\n  %s", i, what, got, want)
		}
	}
	if a, b := full.Sessions(), sparse.Sessions(); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("session counters: sparse %v, full %v", b, a)
	}
	if full.sparse.decisions.Load() != 0 {
		t.Fatal("the full core decided sparsely")
	}
	return sparse
}

// answer is what a decision answers, as text: the worker, what it caches,
// the saturation and room, the prefill leg and the chosen cost (to the bit).
func answer(r *routerv1.RouteResponse, cost float64) string {
	return fmt.Sprintf("instance %x rank %d overlap %d/%d saturated %v room %d prefill %x/%d cost %x",
		r.InstanceId, r.DpRank, r.OverlapBlocks, r.RequestBlocks, r.Saturated, r.Room,
		r.GetPrefill().GetInstanceId(), r.GetPrefill().GetDpRank(), math.Float64bits(cost))
}

// fleetSpec says what a drawn fleet has.
type fleetSpec struct {
	workers int
	// busy is the chance a worker reports foreign load; docs the prefixes
	// cached; routes the requests.
	busy    float64
	docs    int
	routes  int
	ranks   bool // some instances serve 2 data-parallel ranks
	loras   bool // some serve adapters, and requests name them
	roles   bool // prefill and decode pools (pairs: always priced whole)
	models  bool // some workers publish a faster or slower model
	stale   bool // the clock jumps past the reports' freshness now and then
	session bool // requests carry session ids
	temps   bool // some requests sample (temperature 0.5)
}

// drawFleet draws a fleet and its operations from seed.
func drawFleet(seed uint64, cfg Config, spec fleetSpec) *sparseFleet {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	cfg.Seed = seed
	if cfg.OverlapWeight == 0 {
		cfg.OverlapWeight = 1
	}
	f := &sparseFleet{cfg: cfg}
	add := func(op func(c *Core, at *time.Time) (string, *routerv1.RouteResponse, float64, error)) {
		f.ops = append(f.ops, op)
	}
	ranks := map[uint64]int{}
	loaded := map[uint64][]string{}
	var ins []registryclient.Change[*registryv1.Instance]
	var cards []registryclient.Change[*registryv1.ModelCard]
	for i := 1; i <= spec.workers; i++ {
		id := uint64(i)
		role := commonv1.Role_ROLE_UNSPECIFIED
		if spec.roles {
			role = commonv1.Role_ROLE_DECODE
			if rng.IntN(3) == 0 {
				role = commonv1.Role_ROLE_PREFILL
			}
		}
		ins = append(ins, registryclient.Change[*registryv1.Instance]{Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend",
			Endpoint: "generate", InstanceId: id, Role: role, Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}})
		card := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: id, ModelName: model, BlockSize: 4}
		ranks[id] = 1
		if spec.ranks && rng.IntN(3) == 0 {
			card.DataParallelSize, ranks[id] = 2, 2
		}
		if spec.loras && rng.IntN(2) == 0 {
			card.MaxLoras = 2
			card.LoraAdapters = []*registryv1.LoraAdapter{{Name: "a"}, {Name: "b"}}
			if rng.IntN(2) == 0 {
				loaded[id] = []string{[]string{"a", "b"}[rng.IntN(2)]}
			}
		}
		cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: card})
	}
	add(func(c *Core, _ *time.Time) (string, *routerv1.RouteResponse, float64, error) {
		c.OnInstances(ins)
		c.OnModels(cards)
		return "register", nil, 0, nil
	})
	docs := make([][]uint32, spec.docs)
	for i := range docs {
		docs[i] = make([]uint32, 4*(2+rng.IntN(30)))
		for j := range docs[i] {
			docs[i][j] = rng.Uint32()
		}
	}
	// Cached prefixes, some on the host tier.
	eventID := map[uint64]uint64{}
	for range spec.docs * 2 {
		id := uint64(1 + rng.IntN(spec.workers))
		rank := uint32(rng.IntN(ranks[id]))
		doc := docs[rng.IntN(len(docs))]
		blocks := kvhash.Hashes(doc[:4*(1+rng.IntN(len(doc)/4))], 4, nil)
		ev := &workerv1.KvBlocksStored{}
		if rng.IntN(3) == 0 {
			ev.Medium = workerv1.KvMedium_KV_MEDIUM_CPU
		}
		for _, b := range blocks {
			ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
		}
		eventID[id]++
		batch := &workerv1.KvEventBatch{InstanceId: id, DpRank: rank, FirstEventId: eventID[id],
			Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}}
		add(func(c *Core, _ *time.Time) (string, *routerv1.RouteResponse, float64, error) {
			c.ApplyEvents(batch)
			return "events", nil, 0, nil
		})
	}
	report := func() {
		var ms []*workerv1.LoadMetrics
		for i := 1; i <= spec.workers; i++ {
			id := uint64(i)
			for r := range ranks[id] {
				if rng.Float64() >= spec.busy {
					continue
				}
				m := &workerv1.LoadMetrics{InstanceId: id, DpRank: uint32(r), KvBlocksTotal: 2000, LoraAdapters: loaded[id]}
				if spec.models && id%4 == 0 {
					tm := timingmodel.Default().Scaled(0.5 + float64(id%3))
					m.TimingModel = tm.Proto()
				}
				if rng.IntN(4) == 0 {
					// Aggregate only: no request list.
					m.RunningRequests, m.WaitingRequests = uint32(rng.IntN(4)), uint32(rng.IntN(3))
					m.ActivePrefillTokens = uint64(rng.IntN(4000))
				} else {
					for j := range rng.IntN(8) {
						rl := &workerv1.RequestLoad{RequestId: fmt.Sprintf("other-%d-%d-%d", id, r, j), DecodeBlocks: uint32(rng.IntN(300))}
						if rng.IntN(2) == 0 {
							rl.PrefillTokens = uint32(1 + rng.IntN(3000))
						}
						m.Requests = append(m.Requests, rl)
					}
				}
				ms = append(ms, m)
			}
		}
		add(func(c *Core, _ *time.Time) (string, *routerv1.RouteResponse, float64, error) {
			for _, m := range ms {
				c.ReportLoad(m)
			}
			return "reports", nil, 0, nil
		})
	}
	report()
	sessions := []string{"s1", "s2", "s3", "s4"}
	var inFlight []string
	for i := range spec.routes {
		if rng.IntN(25) == 0 {
			report()
		}
		step := time.Duration(rng.IntN(40)) * time.Millisecond
		if spec.stale && rng.IntN(30) == 0 {
			step = scheduler5s + time.Duration(rng.IntN(2000))*time.Millisecond
		}
		var toks []uint32
		switch rng.IntN(4) {
		case 0: // caching none
			toks = make([]uint32, 4*(1+rng.IntN(40)))
			for j := range toks {
				toks[j] = rng.Uint32()
			}
		default: // a cached prefix and a suffix of its own
			doc := docs[rng.IntN(len(docs))]
			toks = append([]uint32(nil), doc[:4*(1+rng.IntN(len(doc)/4))]...)
			for range rng.IntN(30) {
				toks = append(toks, rng.Uint32())
			}
		}
		req := &routerv1.RouteRequest{RequestId: fmt.Sprintf("r%d", i), Target: modelTarget(), TokenIds: toks, OmitCandidates: rng.IntN(10) != 0}
		if spec.session && rng.IntN(2) == 0 {
			req.SessionId = sessions[rng.IntN(len(sessions))]
		}
		if spec.loras && rng.IntN(3) == 0 {
			req.LoraName = []string{"a", "b"}[rng.IntN(2)]
		}
		if spec.temps && rng.IntN(5) == 0 {
			req.Temperature = ptr(0.5)
		}
		if rng.IntN(8) == 0 {
			req.OverlapWeight = ptr([]float64{0.5, 2}[rng.IntN(2)])
		}
		add(func(c *Core, at *time.Time) (string, *routerv1.RouteResponse, float64, error) {
			*at = at.Add(step)
			resp, cost, err := c.route(req, false)
			return "route " + req.RequestId, resp, cost, err
		})
		inFlight = append(inFlight, req.RequestId)
		// Requests finish their prefill and end, in no order.
		for len(inFlight) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(inFlight))
			id := inFlight[k]
			if rng.IntN(2) == 0 {
				add(func(c *Core, _ *time.Time) (string, *routerv1.RouteResponse, float64, error) {
					c.PrefillDone(id)
					return "prefill done " + id, nil, 0, nil
				})
				continue
			}
			inFlight = append(inFlight[:k], inFlight[k+1:]...)
			add(func(c *Core, _ *time.Time) (string, *routerv1.RouteResponse, float64, error) {
				c.Free(id)
				return "free " + id, nil, 0, nil
			})
		}
	}
	return f
}

// scheduler5s is past a load report's freshness (scheduler.ReportTTL).
const scheduler5s = 5 * time.Second

func ptr(v float64) *float64 { return &v }

// TestSparseDecisionsEqualFull draws fleets and requests and routes each
// request on a core that prices every candidate and on one that prices
// only those that can win: every answer must be the same, to the chosen
// cost's bit, ties broken alike (the same draws), saturation and room
// alike, sessions alike. Each case says what it exercises; the sparse
// core must have decided sparsely and left workers unpriced where the
// case allows it.
func TestSparseDecisionsEqualFull(t *testing.T) {
	fleets := 30
	if testing.Short() {
		fleets = 8
	}
	tests := []struct {
		name string
		cfg  Config
		spec fleetSpec
		// sparse says decisions must go sparse, and some leave workers
		// unpriced.
		sparse bool
	}{
		{name: "idle fleet: ties among every worker", cfg: Config{Mode: ModeKV},
			spec: fleetSpec{workers: 24, busy: 0, docs: 3, routes: 40}, sparse: true},
		{name: "busy fleet, cached prefixes", cfg: Config{Mode: ModeKV},
			spec: fleetSpec{workers: 40, busy: 0.8, docs: 6, routes: 80, stale: true}, sparse: true},
		{name: "saturation limits: room walks the workers", cfg: Config{Mode: ModeKV, QueueTTFTThreshold: 120 * time.Millisecond, QueuePrefillBudget: 6000},
			spec: fleetSpec{workers: 30, busy: 0.9, docs: 4, routes: 80, stale: true}, sparse: true},
		{name: "prefill budget: room counts each worker's own new tokens", cfg: Config{Mode: ModeKV, QueuePrefillBudget: 2500},
			spec: fleetSpec{workers: 30, busy: 0.6, docs: 6, routes: 80}, sparse: true},
		{name: "a budget of about a request: room walks workers that cache some of it", cfg: Config{Mode: ModeKV, QueuePrefillBudget: 150},
			spec: fleetSpec{workers: 30, busy: 0.3, docs: 3, routes: 80}, sparse: true},
		{name: "a budget of about a request, prefixes on most workers", cfg: Config{Mode: ModeKV, QueuePrefillBudget: 150},
			spec: fleetSpec{workers: 12, busy: 0.2, docs: 8, routes: 80}, sparse: true},
		{name: "tiers", cfg: Config{Mode: ModeKV, KVTiers: true, QueueTTFTThreshold: 500 * time.Millisecond},
			spec: fleetSpec{workers: 30, busy: 0.6, docs: 6, routes: 60}, sparse: true},
		{name: "adapters and published models", cfg: Config{Mode: ModeKV, QueueTTFTThreshold: 500 * time.Millisecond},
			spec: fleetSpec{workers: 30, busy: 0.7, docs: 5, routes: 60, loras: true, models: true}, sparse: true},
		{name: "sessions, soft affinity", cfg: Config{Mode: ModeKV, QueueTTFTThreshold: 200 * time.Millisecond},
			spec: fleetSpec{workers: 30, busy: 0.7, docs: 5, routes: 80, session: true}, sparse: true},
		{name: "sessions, hard affinity", cfg: Config{Mode: ModeKV, SessionAffinity: AffinityHard},
			spec: fleetSpec{workers: 20, busy: 0.5, docs: 4, routes: 60, session: true}, sparse: true},
		{name: "data-parallel ranks", cfg: Config{Mode: ModeKV, QueueTTFTThreshold: 500 * time.Millisecond},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 60, ranks: true}, sparse: true},
		{name: "data-parallel ranks, rank-blind", cfg: Config{Mode: ModeKV, RankBlind: true},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 60, ranks: true}, sparse: true},
		{name: "adapter-blind", cfg: Config{Mode: ModeKV, AdapterBlind: true},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 60, loras: true}, sparse: true},
		{name: "sampled decisions are priced whole", cfg: Config{Mode: ModeKV},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 60, temps: true}, sparse: true},
		{name: "disaggregated pairs are priced whole", cfg: Config{Mode: ModeKV, Disaggregation: DisaggAuto, KVTransferGbps: 100, KVBytesPerToken: 1 << 17},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 60, roles: true}},
		{name: "other modes are priced whole", cfg: Config{Mode: ModeLeastLoaded},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 40}},
		{name: "approximate kv", cfg: Config{Mode: ModeKV, Approximate: true, TTL: time.Minute, MaxTreeSize: 1 << 16, PruneTargetRatio: 0.8},
			spec: fleetSpec{workers: 20, busy: 0.7, docs: 5, routes: 60}, sparse: true},
	}
	for _, tt := range tests {
		for _, groupAll := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, group all %v", tt.name, groupAll), func(t *testing.T) {
				var decisions, priced, candidates, grouped uint64
				for seed := range uint64(fleets) {
					c := drawFleet(seed+1, tt.cfg, tt.spec).twin(t, groupAll)
					decisions += c.sparse.decisions.Load()
					priced += c.sparse.priced.Load()
					candidates += c.sparse.candidates.Load()
					grouped += c.sparse.grouped.Load()
				}
				t.Logf("%d sparse decisions priced %d of %d candidates; %d had workers grouped in the lookup", decisions, priced, candidates, grouped)
				switch {
				case tt.sparse && decisions == 0:
					t.Fatal("no decision was sparse")
				case tt.sparse && groupAll && grouped == 0:
					t.Fatal("no sparse decision's lookup grouped workers")
				case tt.sparse && priced >= candidates:
					t.Fatal("the sparse decisions priced every candidate")
				case !tt.sparse && decisions > 0:
					t.Fatalf("%d decisions were sparse; want none", decisions)
				}
			})
		}
	}
}
