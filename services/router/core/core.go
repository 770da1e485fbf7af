// Package core is the router's decision core, without transport: the worker
// set (fed from registry watches), the KV index (from events, or predicted
// from its own decisions), the load of routed requests and the scheduler
// that picks a worker. The router service serves it over gRPC, the
// frontend embeds one as its in-process router, and the tests drive it
// directly. DefaultConfig is the one set of defaults they all start from.
package core

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Domain errors; the router's server.go maps them to gRPC codes and
// reasons.
var (
	// ErrInvalid is a request that breaks a rule; the message says which.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnknownTarget is a model or endpoint nobody registered; the error
	// is ErrUnknownModel or ErrUnknownEndpoint, both of which wrap it.
	ErrUnknownTarget = errors.New("unknown target")
	// ErrUnknownModel is a model no live model card names.
	ErrUnknownModel = fmt.Errorf("%w: unknown model", ErrUnknownTarget)
	// ErrUnknownEndpoint is an endpoint no instance registered.
	ErrUnknownEndpoint = fmt.Errorf("%w: unknown endpoint", ErrUnknownTarget)
	// ErrNoWorker is a known target with no live (or no eligible) worker.
	ErrNoWorker = errors.New("no live worker")
)

// Limits on requests.
const (
	MaxRequestIDLen = 256
	maxTokens       = 1 << 22
)

// endpointKey names an endpoint.
type endpointKey struct{ ns, comp, ep string }

// targetKey names a target: a model, or an endpoint, and the LoRA adapter
// its candidates must serve (empty: any).
type targetKey struct {
	model string
	ep    endpointKey
	lora  string
}

// targetCands are a target's live workers, sorted by instance id, and
// their block size, as of registry generation gen. Shared: never modified.
type targetCands struct {
	gen   uint64
	cands []candidate
	// workers are the candidates' ids, in the same order: what a decision
	// reads per worker without touching each one's registry record.
	workers []index.WorkerID
	bs      int
	// pools groups a disaggregated model's candidates by role (see
	// pairs.go); nil for any other target, whose candidates are in
	// instance id order.
	pools *pools
	// floor bounds each candidate's cost from its load, for decisions
	// that price only the candidates that can win (see fast.go), and
	// first is each instance's first position; made at the first of
	// them, under Core.mu.
	floor *scheduler.Floor
	first map[uint64]int
}

// Core is the router's state and decisions, without transport: the worker
// set (from registry watches), the KV index (from events, or predicted),
// the load of routed requests and the scheduler. It is safe for concurrent
// use.
type Core struct {
	mode Mode
	// comp is how mode decides (see modes).
	comp        composition
	approximate bool
	weight      float64
	temperature float64

	idx    *index.Index
	approx *index.Approx
	// pending predicts, in kv mode with events, the blocks of requests
	// routed but not yet confirmed by their worker's events.
	pending *index.Pending
	load    *scheduler.Load
	now     func() time.Time

	mu        sync.Mutex
	rng       *rand.Rand
	endpoints map[endpointKey]map[uint64]*registryv1.Instance
	refs      map[uint64]int                               // instance -> endpoints it serves
	models    map[string]map[endpointKey]map[uint64]uint32 // model -> endpoint -> instance -> block size
	rr        map[endpointKey]int
	stats     eventStats
	// timing is each live instance's published timing model (Default
	// until it publishes one). Entries are updated in place, so cached
	// candidates point at them and a decision reads no map per worker.
	timing map[uint64]*timingmodel.Model
	// timingVer changes whenever an entry of timing does (a model made or
	// changed): the scheduler's fill memo then need not compare models.
	timingVer uint64
	// reported are the live instances a load report has come from. Before
	// its first, a worker is predicted with Default, whose error says how
	// far Default is from that engine, not how late the fleet runs against
	// the models it publishes: its first tokens' lateness is not kept.
	reported   map[uint64]bool
	observer   Observer
	requestTTL time.Duration
	// arrivals measures the request rate, whose requests wait behind a
	// decision's work (see scheduler's cost).
	arrivals arrivals
	// unheard is what it knows of its peer replicas' decisions not heard
	// yet (see spreadLocked).
	unheard unheard
	// targets caches each target's sorted candidates, valid while gen,
	// which every registry change bumps, is what it was built at: a
	// decision neither walks the registry maps nor sorts.
	targets map[targetKey]*targetCands
	gen     uint64
	// restoredAt is the time of the snapshot the index started from.
	restoredAt *timestamppb.Timestamp
	// lastEvent is when each instance's last KV event (or state rebuild)
	// reached the core, for GetStats' per-worker event age.
	lastEvent map[uint64]time.Time
	// legs records the prefill legs of disaggregated requests (see
	// pairs.go); prefill are the live instances of the prefill role,
	// whose load reports go there.
	legs    legs
	prefill map[uint64]bool
	// pairing is Config's Disaggregation (see modes.go); transferGbps,
	// bytesPerToken and transferRTT are Config's.
	pairing       pairing
	transferGbps  float64
	bytesPerToken int
	transferRTT   time.Duration
	// saturation are the limits past which a worker is full (see
	// saturation.go); changed is closed at the next change of the load
	// record, for watchers of saturation.
	saturation scheduler.Limits
	changed    changeSignal
	// typical is each model's typical prompt tokens to compute, late
	// how late its first tokens come (see saturation.go), under mu.
	typical map[string]float64
	late    map[string]*scheduler.Lateness
	// sessions binds conversations to workers (see sessions.go).
	sessions *sessions
	// tierBlind keeps GPU blocks only (Config.KVTiers false).
	tierBlind bool
	// loras are the adapters the workers serve, have loaded and run (see
	// lora.go); adapterBlind is Config's AdapterBlind.
	loras        *adapters
	adapterBlind bool
	// ranks are the data-parallel sizes the instances' model cards
	// declare (see ranks.go), under mu; rankBlind is Config's RankBlind.
	ranks     map[uint64]map[string]uint32
	rankBlind bool
	// sparseMin is the fewest candidates a decision prices sparsely
	// (see fast.go): sparseMinCandidates; tests set it. sparse counts
	// the sparse decisions and the candidates they priced of all.
	sparseMin int
	sparse    sparseCounts
	// groupAll makes a sparse decision's lookup group every length's
	// workers below the longest (index.Grouped.GroupAll): tests set it.
	groupAll bool
}

type eventStats struct {
	applied, duplicate, gap, rebuilds uint64
	// unknownMedium counts applied events with a medium the router does
	// not know, unknownMediumBlocks such blocks in workers' states.
	unknownMedium, unknownMediumBlocks uint64
}

// Config configures a Core; start from DefaultConfig.
type Config struct {
	Mode Mode
	// Approximate predicts caches from decisions instead of KV events.
	Approximate bool
	// OverlapWeight and Temperature are the default cost parameters.
	OverlapWeight, Temperature float64
	// TTL, MaxTreeSize and PruneTargetRatio tune approximate mode.
	TTL              time.Duration
	MaxTreeSize      int
	PruneTargetRatio float64
	// Seed seeds tie-breaks and sampling; 0 picks a random seed.
	Seed uint64
	// RequestTTL forgets routed requests never freed after this long (a
	// frontend or replica died); 0 keeps them.
	RequestTTL time.Duration
	// PendingTTL is how long, at most, the blocks of a routed request
	// count as predicted on its worker before its KV events confirm them;
	// 0 is DefaultPendingTTL.
	PendingTTL time.Duration
	// Clock, when set, replaces the wall clock (a simulation's virtual
	// time).
	Clock func() time.Time
	// Disaggregation says where a model with prefill and decode pools
	// computes its prompts (see pairs.go); the zero value is auto.
	Disaggregation Disaggregation
	// KVTransferGbps, KVBytesPerToken and KVTransferRTT price moving a
	// prompt's KV blocks from a prefill worker to a decode worker: the
	// set-up once, then each block's bytes at the bandwidth. A zero
	// bandwidth or size moves them for free.
	KVTransferGbps  float64
	KVBytesPerToken int
	KVTransferRTT   time.Duration
	// QueueTTFTThreshold and QueuePrefillBudget say when the fleet is
	// saturated for a request (RouteResponse.saturated): one more request
	// would get its first token later than QueueTTFTThreshold on every
	// worker, or each has more than QueuePrefillBudget prompt tokens to
	// prefill. Zero turns a limit off.
	QueueTTFTThreshold time.Duration
	QueuePrefillBudget int
	// SessionTTL, SessionAffinity and MaxSessions rule the session table
	// (see sessions.go): a binding idle for SessionTTL ends, soft or hard
	// affinity, at most MaxSessions bindings (the least recently used
	// goes). Zero values are DefaultSessionTTL, soft, DefaultMaxSessions.
	SessionTTL      time.Duration
	SessionAffinity Affinity
	MaxSessions     int
	// KVTiers indexes each block's cache tier from its KV events' medium
	// and prices lower-tier hits by their load time; false keeps GPU
	// blocks only (a block moved to a lower tier is gone, as a router
	// blind to tiers sees it). KVTierTTL ages out the blocks of store-only
	// lower tiers (see index.SetTierTTL); 0 never.
	KVTiers   bool
	KVTierTTL time.Duration
	// AdapterBlind prices no LoRA adapter load: a request with an adapter
	// still goes only to workers that serve it, but as if every one had
	// it loaded. It is the lab's comparison for adapter-aware routing, not
	// a setting of the service.
	AdapterBlind bool
	// RankBlind routes to workers, not to their data-parallel ranks: a
	// worker serving several ranks is one candidate, credited with the
	// longest prefix any of its ranks caches, and the worker chooses the
	// rank. It is the lab's comparison for rank-aware routing, not a
	// setting of the service.
	RankBlind bool
}

// DefaultPendingTTL outlasts any prefill that is not stuck.
const DefaultPendingTTL = 2 * time.Minute

// New returns an empty core.
func New(cfg Config) *Core {
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	c := &Core{
		saturation: scheduler.Limits{TTFTMs: float64(cfg.QueueTTFTThreshold) / float64(time.Millisecond),
			PrefillTokens: cfg.QueuePrefillBudget},
		mode:        cfg.Mode,
		comp:        compositionOf(cfg.Mode),
		approximate: cfg.Approximate,
		weight:      cfg.OverlapWeight,
		temperature: cfg.Temperature,
		now:         time.Now,
		rng:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		endpoints:   map[endpointKey]map[uint64]*registryv1.Instance{},
		typical:     map[string]float64{},
		late:        map[string]*scheduler.Lateness{},
		refs:        map[uint64]int{},
		lastEvent:   map[uint64]time.Time{},
		models:      map[string]map[endpointKey]map[uint64]uint32{},
		rr:          map[endpointKey]int{},
		timing:      map[uint64]*timingmodel.Model{},
		reported:    map[uint64]bool{},
		requestTTL:  cfg.RequestTTL,
		targets:     map[targetKey]*targetCands{},
		prefill:     map[uint64]bool{},

		pairing:       pairingOf(cfg.Disaggregation),
		transferGbps:  cfg.KVTransferGbps,
		bytesPerToken: cfg.KVBytesPerToken,
		transferRTT:   cfg.KVTransferRTT,
		sessions:      newSessions(cfg.SessionTTL, cfg.MaxSessions, cfg.SessionAffinity),
		loras:         newAdapters(),
		adapterBlind:  cfg.AdapterBlind,
		ranks:         map[uint64]map[string]uint32{},
		rankBlind:     cfg.RankBlind,
		sparseMin:     sparseMinCandidates,
	}
	if cfg.Clock != nil {
		c.now = cfg.Clock
	}
	c.load = scheduler.NewLoadClock(c.now)
	c.legs.load = scheduler.NewLoadClock(c.now)
	if cfg.Approximate {
		c.approx = index.NewApprox(index.ApproxConfig{TTL: cfg.TTL, MaxEntries: cfg.MaxTreeSize, PruneTargetRatio: cfg.PruneTargetRatio})
		c.idx = c.approx.Index()
	} else {
		c.idx = index.New()
		c.idx.SetTierTTL(cfg.KVTierTTL, c.now)
		c.tierBlind = !cfg.KVTiers
		ttl := cfg.PendingTTL
		if ttl <= 0 {
			ttl = DefaultPendingTTL
		}
		c.pending = index.NewPending(ttl)
		c.legs.pending = index.NewPending(ttl)
	}
	return c
}

// Index is the KV index (predicted in approximate mode).
func (c *Core) Index() *index.Index { return c.idx }

// OnInstances applies registry instance changes. A worker whose last
// endpoint left loses its blocks and load at once.
func (c *Core) OnInstances(changes []registryclient.Change[*registryv1.Instance]) {
	c.mu.Lock()
	c.registryChangedLocked()
	var gone []uint64
	for _, ch := range changes {
		in := ch.Item
		k := endpointKey{in.Namespace, in.Component, in.Endpoint}
		set := c.endpoints[k]
		if ch.Deleted {
			if _, ok := set[in.InstanceId]; ok {
				delete(set, in.InstanceId)
				if len(set) == 0 {
					delete(c.endpoints, k)
				}
				c.refs[in.InstanceId]--
				if c.refs[in.InstanceId] <= 0 {
					delete(c.refs, in.InstanceId)
					delete(c.lastEvent, in.InstanceId)
					delete(c.prefill, in.InstanceId)
					gone = append(gone, in.InstanceId)
				}
			}
			continue
		}
		if set == nil {
			set = map[uint64]*registryv1.Instance{}
			c.endpoints[k] = set
		}
		if _, ok := set[in.InstanceId]; !ok {
			c.refs[in.InstanceId]++
		}
		set[in.InstanceId] = in
		if in.GetRole() == commonv1.Role_ROLE_PREFILL {
			c.prefill[in.InstanceId] = true
		}
	}
	c.mu.Unlock()
	for _, id := range gone {
		c.removeInstance(id)
	}
	if len(gone) > 0 {
		c.mu.Lock()
		for _, id := range gone {
			delete(c.timing, id)
			delete(c.reported, id)
		}
		c.mu.Unlock()
	}
	c.notify()
}

func (c *Core) removeInstance(id uint64) {
	if c.approx != nil {
		for _, w := range c.idx.Workers() {
			if w.Instance == id {
				c.approx.RemoveWorker(w)
			}
		}
	} else {
		c.idx.RemoveInstance(id)
		c.pending.RemoveWorker(id)
		c.legs.pending.RemoveWorker(id)
	}
	c.load.RemoveInstance(id)
	c.legs.load.RemoveInstance(id)
	c.sessions.removeInstance(id)
	c.loras.removeInstance(id)
}

// OnModels applies registry model card changes.
func (c *Core) OnModels(changes []registryclient.Change[*registryv1.ModelCard]) {
	defer c.notify()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.registryChangedLocked()
	for _, ch := range changes {
		card := ch.Item
		k := endpointKey{card.Namespace, card.Component, card.Endpoint}
		c.loras.cardLocked(card, ch.Deleted)
		c.cardRanksLocked(card, ch.Deleted)
		eps := c.models[card.ModelName]
		if ch.Deleted {
			if eps != nil {
				delete(eps[k], card.InstanceId)
				if len(eps[k]) == 0 {
					delete(eps, k)
				}
				if len(eps) == 0 {
					delete(c.models, card.ModelName)
					delete(c.typical, card.ModelName)
					delete(c.late, card.ModelName)
				}
			}
			continue
		}
		if eps == nil {
			eps = map[endpointKey]map[uint64]uint32{}
			c.models[card.ModelName] = eps
		}
		if eps[k] == nil {
			eps[k] = map[uint64]uint32{}
		}
		eps[k][card.InstanceId] = card.BlockSize
	}
}

// registryChangedLocked invalidates the cached candidates.
func (c *Core) registryChangedLocked() {
	c.gen++
	clear(c.targets)
}

// candidate is a worker (one data-parallel rank of it, when it serves
// several) that may serve a request.
type candidate struct {
	in   *registryv1.Instance
	bs   uint32
	rank uint32
	// timing is its entry of Core.timing (read under Core.mu).
	timing *timingmodel.Model
	// lora is its adapter state (read under adapters.mu) and loraSlots
	// its cards' adapter slots, for a target with an adapter: a decision
	// prices every candidate's adapter without a lookup.
	lora      *adapterWorker
	loraSlots int
}

// timingLocked is an instance's timing model entry, made at Default.
func (c *Core) timingLocked(id uint64) *timingmodel.Model {
	t, ok := c.timing[id]
	if !ok {
		t = new(timingmodel.Model)
		*t = timingmodel.Default()
		c.timing[id] = t
		c.timingVer++
	}
	return t
}

// candidates resolves a target to its live workers, sorted by instance
// id (grouped by role first for a disaggregated model: see pools), their
// ids, their block size and their pools. The slices are shared: callers
// must not modify them.
func (c *Core) candidates(t *routerv1.Target, lora string, exclude []uint64) ([]candidate, []index.WorkerID, int, *pools, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := targetKey{lora: lora}
	switch k := t.GetKind().(type) {
	case *routerv1.Target_Endpoint:
		key.ep = endpointKey{k.Endpoint.GetNamespace(), k.Endpoint.GetComponent(), k.Endpoint.GetEndpoint()}
	case *routerv1.Target_Model:
		key.model = k.Model
	default:
		return nil, nil, 0, nil, fmt.Errorf("%w: target is missing: set an endpoint or a model", ErrInvalid)
	}
	tc, ok := c.targets[key]
	if !ok || tc.gen != c.gen {
		var err error
		if tc, err = c.resolveLocked(t, key); err != nil {
			return nil, nil, 0, nil, err
		}
		c.targets[key] = tc
	}
	if len(exclude) == 0 {
		return tc.cands, tc.workers, tc.bs, tc.pools, nil
	}
	out := make([]candidate, 0, len(tc.cands))
	ids := make([]index.WorkerID, 0, len(tc.cands))
	for i, cd := range tc.cands {
		if !slices.Contains(exclude, cd.in.InstanceId) {
			out = append(out, cd)
			ids = append(ids, tc.workers[i])
		}
	}
	if len(out) == 0 {
		return nil, nil, 0, nil, fmt.Errorf("%w for %s", ErrNoWorker, targetString(t))
	}
	pl := tc.pools
	if pl != nil {
		pl = countPools(out)
	}
	return out, ids, tc.bs, pl, nil
}

// resolveLocked walks the registry state for a target's candidates.
func (c *Core) resolveLocked(t *routerv1.Target, key targetKey) (*targetCands, error) {
	var out []candidate
	blockSize := 0
	known := false
	if key.model == "" {
		set, ok := c.endpoints[key.ep]
		known = ok
		for _, in := range set {
			out = append(out, candidate{in: in})
		}
		// The block size comes from any model card of this endpoint.
		for _, eps := range c.models {
			for id, bs := range eps[key.ep] {
				if _, live := set[id]; live && bs > 0 {
					blockSize = int(bs)
				}
			}
		}
	} else {
		eps, ok := c.models[key.model]
		known = ok
		for ek, ids := range eps {
			for id, bs := range ids {
				in, live := c.endpoints[ek][id]
				if !live {
					continue
				}
				out = append(out, candidate{in: in, bs: bs})
				if bs > 0 {
					blockSize = int(bs)
				}
			}
		}
	}
	if !known {
		if key.model != "" {
			return nil, fmt.Errorf("%w %q", ErrUnknownModel, key.model)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnknownEndpoint, targetString(t))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w for %s", ErrNoWorker, targetString(t))
	}
	if key.lora != "" {
		// Only the workers that can serve the adapter.
		var err error
		if out, err = c.loras.filterLocked(out, key.model, key.lora, targetString(t)); err != nil {
			return nil, err
		}
	}
	// A worker serving several data-parallel ranks is a candidate per
	// rank.
	out = c.expandRanksLocked(out, key.model)
	// Stable order, so round-robin and tie-breaks do not depend on map
	// order, and so that a worker's position can be found by its id.
	slices.SortFunc(out, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.in.InstanceId, b.in.InstanceId), cmp.Compare(a.rank, b.rank))
	})
	var pl *pools
	if key.model != "" {
		pl = poolsOf(out)
	}
	ids := make([]index.WorkerID, len(out))
	for i := range out {
		out[i].timing = c.timingLocked(out[i].in.InstanceId)
		ids[i] = index.WorkerID{Instance: out[i].in.InstanceId, DPRank: out[i].rank}
	}
	if key.lora != "" {
		c.loras.candidatesLocked(out, ids)
	}
	if blockSize == 0 {
		blockSize = kvhash.DefaultBlockSize
	}
	return &targetCands{gen: c.gen, cands: out, workers: ids, bs: blockSize, pools: pl}, nil
}

func targetString(t *routerv1.Target) string {
	if m, ok := t.GetKind().(*routerv1.Target_Model); ok {
		return fmt.Sprintf("model %q", m.Model)
	}
	e := t.GetEndpoint()
	return fmt.Sprintf("endpoint %s/%s/%s", e.GetNamespace(), e.GetComponent(), e.GetEndpoint())
}

// query is what Route and QueryOverlaps share.
type query struct {
	target              *routerv1.Target
	tokens              []uint32
	hashes              []uint64
	weight, temperature *float64
	exclude             []uint64
	direct              uint64
	// salt is the request's cache salt, hashed into its first block;
	// lora its LoRA adapter, which only some workers serve and which is
	// hashed into every block.
	salt, lora string
	// dryRun decides without taking a round-robin turn (ExplainRoute).
	dryRun bool
	// omit says the caller wants no candidate list (Route with
	// omit_candidates): a decision may then price only the candidates
	// that can win. session is the request's session id.
	omit    bool
	session string
	// backlog says the request is one of a tenant's backlog, which
	// leaves the earliest slots to others (RouteRequest.backlog);
	// withinLimit that it takes room held back for it, and goes where it
	// fits within the limits if it can (RouteRequest.within_limit).
	backlog, withinLimit bool
}

func validateQuery(q query) error {
	if q.target == nil || q.target.GetKind() == nil {
		return fmt.Errorf("%w: target is missing: set an endpoint or a model", ErrInvalid)
	}
	if e, ok := q.target.GetKind().(*routerv1.Target_Endpoint); ok {
		if e.Endpoint.GetNamespace() == "" || e.Endpoint.GetComponent() == "" || e.Endpoint.GetEndpoint() == "" {
			return fmt.Errorf("%w: target endpoint needs namespace, component and endpoint", ErrInvalid)
		}
	}
	if m, ok := q.target.GetKind().(*routerv1.Target_Model); ok && m.Model == "" {
		return fmt.Errorf("%w: target model is empty", ErrInvalid)
	}
	switch {
	case len(q.tokens) == 0 && len(q.hashes) == 0:
		return fmt.Errorf("%w: the request has no token_ids and no block_hashes", ErrInvalid)
	case len(q.tokens) > 0 && len(q.hashes) > 0:
		return fmt.Errorf("%w: give token_ids or block_hashes, not both", ErrInvalid)
	case len(q.tokens) > maxTokens || len(q.hashes) > maxTokens:
		return fmt.Errorf("%w: the request has more than %d tokens or hashes", ErrInvalid, maxTokens)
	case len(q.salt) > MaxCacheSaltLen:
		return fmt.Errorf("%w: cache_salt is longer than %d bytes", ErrInvalid, MaxCacheSaltLen)
	case q.salt != "" && len(q.hashes) > 0:
		return fmt.Errorf("%w: cache_salt goes with token_ids; block_hashes are taken as they are (hash them with the salt)", ErrInvalid)
	case q.lora != "" && len(q.hashes) > 0:
		return fmt.Errorf("%w: lora_name goes with token_ids; block_hashes are taken as they are (hash them with the adapter)", ErrInvalid)
	}
	if q.lora != "" {
		if err := ValidLoRAName(q.lora); err != nil {
			return err
		}
	}
	for _, p := range [...]struct {
		name string
		v    *float64
	}{{"overlap_weight", q.weight}, {"temperature", q.temperature}} {
		if p.v != nil && (*p.v < 0 || math.IsNaN(*p.v) || math.IsInf(*p.v, 0)) {
			return fmt.Errorf("%w: %s %v must be a finite number >= 0", ErrInvalid, p.name, *p.v)
		}
	}
	return nil
}

// decision is a routing outcome.
type decision struct {
	chosen  int
	cands   []candidate
	scored  []scheduler.Candidate
	hashes  []uint64
	overlap int
	// indexed is each candidate's overlap the index confirms (the rest of
	// its Overlap is predicted).
	indexed []int
	// blockSize and params are what the decision used.
	blockSize int
	params    scheduler.Params
	// q is the request, req the scheduler's view of it and now the
	// decision's time: what a chooser reads (see modes.go).
	q   query
	req scheduler.Request
	now time.Time
	// ownHashes says hashes are the decision's own (made from the
	// request's tokens), not the request's.
	ownHashes bool
	// For a disaggregated model (see pairs.go): the prefill worker of a
	// pair (-1: none, chosen runs the request whole), the decision's
	// name (empty for other models), and the costs it compared.
	prefill               int
	disagg                string
	localCost, remoteCost float64
	// pools are the candidates' (nil unless disaggregated); priced is
	// the decode worker of the pair priced against the local choice (-1:
	// none was, the pair being impossible or not wanted).
	pools               *pools
	priced, pairPrefill int
	// saturated says every worker that could compute the prompt is full,
	// room how many more requests like this one fit (see saturation.go).
	saturated bool
	room      int
	// leftEarliest says a backlog's request was moved off the cost's
	// choice to leave an earlier slot to others, keptWithin that a
	// request let go into room held back for it was moved off it to keep
	// within the limits (leaveEarliest).
	leftEarliest, keptWithin bool
	// lateMs is how late the model's first tokens come (Limits.LateMs).
	lateMs float64
	// typical is the model's typical request's prompt tokens, as the
	// decision began (typicalTokensLocked; 0: none yet), which its room
	// is counted in.
	typical int
	// Buffers kept with the decision when it goes back to decisionPool.
	ints      []int
	overlaps  []index.Overlap
	lower     [][index.LowerTiers]int32
	near      []int
	costs     []float64
	pairCosts []float64
	hidden    []scheduler.Candidate
	blocks    []kvhash.Block
	// sparse says the decision priced only some of the target's
	// candidates, all and allWorkers, those at positions pos (see
	// fast.go); cands, scored and the rest are theirs, first the
	// target's instances' first positions. The rest are its buffers.
	sparse     bool
	all        []candidate
	allWorkers []index.WorkerID
	pos        []int
	sub        []candidate
	subWorkers []index.WorkerID
	held       []index.WorkerID
	reach      []int
	extended   []int
	lens       []int
	first      map[uint64]int
	// holders and holderReach locate what the index credits, for the
	// saturation count (see reachAt); scans counts its passes.
	holders     []int
	holderReach []int
	scans       int
	insts       []uint64
	subOverlaps []index.Overlap
	// grouped is a sparse decision's index lookup (see fast.go).
	grouped index.Grouped
}

// maxPooledBlocks is the largest block buffer a pooled decision keeps: a
// rare huge prompt should not pin its buffer.
const maxPooledBlocks = 8192

// decisionPool reuses decisions and their buffers: a decision over a
// hundred workers is kilobytes, and every Route makes one.
var decisionPool = sync.Pool{New: func() any { return new(decision) }}

// release returns d to decisionPool; nothing of it may be used after.
func (d *decision) release() {
	d.cands, d.hashes, d.q = nil, nil, query{}
	d.sparse, d.all, d.allWorkers, d.first = false, nil, nil, nil
	d.grouped.Release()
	clear(d.sub)
	if cap(d.blocks) > maxPooledBlocks {
		d.blocks = nil
	}
	decisionPool.Put(d)
}

// evaluate scores every candidate for a query and picks one per the mode:
// it prepares the decision's state (prepare), then decides over it
// (decide).
func (c *Core) evaluate(q query) (*decision, error) {
	if err := validateQuery(q); err != nil {
		return nil, err
	}
	cands, workers, bs, pl, err := c.candidates(q.target, q.lora, q.exclude)
	if err != nil {
		return nil, err
	}
	// A backlog's request is placed among every candidate it fits on,
	// and so is one that must keep within the limits, which a decision
	// pricing only those that can win does not know.
	if pl == nil && len(q.exclude) == 0 && !q.backlog && !q.withinLimit && c.sparseEligible(q, len(cands)) {
		if d, err := c.evaluateSparse(q); d != nil || err != nil {
			return d, err
		}
	}
	d := decisionPool.Get().(*decision)
	d.prefill, d.disagg, d.pools, d.priced = -1, "", pl, -1
	d.saturated, d.room, d.lateMs, d.typical, d.leftEarliest, d.keptWithin = false, 0, 0, 0, false, false
	c.prepare(d, q, cands, workers, bs)
	if err := c.decide(d); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

// prepare sets d's state for q over its candidates (cands, their ids
// workers, block size bs, pools d.pools): the request's block hashes, each
// candidate's cached prefix (indexed, then predicted) and load, and what
// the cost terms read of the request (d.req) and of the decision (d.params,
// d.q, d.now). It expires what has aged first. Nothing is allocated per
// candidate: the buffers are d's.
func (c *Core) prepare(d *decision, q query, cands []candidate, workers []index.WorkerID, bs int) {
	hashes := c.hashesOf(d, q, bs)
	now := c.expireAged()
	d.overlaps = c.idx.AppendOverlaps(d.overlaps[:0], hashes)
	c.prepareOver(d, q, cands, workers, bs, hashes, len(cands), now)
}

// expireAged forgets what has aged by now (predictions, requests never
// freed) and returns now, the decision's time.
func (c *Core) expireAged() time.Time {
	now := c.now()
	if c.approx != nil {
		c.approx.Expire(now)
	}
	if c.pending != nil {
		c.pending.Expire(now)
		c.legs.pending.Expire(now)
	}
	if c.requestTTL > 0 {
		c.load.Expire(now.Add(-c.requestTTL))
		c.legs.load.Expire(now.Add(-c.requestTTL))
	}
	return now
}

// hashesOf is q's block hashes: its own, or made from its tokens into d's
// buffer (then d.ownHashes).
func (c *Core) hashesOf(d *decision, q query, bs int) []uint64 {
	hashes := q.hashes
	d.ownHashes = false
	if len(q.tokens) > 0 {
		// The blocks go in the decision's buffer: only their sequence
		// hashes, which the decision hands on, are allocated.
		d.blocks = kvhash.ExtraHashes(q.tokens, bs, kvhash.Extra{Salt: q.salt, LoRA: q.lora}, d.blocks[:0])
		hashes, d.ownHashes = make([]uint64, len(d.blocks)), true
		for i, b := range d.blocks {
			hashes[i] = b.Sequence
		}
	}
	return hashes
}

// prepareOver is prepare at now, once what aged is expired (expireAged),
// with the request's hashes and the index's overlaps of them (d.overlaps)
// found, over cands, which are all of the target's candidates or, in a
// decision that prices only those that can win (see fast.go), some of
// its total.
func (c *Core) prepareOver(d *decision, q query, cands []candidate, workers []index.WorkerID, bs int, hashes []uint64, total int, now time.Time) {
	pl := d.pools
	n := len(cands)
	d.cands, d.hashes, d.blockSize = cands, hashes, bs
	d.scored = slices.Grow(d.scored[:0], n)[:n]
	d.ints = slices.Grow(d.ints[:0], 2*n)[:2*n]
	clear(d.ints)
	d.indexed = d.ints[:n:n]
	reach := d.ints[n:]
	// Blocks held below GPU, per candidate, when the index has any of
	// the request's (nil otherwise: a request cached on GPU alone reads
	// nothing more). A rank-aware router credits each candidate its own
	// rank's, found with its overlap; a rank-blind one, the rank's whose
	// prefix it credits, once every overlap is read (lowerOf).
	var lower [][index.LowerTiers]int32
	hasLower := anyLower(d.overlaps)
	if hasLower && !c.rankBlind {
		d.lower = slices.Grow(d.lower[:0], n)[:n]
		clear(d.lower)
		lower = d.lower
	}
	// Candidates are sorted by instance id: each overlap finds its
	// worker(s) by binary search, with no map per decision.
	if pl == nil {
		setIndexed(d.indexed, lower, workers, d.overlaps, c.rankBlind)
	} else {
		// Each pool is sorted by instance id.
		pl.each(n, func(from, to int) {
			var sub [][index.LowerTiers]int32
			if lower != nil {
				sub = lower[from:to]
			}
			setIndexed(d.indexed[from:to], sub, workers[from:to], d.overlaps, c.rankBlind)
		})
	}
	if hasLower && c.rankBlind {
		lower = d.lowerOf(workers, pl)
	}
	copy(reach, d.indexed)
	if c.pending != nil && pl == nil {
		c.pending.ExtendAll(workers, hashes, reach)
	} else if c.pending != nil {
		// Prefill legs are predicted apart (see pairs.go).
		c.pending.ExtendAll(workers[:pl.serve], hashes, reach[:pl.serve])
		c.legs.pending.ExtendAll(workers[pl.serve:], hashes, reach[pl.serve:])
	}
	c.mu.Lock()
	for i, w := range workers {
		// FillAll sets the rest (a whole struct literal per worker cost
		// more than the decision's cost model).
		s := &d.scored[i]
		s.Worker, s.Overlap, s.Reach, s.Timing, s.AdapterMs, s.SlotWaitMs, s.SharedBlocks = w, reach[i], 0, *cands[i].timing, 0, 0, 0
		s.Lower = [index.LowerTiers]int32{}
		if lower != nil {
			s.Lower = lower[i]
		}
	}
	if q.lora != "" && !c.adapterBlind {
		// A worker without the adapter loaded loads it first, once one
		// of its slots is free.
		key := loraKey(q.lora)
		c.loras.mu.Lock()
		for i := range d.scored {
			s := &d.scored[i]
			st, slots := cands[i].lora, cands[i].loraSlots
			load, wait := true, 0.0
			if !st.loadsNow(key, slots) {
				load, wait = st.priceRunning(q.lora, key, slots, now)
			}
			if load {
				s.AdapterMs = s.Timing.LoraLoadMs
			}
			s.SlotWaitMs = wait
		}
		c.loras.mu.Unlock()
	}
	timingVer := c.timingVer // of the models just copied
	// Each worker is expected its share of the requests to come, and the
	// busier the workers the more of them a decision's work delays.
	rate := c.arrivals.waitRate(now, total)
	// The recent arrivals that share the prefix the best-cached workers
	// hold: the requests a second copy of it could take (see scheduler).
	// Candidates left out of reach cache none of it.
	shared := c.arrivals.shared(now, hashes, reach, total)
	d.lateMs = c.lateMsLocked(targetModel(q.target))
	d.typical = c.typicalTokensLocked(targetModel(q.target), bs)
	c.mu.Unlock()
	if pl == nil {
		c.load.FillAllVersion(d.scored, bs, timingVer)
		// A predicted block counts as cached where it is computed before
		// the worker admits the request; the queue says when.
		c.load.FillComputed(d.scored, hashes, d.indexed, bs)
		c.load.FillShared(d.scored, hashes)
	} else {
		c.load.FillAllVersion(d.scored[:pl.serve], bs, timingVer)
		c.load.FillShared(d.scored[:pl.serve], hashes)
		c.legs.load.FillAllVersion(d.scored[pl.serve:], bs, timingVer)
	}
	tokens := len(q.tokens)
	if tokens == 0 {
		tokens = len(hashes) * bs
	}
	params := scheduler.Params{OverlapWeight: c.weight, Temperature: c.temperature}
	if q.weight != nil {
		params.OverlapWeight = *q.weight
	}
	if q.temperature != nil {
		params.Temperature = *q.temperature
	}
	d.params, d.q, d.now = params, q, now
	d.req = scheduler.Request{Blocks: len(hashes), Tokens: tokens, BlockSize: bs, Rate: rate, Shared: shared}
}

// decide prices d's candidates with the mode's cost and chooses with its
// chooser (modes.go), or chooses a disaggregated model's pair, under c.mu;
// it says whether the fleet is saturated once the request is placed.
func (c *Core) decide(d *decision) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.pools != nil {
		if err := c.choosePair(d, d.pools); err != nil {
			return err
		}
		d.overlap = d.scored[d.chosen].Overlap
		computes := d.chosen
		if d.prefill >= 0 {
			computes = d.prefill
		}
		d.saturated = c.saturated(d, d.req, computes)
		return nil
	}
	if d.sparse && c.unheard.expected(d.now) > 0 {
		// The peers' unheard decisions spread this one over the
		// workers near its best (spreadLocked), which a decision
		// pricing only those that can win does not know.
		return errNotSparse
	}
	// Scores are reported in every mode: the mode's cost.
	best, _ := c.comp.cost.Select(d.scored, d.req, d.params, c.rng)

	chosen, err := c.comp.choose.choose(c, d, best)
	if err != nil {
		return err
	}
	d.chosen = chosen
	d.overlap = d.scored[chosen].Overlap
	d.saturated = c.saturated(d, d.req, chosen)
	return nil
}

// anyLower says whether an overlap has blocks held below GPU.
func anyLower(overlaps []index.Overlap) bool {
	for i := range overlaps {
		if overlaps[i].Lower != ([index.LowerTiers]int32{}) {
			return true
		}
	}
	return false
}

// lowerOf is, for a rank-blind router, each candidate's blocks of its
// indexed prefix held below GPU (as setIndexed finds them): its own
// rank's, or those of a rank whose overlap is the one credited.
func (d *decision) lowerOf(workers []index.WorkerID, pl *pools) [][index.LowerTiers]int32 {
	n := len(workers)
	d.lower = slices.Grow(d.lower[:0], n)[:n]
	clear(d.lower)
	// Each overlap is looked for first where the last one's run ended,
	// as setIndexed does, and by binary search when it is not there.
	set := func(from, to int) {
		next := from
		for _, o := range d.overlaps {
			if o.Lower == ([index.LowerTiers]int32{}) {
				continue
			}
			id := o.Worker.Instance
			i := next
			if i >= to || workers[i].Instance != id {
				i = searchWorkers(workers[from:to], id) + from
			}
			for ; i < to && workers[i].Instance == id; i++ {
				if workers[i].DPRank == o.Worker.DPRank || d.indexed[i] == o.Blocks {
					// Rank-blind, the rank whose prefix is credited.
					d.lower[i] = o.Lower
				}
			}
			next = i
		}
	}
	if pl == nil {
		set(0, n)
	} else {
		pl.each(n, set)
	}
	return d.lower
}

// setIndexed sets indexed[i] to the index's overlap of workers[i] (sorted
// by instance, then rank), for every worker in overlaps, and, with lower
// (rank-aware only; nil: not wanted), lower[i] to its blocks held below
// GPU; the others keep theirs, which the caller zeroed. With anyRank (a
// rank-blind router), a candidate is credited with the longest overlap of
// any rank of its instance. The overlaps come in the index's slot order,
// which is mostly the instances' (slots are given as workers appear), the
// ranks of an instance one after another: each is looked for first where
// the last one's run ended, then where it began, and by binary search
// when it is at neither.
func setIndexed(indexed []int, lower [][index.LowerTiers]int32, workers []index.WorkerID, overlaps []index.Overlap, anyRank bool) {
	n, next, start := len(workers), 0, 0
	for k := range overlaps {
		o := &overlaps[k] // not a copy of each
		id := o.Worker.Instance
		// next ends the run of another instance, and start begins the
		// last one found (or the first instance past it), so a match
		// at either is the first of id's.
		i := next
		if i >= n || workers[i].Instance != id {
			if start < n && workers[start].Instance == id {
				i = start
			} else {
				i = searchWorkers(workers, id)
			}
		}
		start = i
		for ; i < n && workers[i].Instance == id; i++ {
			if workers[i].DPRank == o.Worker.DPRank || anyRank {
				indexed[i] = max(indexed[i], o.Blocks)
				if lower != nil {
					lower[i] = o.Lower
				}
			}
		}
		next = i
	}
}

// searchWorkers is the first position in workers (sorted by instance) of
// an instance at or after id: slices.BinarySearchFunc without its
// comparison calls, as a decision searches once per worker.
func searchWorkers(workers []index.WorkerID, id uint64) int {
	lo, hi := 0, len(workers)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if workers[m].Instance < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Route chooses a worker and records the decision. The core keeps a copy
// of the request's block hashes.
func (c *Core) Route(r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	resp, _, err := c.route(r, false)
	return resp, err
}

// RouteOwned is Route for a request whose block hashes the core may keep
// as they are, without a copy: nothing changes them after the call, as
// with a request gRPC decoded for this call alone (the service's
// handlers). The copy is a kilobyte per 128 blocks, garbage for the
// collector once the request is freed.
func (c *Core) RouteOwned(r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	resp, _, err := c.route(r, true)
	return resp, err
}

// RouteOwnedCost is RouteOwned that also returns the chosen worker's cost,
// which a caller that omits the candidates (and so lets the decision
// price only those that can win) cannot read from them.
func (c *Core) RouteOwnedCost(r *routerv1.RouteRequest) (*routerv1.RouteResponse, float64, error) {
	return c.route(r, true)
}

func (c *Core) route(r *routerv1.RouteRequest, owned bool) (*routerv1.RouteResponse, float64, error) {
	if r.GetRequestId() == "" || len(r.GetRequestId()) > MaxRequestIDLen {
		return nil, 0, fmt.Errorf("%w: request_id must be 1..%d bytes", ErrInvalid, MaxRequestIDLen)
	}
	if c.comp.named && r.GetInstanceId() == 0 {
		return nil, 0, fmt.Errorf("%w: direct mode needs instance_id", ErrInvalid)
	}
	if r.GetSessionId() != "" {
		if err := ValidSessionID(r.SessionId); err != nil {
			return nil, 0, err
		}
	}
	d, err := c.evaluate(query{target: r.Target, tokens: r.TokenIds, hashes: r.BlockHashes,
		weight: r.OverlapWeight, temperature: r.Temperature, exclude: r.ExcludeInstanceIds, direct: r.InstanceId, salt: r.CacheSalt, lora: r.LoraName,
		omit: r.GetOmitCandidates(), session: r.GetSessionId(), backlog: r.GetBacklog(), withinLimit: r.GetWithinLimit()})
	if err != nil {
		return nil, 0, err
	}
	defer d.release()
	c.applySession(d, r.GetSessionId(), len(r.TokenIds), true)
	w := d.scored[d.chosen].Worker
	// One copy of the request's hashes, which the load record, the
	// predictions and the arrivals share (none changes them); hashes made
	// from token ids are the decision's own already, and an owned
	// request's are given to the core.
	hashes := d.hashes
	if !d.ownHashes && !owned {
		hashes = slices.Clone(hashes)
	}
	// The worker that computes the prompt: the prefill leg's, or the
	// worker's own.
	pw, pblocks := d.chosen, len(d.hashes)-d.overlap
	if d.prefill >= 0 {
		pw, pblocks = d.prefill, len(d.hashes)-d.scored[d.prefill].Overlap
	}
	c.mu.Lock()
	reported := c.reported[d.scored[pw].Worker.Instance]
	c.arrivals.add(c.now(), prefillMs(&d.scored[pw].Timing, len(d.hashes), pblocks, d.blockSize), hashes)
	if m, ok := r.Target.GetKind().(*routerv1.Target_Model); ok {
		c.noteTypicalLocked(m.Model, d.req.NewTokens(d.scored[pw].Overlap))
	}
	c.mu.Unlock()
	// A decode leg computes nothing of the prompt but its handoff, and
	// waits for its admission past the handoff (see Load.AddLeg).
	// Either takes its prompt's blocks of the worker's free memory but
	// those running requests hold there.
	own, need := len(hashes)-d.overlap, len(hashes)-c.load.SharedPrefix(w, hashes, d.overlap)
	// A request freed before this decision (its caller gave up waiting
	// for it) is answered but weighs on nothing.
	var counted bool
	if d.prefill >= 0 {
		own = 0
		counted = c.load.AddLeg(r.RequestId, w, need, hashes)
	} else {
		counted = c.load.AddNeed(r.RequestId, w, own, need, hashes)
	}
	if counted && r.LoraName != "" {
		// Its first token comes after the worker's queue and its own
		// prefill, the adapter's load and what of a slot's wait outlasts
		// that queue (on the worker that computes its prompt).
		cand := &d.scored[pw]
		ms := cand.RequestEngineFirstTokenMs(&d.req) + cand.AdapterWaitMs()
		c.loras.routed(r.RequestId, w, r.LoraName, d.now, d.now.Add(time.Duration(ms*float64(time.Millisecond))))
	}
	if counted && c.approx != nil {
		c.approx.Predict(w, hashes, c.now())
	}
	if counted {
		c.expectFirstToken(d, r.RequestId, pw, reported)
	}
	if counted && c.pending != nil && c.comp.predicts {
		// What the index does not confirm yet is predicted there until
		// the worker's events store it.
		c.pending.AddShared(r.RequestId, w, hashes[d.indexed[d.chosen]:], c.now())
	}
	var pleg Leg
	if d.prefill >= 0 {
		pleg = Leg{Worker: d.scored[d.prefill].Worker, Blocks: pblocks}
		if counted {
			c.recordPrefillLeg(r.RequestId, pleg.Worker, pblocks, hashes, d.indexed[d.prefill], c.now())
		}
	}
	switch d.disagg {
	case DecisionRemotePrefill:
		c.legs.remote.Add(1)
	case DecisionLocalPrefill:
		c.legs.local.Add(1)
	}
	in := d.cands[d.chosen].in
	if counted && c.observer != nil {
		c.observer.Routed(r.RequestId, in.Namespace, w, own, d.hashes, pleg, r.GetSessionId(), r.GetLoraName())
	}
	resp, _ := responsePool.Get().(*routerv1.RouteResponse)
	if resp == nil {
		resp = new(routerv1.RouteResponse)
	}
	ep := resp.Endpoint
	if ep == nil {
		ep = new(routerv1.Endpoint)
	}
	*ep = routerv1.Endpoint{Namespace: in.Namespace, Component: in.Component, Endpoint: in.Endpoint}
	cands := resp.Candidates[:0]
	if !r.GetOmitCandidates() {
		cands = appendCandidates(cands, d.scored)
	}
	*resp = routerv1.RouteResponse{
		InstanceId:    in.InstanceId,
		DpRank:        w.DPRank,
		Transport:     in.Transport,
		OverlapBlocks: uint32(d.overlap),
		RequestBlocks: uint32(len(d.hashes)),
		Candidates:    cands,
		Endpoint:      ep,
		Saturated:     d.saturated,
		Room:          uint32(d.room),
	}
	if d.prefill >= 0 {
		resp.Prefill = prefillTarget(d)
	}
	c.notify()
	return resp, d.scored[d.chosen].Cost, nil
}

// responsePool holds the responses given back by Recycle.
var responsePool sync.Pool

// Recycle gives back a response Route returned, for a later Route to fill
// again: a response lists every worker (about 9 KB at 100 workers), and
// one allocated per decision is garbage the collector must chase, whose
// cycles show in the decisions' p99. The caller, and whatever it handed
// resp to, must not use resp, its candidates or its endpoint after, and
// must recycle it once. Its transport is the instance's, kept as it is.
// Serving a RouteStream recycles each response once it is sent (gRPC has
// marshalled it then); a unary Route's response is left to the collector,
// as gRPC marshals it after the handler returns.
func Recycle(resp *routerv1.RouteResponse) {
	if resp == nil {
		return
	}
	resp.Transport, resp.Prefill = nil, nil
	responsePool.Put(resp)
}

// QueryOverlaps scores candidates without routing.
func (c *Core) QueryOverlaps(r *routerv1.QueryOverlapsRequest) (*routerv1.QueryOverlapsResponse, error) {
	d, err := c.evaluate(query{target: r.Target, tokens: r.TokenIds, hashes: r.BlockHashes, salt: r.CacheSalt, lora: r.LoraName})
	if err != nil {
		return nil, err
	}
	defer d.release()
	return &routerv1.QueryOverlapsResponse{RequestBlocks: uint32(len(d.hashes)), Candidates: candidatesOf(d.scored)}, nil
}

// ReportLoad merges a worker's own load report with the router's record,
// request by request (see scheduler.Load.Report), and keeps its timing
// model.
func (c *Core) ReportLoad(m *workerv1.LoadMetrics) {
	if m.GetInstanceId() == 0 {
		return
	}
	w := index.WorkerID{Instance: m.InstanceId, DPRank: m.GetDpRank()}
	c.mu.Lock()
	if _, live := c.refs[m.InstanceId]; !live || w.DPRank >= c.ranksLocked(m.InstanceId) {
		// A rank the worker's cards do not declare is no candidate (and
		// a rank-blind router knows of rank 0 alone).
		c.mu.Unlock()
		return
	}
	t := c.timingLocked(m.InstanceId)
	c.reported[m.InstanceId] = true
	if pub := timingmodel.FromProto(m.GetTimingModel()); !t.Same(&pub) {
		*t = pub
		c.timingVer++
	}
	run := runMs(m, t)
	c.loras.report(w, m.GetLoraAdapters(), run)
	bs := c.blockSizeLocked(m.InstanceId)
	load := c.load
	if c.prefill[m.InstanceId] {
		// A prefill worker runs prefill legs, which are recorded apart.
		load = c.legs.load
	}
	c.mu.Unlock()
	var reqs []scheduler.ReportedRequest
	if len(m.GetRequests()) > 0 || m.GetRunningRequests()+m.GetWaitingRequests() == 0 {
		// A buffer of reportPool (Report keeps none of it): every worker
		// reports every second, each request of it in the list.
		buf, _ := reportPool.Get().(*[]scheduler.ReportedRequest)
		if buf == nil {
			buf = new([]scheduler.ReportedRequest)
		}
		defer reportPool.Put(buf)
		reqs = slices.Grow((*buf)[:0], len(m.GetRequests()))[:len(m.GetRequests())]
		for i, r := range m.GetRequests() {
			reqs[i] = scheduler.ReportedRequest{ID: r.GetRequestId(), PrefillTokens: int(r.GetPrefillTokens()), DecodeBlocks: int(r.GetDecodeBlocks())}
		}
		if reqs == nil {
			reqs = []scheduler.ReportedRequest{} // a list (empty), not none
		}
		*buf = reqs
	}
	load.Report(w, reqs, int(m.GetActivePrefillTokens()), int(m.GetKvBlocksTotal()), bs)
	load.ReportRun(w, run, meanOutput(m))
	c.notify()
}

// runMs is how long a request decodes on the worker that sent m, in ms,
// with timing model t: its requests' mean output since it started (their
// output tokens over their number: the requests still running count with
// what they have generated so far, a small share once the worker has
// served many) times a decode step at its KV usage now; 0 when the report
// has no such counts.
func runMs(m *workerv1.LoadMetrics, t *timingmodel.Model) float64 {
	n, out := m.GetRequestsTotal(), m.GetOutputTokensTotal()
	if n == 0 || out == 0 {
		return 0
	}
	usage := 0.0
	if total := m.GetKvBlocksTotal(); total > 0 {
		usage = min(float64(m.GetKvBlocksUsed())/float64(total), 1)
	}
	return float64(out) / float64(n) * t.DecodeMs(usage)
}

// meanOutput is how many tokens a request generates on the worker that
// sent m, on average since it started; 0 when the report has no counts.
func meanOutput(m *workerv1.LoadMetrics) float64 {
	if n := m.GetRequestsTotal(); n > 0 {
		return float64(m.GetOutputTokensTotal()) / float64(n)
	}
	return 0
}

// reportPool holds ReportLoad's buffers of reported requests.
var reportPool sync.Pool

// blockSizeLocked is an instance's block size from its model cards.
func (c *Core) blockSizeLocked(id uint64) int {
	for _, eps := range c.models {
		for _, ids := range eps {
			if bs := ids[id]; bs > 0 {
				return int(bs)
			}
		}
	}
	return kvhash.DefaultBlockSize
}

// PrefillDone moves a routed request's load from prefill to decode; a
// disaggregated request's prefill leg ends (its handoff came).
func (c *Core) PrefillDone(id string) {
	c.prefillDone(id)
	if c.observer != nil {
		c.observer.PrefillDone(id)
	}
}

// Free releases a routed request's load; its predicted blocks go at once
// if it never finished its prefill, or once its worker's events confirm
// them (or a grace period passes) if it did.
func (c *Core) Free(id string) {
	c.free(id)
	if c.observer != nil {
		c.observer.Freed(id)
	}
}

func (c *Core) prefillDone(id string) {
	if model, late, ok := c.load.PrefillDone(id); ok {
		c.noteLate(model, late)
	}
	c.endPrefillLeg(id, true)
	c.notify()
}

func (c *Core) free(id string) {
	prefilled := c.load.Free(id)
	c.loras.freed(id)
	c.endPrefillLeg(id, false)
	c.notify()
	if c.pending == nil {
		return
	}
	if prefilled {
		c.pending.Done(id, c.now())
	} else {
		c.pending.Release(id)
	}
}

// SetObserver sets who hears about this core's own decisions; call it
// before serving.
func (c *Core) SetObserver(o Observer) { c.observer = o }

func candidatesOf(s []scheduler.Candidate) []*routerv1.Candidate { return appendCandidates(nil, s) }

// appendCandidates sets dst to the candidates' messages. It fills again
// the messages that dst's array points to up to its capacity (a recycled
// response's), and allocates the rest together, not one each: a response
// lists every worker, and this is the route decision's hot path.
func appendCandidates(dst []*routerv1.Candidate, s []scheduler.Candidate) []*routerv1.Candidate {
	dst = dst[:min(cap(dst), len(s))]
	keep := 0
	for keep < len(dst) && dst[keep] != nil {
		keep++
	}
	dst = dst[:keep]
	if keep < len(s) {
		msgs := make([]routerv1.Candidate, len(s)-keep)
		dst = slices.Grow(dst, len(msgs))
		for i := range msgs {
			dst = append(dst, &msgs[i])
		}
	}
	for i := range s {
		c := &s[i]
		*dst[i] = routerv1.Candidate{InstanceId: c.Worker.Instance, DpRank: c.Worker.DPRank, OverlapBlocks: uint32(c.Overlap),
			Cost: c.Cost, PrefillBlocks: uint32(c.PrefillBlocks), DecodeBlocks: uint32(c.DecodeBlocks), LoraLoadMs: c.AdapterMs}
	}
	return dst
}

// statsRead is called by Stats between reading the event counters and the
// index. A variable for tests.
var statsRead = func() {}

// Stats reports the router's state. Its index figures cover at least the
// events its counters count: an event changes the index before it is
// counted, so the counters are read first. (Read the other way round, a
// router replaying its stream could report every event applied and an
// index short of the last ones applied while Stats waited for the lock:
// TestRouterThroughNATSStreamLeaderKill once saw a fresh router with all
// 3947 events applied and 3874 entries.)
func (c *Core) Stats() *routerv1.GetStatsResponse {
	c.mu.Lock()
	ids := make([]uint64, 0, len(c.refs))
	ranks := make(map[uint64]uint32, len(c.refs))
	for id := range c.refs {
		ids = append(ids, id)
		ranks[id] = c.ranksLocked(id)
	}
	ev := c.stats
	restored := c.restoredAt
	last := make(map[uint64]time.Time, len(c.lastEvent))
	for id, t := range c.lastEvent {
		last[id] = t
	}
	c.mu.Unlock()
	statsRead()
	st := c.idx.Stats()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := &routerv1.GetStatsResponse{Mode: c.ModeName(), IndexedBlocks: uint64(st.Blocks), IndexedEntries: uint64(st.Entries),
		EventsApplied: ev.applied, EventsDuplicate: ev.duplicate, EventsGap: ev.gap, RestoredSnapshotTime: restored,
		SessionBindings: uint64(c.sessions.live(c.now()))}
	for _, id := range ids {
		// A worker serving several ranks is a line per rank.
		for r := range ranks[id] {
			w := index.WorkerID{Instance: id, DPRank: r}
			p, d, n := c.load.Of(w)
			if lp, ld, ln := c.legs.load.Of(w); ln > 0 {
				p, d, n = p+lp, d+ld, n+ln
			}
			ws := &routerv1.WorkerStats{InstanceId: id, DpRank: r, CachedBlocks: uint64(c.idx.Blocks(w)),
				Requests: uint32(n), PrefillBlocks: uint32(p), DecodeBlocks: uint32(d)}
			if t, ok := last[id]; ok {
				ws.LastEventTime = timestamppb.New(t)
			}
			out.Workers = append(out.Workers, ws)
		}
	}
	return out
}

// Mode is the routing mode the core was configured with.
func (c *Core) Mode() Mode { return c.mode }

// Approximate reports whether caches are predicted from decisions instead
// of KV events.
func (c *Core) Approximate() bool { return c.approximate }

// ModeName names the mode for logs and GetStats.
func (c *Core) ModeName() string {
	if c.mode == ModeKV && c.approximate {
		return "kv (approximate, no KV events)"
	}
	return string(c.mode)
}
