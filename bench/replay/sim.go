package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Config sizes the simulated cluster and the core.
type Config struct {
	// Workers is the number of simulated engines.
	Workers int
	// Engine configures each engine (block size, KV blocks, speed-up, ...).
	Engine simengine.Config
	// TraceBlockSize is the number of tokens each trace hash id stands for.
	TraceBlockSize int
	// RateScale multiplies the request rate: timestamps are divided by it.
	RateScale float64
	// OverlapWeight and Temperature are the router's cost parameters.
	OverlapWeight, Temperature float64
	// ApproxTTL and ApproxMaxEntries configure approximate mode.
	ApproxTTL        time.Duration
	ApproxMaxEntries int
	// Seed makes random choices repeatable.
	Seed uint64
	// EventDelay is how long KV events and load reports take to reach the
	// routers; SyncDelay, replica sync messages (virtual time).
	EventDelay, SyncDelay time.Duration
	// LoadInterval is how often each engine reports its load.
	LoadInterval time.Duration
	// RequestTTL is the routers' --router-request-ttl.
	RequestTTL time.Duration
	// PrefillWorkers and DecodeWorkers split the Workers engines into a
	// prefill and a decode pool in the disaggregated modes (disagg.go):
	// both 0 splits them in halves (the prefill pool the smaller); one 0
	// is the rest; both set must add up to Workers. The other modes run
	// every engine aggregated.
	PrefillWorkers, DecodeWorkers int
	// KVTransferGbps and KVBytesPerToken size the prefill-to-decode KV
	// transfer, for the engines (a transfer of n blocks takes n x block
	// size x bytes per token x 8 / (Gb/s x 10^9) seconds, as the mocker's
	// decode worker waits) and for the router, which prices it the same
	// way; 0 makes it free.
	KVTransferGbps  float64
	KVBytesPerToken int
	// SlowGap is the gap between two tokens of a request that its record
	// counts as slow (RequestRecord.SlowGaps; the command passes its ITL
	// objective); 0 counts none.
	SlowGap time.Duration
	// DPSize is how many data-parallel ranks each worker serves: each
	// rank is an engine of its own (Engine's size), so the cluster has
	// Workers x DPSize engines; the workers' cards declare the ranks. 0 or
	// 1: one.
	DPSize int
}

// maxDPSize bounds Config.DPSize.
const maxDPSize = 64

// ranks is how many data-parallel ranks each worker serves (at least 1).
func (c Config) ranks() int { return max(c.DPSize, 1) }

// engines is how many simulated engines the cluster has: a rank each.
func (c Config) engines() int { return c.Workers * c.ranks() }

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return errors.New("replay: at least one worker is needed")
	case c.TraceBlockSize < 1:
		return errors.New("replay: trace block size must be positive")
	case c.RateScale <= 0 || math.IsInf(c.RateScale, 0) || math.IsNaN(c.RateScale):
		return errors.New("replay: rate scale must be positive")
	case c.Engine.SpeedupRatio <= 0:
		return errors.New("replay: the engines' speed-up must be positive (virtual time needs durations)")
	case c.OverlapWeight < 0 || c.Temperature < 0:
		return errors.New("replay: overlap weight and temperature must not be negative")
	case c.EventDelay < 0 || c.SyncDelay < 0 || c.RequestTTL < 0:
		return errors.New("replay: delays and the request TTL must not be negative")
	case c.LoadInterval <= 0:
		return errors.New("replay: the load report interval must be positive")
	case c.PrefillWorkers < 0 || c.DecodeWorkers < 0:
		return errors.New("replay: --prefill-workers and --decode-workers must not be negative")
	case c.PrefillWorkers > 0 && c.DecodeWorkers > 0 && c.PrefillWorkers+c.DecodeWorkers != c.Workers:
		return fmt.Errorf("replay: --prefill-workers %d + --decode-workers %d must be the %d engines of --workers (the disaggregated modes split the same engines the others run aggregated)",
			c.PrefillWorkers, c.DecodeWorkers, c.Workers)
	case c.PrefillWorkers >= c.Workers || c.DecodeWorkers >= c.Workers:
		return fmt.Errorf("replay: --prefill-workers %d and --decode-workers %d leave no engine to the other pool of --workers %d", c.PrefillWorkers, c.DecodeWorkers, c.Workers)
	case c.KVTransferGbps < 0 || math.IsNaN(c.KVTransferGbps) || math.IsInf(c.KVTransferGbps, 0) || c.KVBytesPerToken < 0:
		return errors.New("replay: --kv-transfer-gbps must be a finite number >= 0 and --kv-bytes-per-token must not be negative")
	case c.DPSize < 0 || c.DPSize > maxDPSize:
		return fmt.Errorf("replay: --dp-size %d must be between 0 and %d", c.DPSize, maxDPSize)
	}
	return c.Engine.Validate()
}

// Result is what one mode measured.
type Result struct {
	Mode string
	// RateScale is the request rate multiplier it ran at.
	RateScale float64
	// Completed and Rejected count requests.
	Completed, Rejected int
	// HitRate is the fraction of prompt blocks found in the engines' prefix
	// caches at admission.
	HitRate float64
	// HostHitRate is the part of HitRate found in the engines' host tier
	// (--host-kv-blocks) and loaded back rather than on GPU.
	HostHitRate float64
	// TTFT, E2E and ITL are latency percentiles (p50, p90, p99); ITL's
	// samples are every gap between two consecutive tokens of a request,
	// all requests pooled (a stall counts once per token it delays).
	TTFT, E2E, ITL [3]time.Duration
	// TTFTMean is the mean time to first token.
	TTFTMean time.Duration
	// Throughput is generated tokens per second of simulated time.
	Throughput float64
	// Spread is the busiest worker's prefill tokens over the mean.
	Spread float64
	// LastReject says why the last rejected request was refused.
	LastReject string
	// Makespan is the simulated time from the first arrival to the last
	// completion.
	Makespan time.Duration
	// Wall is the real time the simulation took.
	Wall time.Duration
	// PrefillWorkers and DecodeWorkers are the pools' sizes in the
	// disaggregated modes (0 and 0: every engine aggregated).
	PrefillWorkers, DecodeWorkers int
	// RemotePrefill is the share of routed requests whose prefill ran on
	// a prefill worker (the router chose the pair).
	RemotePrefill float64
	// Sessions counts the session modes' turns by what the session rule
	// did, over every router; zero in other modes.
	Sessions SessionCounts
	// LaterTurns counts the routed turns of the trace's sessions after
	// their first, in every mode; TurnsAway those routed to another
	// engine (worker, or rank of one) than their session's previous turn
	// (where its prefix is).
	LaterTurns, TurnsAway int
	// SentAway counts the requests the router placed on a worker it saw
	// caching fewer of their blocks than the one caching the most (their
	// home); GaveUp is the blocks those requests gave up so (the home's
	// cached prefix less the chosen worker's), over the prompt blocks
	// HitRate counts: the hit rate a router that always went home would
	// have kept, as the router saw the caches. Zero in modes whose
	// responses list no candidates and for disaggregated pairs.
	SentAway int
	GaveUp   float64
	// AdapterRequests counts the routed requests with a LoRA adapter,
	// AdapterMisrouted those routed to an engine whose card does not list
	// it, and LoraLoads the adapters the engines loaded.
	AdapterRequests, AdapterMisrouted int
	LoraLoads                         uint64
	// Evicted counts the cached blocks the engines evicted from their
	// GPUs (with a host tier, moved there), HostEvicted those their host
	// tiers evicted in turn (lost), HostHits the prompt blocks loaded
	// back from host (HostHitRate's count): whether a trace's cached
	// blocks outgrow the GPUs, and whether they fit with the host tier.
	Evicted, HostEvicted, HostHits uint64
}

// SessionCounts are a session mode's turns by what the session rule did:
// bound anew, sent to the bound worker, moved off a full bound worker
// (soft), moved off one that could not serve them.
type SessionCounts struct {
	New, Hit, MovedLoad, MovedUnavailable uint64
}

// Modes are the routing modes a replay compares, in table order: the
// router's modes, approximate kv, kv behind several replicas that share
// their decisions over (simulated) replica sync, or do not, the peers'
// policies (peers.go), and the disaggregated modes (disagg.go; auto also
// behind 3 synced replicas).
var Modes = []string{"round-robin", "random", "least-loaded", "kv", "kv-approx", "kv-3-replicas", "kv-8-replicas", "kv-3-replicas-nosync",
	"dynamo", "llm-d", "sglang", "disagg", "disagg-always", "kv-sessions", "kv-sessions-hard", "kv-3-replicas-sessions", "kv-tier-blind", "kv-adapter-blind",
	"kv-rank-blind", "disagg-3-replicas"}

// adapterPlacement is, per engine, the LoRA adapters its card lists: of
// the trace's adapters, sorted by name, engine i serves the j-th unless
// (i + j) % 4 == 0, so that with four engines or more each adapter has a
// quarter of them that cannot serve it (which the router must never pick);
// with fewer, every engine serves every adapter.
func adapterPlacement(trace []Request, workers int) [][]string {
	var names []string
	for _, r := range trace {
		if r.LoRA != "" && !slices.Contains(names, r.LoRA) {
			names = append(names, r.LoRA)
		}
	}
	slices.Sort(names)
	out := make([][]string, workers)
	for i := range out {
		for j, n := range names {
			if workers < 4 || (i+j)%4 != 0 {
				out[i] = append(out[i], n)
			}
		}
	}
	return out
}

// modeSetup is how a mode's routers are built.
type modeSetup struct {
	mode        core.Mode
	approximate bool
	replicas    int
	sync        bool
	// peer names a peer policy (peers.go) that routes instead of the core.
	peer string
	// disagg, when set, splits the engines into prefill and decode pools
	// and is the router's --disaggregation (disagg.go).
	disagg core.Disaggregation
	// sessions, when set, routes each turn with its trace session id
	// under this --session-affinity.
	sessions core.Affinity
	// tierBlind indexes the engines' GPU blocks only (--kv-tiers=false):
	// a block offloaded to the host tier is gone for the router.
	tierBlind bool
	// adapterBlind prices no LoRA adapter load (core.Config.AdapterBlind):
	// requests still go only to workers that serve their adapter.
	adapterBlind bool
	// rankBlind routes to workers, not ranks (core.Config.RankBlind): the
	// worker picks the rank (see pickRank).
	rankBlind bool
}

func setupOf(mode string) (modeSetup, error) {
	switch mode {
	case "round-robin", "random", "least-loaded", "kv":
		return modeSetup{mode: core.Mode(mode), replicas: 1}, nil
	case "kv-approx":
		return modeSetup{mode: core.ModeKV, approximate: true, replicas: 1}, nil
	case "kv-3-replicas":
		return modeSetup{mode: core.ModeKV, replicas: 3, sync: true}, nil
	case "kv-8-replicas":
		return modeSetup{mode: core.ModeKV, replicas: 8, sync: true}, nil
	case "kv-3-replicas-nosync":
		return modeSetup{mode: core.ModeKV, replicas: 3}, nil
	case "dynamo", "llm-d", "sglang":
		return modeSetup{peer: mode, replicas: 1}, nil
	case "disagg":
		return modeSetup{mode: core.ModeKV, replicas: 1, disagg: core.DisaggAuto}, nil
	case "disagg-always":
		return modeSetup{mode: core.ModeKV, replicas: 1, disagg: core.DisaggAlways}, nil
	case "disagg-3-replicas":
		return modeSetup{mode: core.ModeKV, replicas: 3, sync: true, disagg: core.DisaggAuto}, nil
	case "kv-sessions":
		return modeSetup{mode: core.ModeKV, replicas: 1, sessions: core.AffinitySoft}, nil
	case "kv-sessions-hard":
		return modeSetup{mode: core.ModeKV, replicas: 1, sessions: core.AffinityHard}, nil
	case "kv-3-replicas-sessions":
		return modeSetup{mode: core.ModeKV, replicas: 3, sync: true, sessions: core.AffinitySoft}, nil
	case "kv-tier-blind":
		return modeSetup{mode: core.ModeKV, replicas: 1, tierBlind: true}, nil
	case "kv-adapter-blind":
		return modeSetup{mode: core.ModeKV, replicas: 1, adapterBlind: true}, nil
	case "kv-rank-blind":
		return modeSetup{mode: core.ModeKV, replicas: 1, rankBlind: true}, nil
	}
	return modeSetup{}, fmt.Errorf("replay: unknown mode %q: valid modes are %v", mode, Modes)
}

// The simulated cluster's names, as the routers see them in the registry.
const (
	simNamespace = "replay"
	simModel     = "replay-model"
)

// timed is something that happens at a virtual time; seq orders equal
// times by scheduling order, so runs are deterministic.
type timed struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type timeline []timed

func (h timeline) Len() int { return len(h) }
func (h timeline) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timeline) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timeline) Push(x any)   { *h = append(*h, x.(timed)) }
func (h *timeline) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sim is one replay: engines, the routers of one mode, and virtual time.
type sim struct {
	cfg    Config
	now    time.Duration
	seq    uint64
	events timeline
	// routers route the requests, one replica in turn: the cores, or a
	// peer policy.
	routers []router
	cores   []*core.Core
	engines []*simEngine
	// records are the requests' records (RunRecorded), nil when not
	// recording.
	records []RequestRecord
	record  bool
	next    int            // the replica that takes the next request
	owner   map[string]int // request id -> the replica that routed it
	reqs    map[string]*inflight
	left    int    // requests neither finished nor rejected
	routed  int    // requests the router placed
	gaveUp  uint64 // blocks the requests sent away from their home gave up (Result.GaveUp)
	res     Result
	ttft    []time.Duration
	e2e     []time.Duration
	itl     []time.Duration
	last    time.Duration
	// disagg is the pools' state in the disaggregated modes, else nil.
	disagg *disaggState
	// overhead is each request's serving overhead, which delays its
	// stream as the client sees it and occupies no engine step
	// (simengine.RequestOverhead).
	overhead time.Duration
}

type simEngine struct {
	id uint64
	// rank is its data-parallel rank in worker id.
	rank uint32
	e    *simengine.Engine
	// requests are those added and not finished.
	requests int
	busy     bool
	prefill  int
	// stepEnd is when the step in flight ends (while busy).
	stepEnd time.Duration
}

type inflight struct {
	arrival time.Duration
	first   bool
	// lastToken is when its last token came (once first).
	lastToken time.Duration
	// handedOff says its prefill ran on a prefill worker, which handed
	// its KV over (disagg.go): the router heard of its prefill's end then.
	handedOff bool
	// pair is its decode leg's state until that leg starts, else nil.
	pair *pairLeg
	// rec is the request's record while recording, else nil.
	rec *RequestRecord
}

// RequestRecord is what a recorded replay (RunRecorded) saw of one
// completed request: where the router sent it and why it waited there.
// The engine's state is read when the request arrives, before it is added.
type RequestRecord struct {
	// Request is its position in the trace; Arrival its virtual arrival.
	Request int
	Arrival time.Duration
	// Worker is the engine it was routed to (instance id, from 1).
	Worker uint64
	// PromptTokens is its prompt's length.
	PromptTokens int
	// Overlap is the router's cached (or predicted) prefix of it on the
	// chosen worker, BestOverlap the longest on any worker, in blocks;
	// Cost the chosen worker's cost.
	Overlap, BestOverlap int
	Cost                 float64
	// Cached is the prefix the engine's cache held at its admission, in
	// blocks (the router's overlap may count blocks not computed yet).
	Cached int
	// QueuedTokens is the prompt tokens the engine still had to prefill
	// for other requests and Decoding its requests past their prefill,
	// both as of the end of the step in flight (an engine step takes its
	// effect when it starts; its time passes after), and StepLeft how long
	// that step had left (0: the engine was idle).
	QueuedTokens, Decoding int
	StepLeft               time.Duration
	// Wait is from arrival to its first admission; TTFT and E2E to its
	// first and last token.
	Wait, TTFT, E2E time.Duration
	// Gaps counts the gaps between its consecutive tokens, SlowGaps
	// those longer than Config.SlowGap, and GapSum is their total: its
	// share of the pooled inter-token latency.
	Gaps, SlowGaps int
	GapSum         time.Duration
	// Home is the worker the router saw caching the longest prefix of it
	// (BestOverlap; the cheapest of those on a tie), HomeCost that
	// worker's cost, and HomeQueuedTokens and HomeDecoding its engine's
	// state at the arrival, read as QueuedTokens and Decoding are: what
	// the request would have met had it gone home.
	Home                           uint64
	HomeCost                       float64
	HomeQueuedTokens, HomeDecoding int
	// DecodingMin and DecodingMax are the fewest and the most requests
	// past their prefill on any engine at the arrival, read as Decoding
	// is: how much the decoding requests a placement could stall differed
	// between the engines.
	DecodingMin, DecodingMax int
	// SlowGapsCaused is this request's share of the slow gaps (over
	// Config.SlowGap) that the steps computing its prompt gave the
	// requests decoding beside them: each such step's decoding requests,
	// shared among the step's prompt chunks by their tokens. Summed over
	// a run's requests it is the slow gaps of steps that computed prompt
	// tokens, which is where a placement makes other requests' gaps slow.
	SlowGapsCaused float64
	// PrefillWorker is the engine that computed its prompt when that was
	// not Worker (a disaggregated pair's prefill leg: Worker decodes); 0
	// when Worker computed it.
	PrefillWorker uint64
}

// at schedules fn d after now.
func (s *sim) at(d time.Duration, fn func()) { s.atTime(s.now+d, fn) }

func (s *sim) atTime(t time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.events, timed{at: t, seq: s.seq, fn: fn})
}

func (s *sim) clock() time.Time { return time.Unix(0, 0).Add(s.now) }

// observer hands one replica's decisions to the others as the service's
// replica sync messages, after the sync delay.
type observer struct {
	s    *sim
	from int
}

func (o observer) send(ev *routerv1.ReplicaEvent) {
	at := o.s.clock()
	o.s.at(o.s.cfg.SyncDelay, func() {
		for i, c := range o.s.cores {
			if i != o.from {
				c.ApplyReplica(ev, at)
			}
		}
	})
}

func (o observer) Routed(id, _ string, w index.WorkerID, prefill int, hashes []uint64, leg core.Leg, session, lora string) {
	ev := core.SessionRoutedEvent(id, w, prefill, hashes, leg, session)
	ev.GetRouted().LoraName = lora
	o.send(ev)
}
func (o observer) PrefillDone(id string) { o.send(core.PrefillDoneEvent(id)) }
func (o observer) Freed(id string)       { o.send(core.FreedEvent(id)) }

// Run replays trace in one mode: each request is routed by the router's
// own Core (a replica in turn when there are several), KV events and load
// reports reach every router after the configured delays, and replicas
// exchange the service's sync messages.
func Run(trace []Request, cfg Config, mode string) (Result, error) {
	res, _, err := run(trace, cfg, mode, false)
	return res, err
}

// RunRecorded is Run, also returning a record of every completed request,
// in trace order. Recording reads the engines' state and changes nothing:
// the result is Run's.
func RunRecorded(trace []Request, cfg Config, mode string) (Result, []RequestRecord, error) {
	return run(trace, cfg, mode, true)
}

func run(trace []Request, cfg Config, mode string, record bool) (Result, []RequestRecord, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, nil, err
	}
	setup, err := setupOf(mode)
	if err != nil {
		return Result{}, nil, err
	}
	start := time.Now()
	s := &sim{cfg: cfg, owner: map[string]int{}, reqs: map[string]*inflight{}, left: len(trace), res: Result{Mode: mode, RateScale: cfg.RateScale}, record: record,
		overhead: simengine.RequestOverhead(cfg.Engine.SpeedupRatio)}
	if cfg.ranks() > 1 && (setup.disagg != "" || setup.peer != "") {
		return Result{}, nil, fmt.Errorf("replay: mode %s does not take --dp-size", mode)
	}
	if setup.disagg != "" {
		if cfg.Workers < 2 {
			return Result{}, nil, fmt.Errorf("replay: mode %s needs at least 2 workers, one per pool", mode)
		}
		s.disagg = &disaggState{pulls: map[string]*simEngine{}}
		s.res.PrefillWorkers, s.res.DecodeWorkers = cfg.split()
	}
	var ins []registryclient.Change[*registryv1.Instance]
	var cards []registryclient.Change[*registryv1.ModelCard]
	serves := adapterPlacement(trace, cfg.Workers)
	for i := range cfg.Workers {
		id := uint64(i + 1)
		for r := range cfg.ranks() {
			e, err := simengine.New(cfg.Engine)
			if err != nil {
				return Result{}, nil, err
			}
			s.engines = append(s.engines, &simEngine{id: id, rank: uint32(r), e: e})
		}
		ins = append(ins, registryclient.Change[*registryv1.Instance]{Item: &registryv1.Instance{Namespace: simNamespace, Component: "backend", Endpoint: "generate",
			InstanceId: id, Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}, Role: s.roleOf(i)}})
		card := &registryv1.ModelCard{Namespace: simNamespace, Component: "backend", Endpoint: "generate",
			InstanceId: id, ModelName: simModel, BlockSize: uint32(cfg.Engine.BlockSize), MaxLoras: uint32(cfg.Engine.MaxLoras)}
		if cfg.ranks() > 1 {
			card.DataParallelSize = uint32(cfg.ranks())
		}
		for _, name := range serves[i] {
			card.LoraAdapters = append(card.LoraAdapters, &registryv1.LoraAdapter{Name: name})
		}
		cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: card})
	}
	for i := range setup.replicas {
		if setup.peer != "" {
			s.routers = append(s.routers, newPeer(setup.peer, cfg.Workers, cfg.Engine.BlockSize, peerSeed(cfg.Seed, setup.peer)))
			continue
		}
		cc := core.DefaultConfig()
		cc.Mode, cc.Approximate = setup.mode, setup.approximate
		cc.OverlapWeight, cc.Temperature = cfg.OverlapWeight, cfg.Temperature
		cc.TTL, cc.MaxTreeSize, cc.RequestTTL = cfg.ApproxTTL, cfg.ApproxMaxEntries, cfg.RequestTTL
		cc.Seed, cc.Clock = cfg.Seed*1000+uint64(i)+1, s.clock
		cc.KVTransferGbps, cc.KVBytesPerToken = cfg.KVTransferGbps, cfg.KVBytesPerToken
		if setup.disagg != "" {
			cc.Disaggregation = setup.disagg
		}
		if setup.sessions != "" {
			cc.SessionAffinity = setup.sessions
		}
		cc.KVTiers = !setup.tierBlind
		cc.AdapterBlind = setup.adapterBlind
		cc.RankBlind = setup.rankBlind
		c := core.New(cc)
		c.OnInstances(ins)
		c.OnModels(cards)
		if setup.sync {
			c.SetObserver(observer{s: s, from: i})
		}
		s.cores = append(s.cores, c)
		s.routers = append(s.routers, c)
	}
	target := &routerv1.Target{Kind: &routerv1.Target_Model{Model: simModel}}
	var tokens []uint32
	// lastWorker is each session's previous turn's engine (a worker's
	// rank, with several).
	lastWorker := map[uint64]*simEngine{}
	first := time.Duration(-1)
	for n, r := range trace {
		at := time.Duration(float64(r.Arrival) / cfg.RateScale)
		if first < 0 {
			first = at
		}
		s.atTime(at, func() {
			id := strconv.Itoa(n)
			tokens = Tokens(r, cfg.TraceBlockSize, tokens)
			me := s.next
			s.next = (s.next + 1) % len(s.routers)
			req := &routerv1.RouteRequest{RequestId: id, Target: target, TokenIds: tokens, LoraName: r.LoRA}
			if setup.sessions != "" && r.Session != 0 {
				req.SessionId = strconv.FormatUint(r.Session, 10)
			}
			resp, err := s.routers[me].Route(req)
			if err != nil {
				s.reject(err)
				return
			}
			// Nothing keeps resp past this arrival (the record copies
			// what it reads), so it goes back to the core's pool, as a
			// RouteStream's responses do: a replay routes every request
			// of the trace, each response listing every worker.
			defer core.Recycle(resp)
			rank := resp.DpRank
			if setup.rankBlind {
				rank = s.pickRank(resp.InstanceId)
			}
			w := s.engineOf(resp.InstanceId, rank)
			if r.Session != 0 {
				if prev, ok := lastWorker[r.Session]; ok {
					s.res.LaterTurns++
					if prev != w {
						s.res.TurnsAway++
					}
				}
				lastWorker[r.Session] = w
			}
			if r.LoRA != "" {
				s.res.AdapterRequests++
				if !slices.Contains(serves[w.id-1], r.LoRA) {
					s.res.AdapterMisrouted++
				}
			}
			// The engine keeps the prompt while the request runs.
			prompt := slices.Clone(tokens)
			s.routed++
			if p := resp.GetPrefill(); p != nil {
				s.startPair(n, id, me, resp, w, s.engines[p.GetInstanceId()-1], prompt, r.OutputLength)
				return
			}
			if err := w.e.Add(simengine.Request{ID: id, Prompt: prompt, MaxTokens: r.OutputLength, Seed: uint64(n + 1), LoRA: r.LoRA}); err != nil {
				s.routers[me].Free(id)
				s.reject(err)
				return
			}
			s.owner[id] = me
			w.prefill += len(prompt)
			w.requests++
			if best := bestOverlap(resp); best > int(resp.GetOverlapBlocks()) {
				s.res.SentAway++
				s.gaveUp += uint64(best - int(resp.GetOverlapBlocks()))
			}
			s.reqs[id] = &inflight{arrival: s.now}
			if s.record {
				s.reqs[id].rec = s.recordArrival(n, w, resp, len(prompt))
			}
			if !w.busy {
				s.step(w)
			}
		})
	}
	s.atTime(max(first, 0), s.reportLoad)
	if sc, ok := s.routers[0].(scraper); ok {
		s.atTime(max(first, 0), func() { s.scrape(sc) })
	}
	for s.events.Len() > 0 {
		ev := heap.Pop(&s.events).(timed)
		s.now = ev.at
		ev.fn()
	}
	var hit, hostHit, queried, generated uint64
	prefill := make([]float64, len(s.engines))
	for i, w := range s.engines {
		st := w.e.Stats()
		hit += st.PrefixHitBlocks
		hostHit += st.HostHitBlocks
		s.res.LoraLoads += st.LoraLoads
		s.res.Evicted += st.EvictedBlocks
		s.res.HostEvicted += st.HostEvictedBlocks
		s.res.HostHits += st.HostHitBlocks
		queried += st.PrefixQueriedBlocks
		generated += st.GeneratedTokens
		prefill[i] = float64(w.prefill)
	}
	res := s.res
	if d := s.disagg; d != nil {
		// The engines' counters would count a decode leg's arrived
		// blocks as hits and its relayed first token twice: the requests'
		// own usage says what was reused where the prompt was computed.
		hit, queried, generated = d.hitBlocks, d.queriedBlocks, generated-d.pairs
		prefill = prefill[:res.PrefillWorkers] // the prompts' engines
		if s.routed > 0 {
			res.RemotePrefill = float64(d.pairs) / float64(s.routed)
		}
	}
	if queried > 0 {
		res.HitRate = float64(hit) / float64(queried)
		res.HostHitRate = float64(hostHit) / float64(queried)
		res.GaveUp = float64(s.gaveUp) / float64(queried)
	}
	res.TTFTMean = mean(s.ttft)
	res.TTFT = percentiles(s.ttft)
	res.E2E = percentiles(s.e2e)
	res.ITL = percentiles(s.itl)
	if first >= 0 && s.last > first {
		res.Makespan = s.last - first
		res.Throughput = float64(generated) / res.Makespan.Seconds()
	}
	res.Spread = spread(prefill)
	for _, c := range s.cores {
		o := c.Sessions().Outcomes
		res.Sessions.New += o[core.SessionNew]
		res.Sessions.Hit += o[core.SessionHit]
		res.Sessions.MovedLoad += o[core.SessionMovedLoad]
		res.Sessions.MovedUnavailable += o[core.SessionMovedUnavailable]
	}
	res.Wall = time.Since(start)
	slices.SortFunc(s.records, func(a, b RequestRecord) int { return a.Request - b.Request })
	return res, s.records, nil
}

// engineOf is the engine of a worker's rank.
func (s *sim) engineOf(instance uint64, rank uint32) *simEngine {
	return s.engines[(int(instance)-1)*s.cfg.ranks()+int(rank)]
}

// pickRank is the rank a worker gives a request its router did not place
// on a rank (a rank-blind router): the one with the fewest requests in
// flight, the lowest on ties. It is a worker's own balancing, blind to
// caches, as an engine's front end spreads requests over its ranks.
func (s *sim) pickRank(instance uint64) uint32 {
	n := s.cfg.ranks()
	best := s.engineOf(instance, 0)
	for r := 1; r < n; r++ {
		if w := s.engineOf(instance, uint32(r)); w.requests < best.requests {
			best = w
		}
	}
	return best.rank
}

// recordArrival starts request n's record: the router's choice and the
// state of the engine it chose, before the request is added to it.
func (s *sim) recordArrival(n int, w *simEngine, resp *routerv1.RouteResponse, prompt int) *RequestRecord {
	rec := &RequestRecord{Request: n, Arrival: s.now, Worker: w.id, PromptTokens: prompt, Overlap: int(resp.GetOverlapBlocks())}
	home := -1
	for i, c := range resp.GetCandidates() {
		o := int(c.GetOverlapBlocks())
		if c.GetInstanceId() == w.id {
			rec.Cost = c.GetCost()
		}
		if home < 0 || o > rec.BestOverlap || (o == rec.BestOverlap && c.GetCost() < rec.HomeCost) {
			home, rec.BestOverlap, rec.Home, rec.HomeCost = i, o, c.GetInstanceId(), c.GetCost()
		}
	}
	id := strconv.Itoa(n)
	rec.QueuedTokens, rec.Decoding = engineState(w, id)
	for i, e := range s.engines {
		_, d := engineState(e, id)
		if i == 0 || d < rec.DecodingMin {
			rec.DecodingMin = d
		}
		rec.DecodingMax = max(rec.DecodingMax, d)
	}
	if home >= 0 {
		c := resp.GetCandidates()[home]
		if h := s.engineAt(c.GetInstanceId(), c.GetDpRank()); h != nil {
			rec.HomeQueuedTokens, rec.HomeDecoding = engineState(h, id)
		}
	}
	if w.busy {
		rec.StepLeft = w.stepEnd - s.now
	}
	rec.Wait = -1
	return rec
}

// bestOverlap is the most blocks of the request any candidate in resp
// caches, as the router saw them (0 when it lists none).
func bestOverlap(resp *routerv1.RouteResponse) int {
	best := 0
	for _, c := range resp.GetCandidates() {
		best = max(best, int(c.GetOverlapBlocks()))
	}
	return best
}

// engineState is the prompt tokens w still has to prefill and its
// requests past their prefill, request id aside.
func engineState(w *simEngine, id string) (queued, decoding int) {
	for _, r := range w.e.Metrics().Requests {
		if r.ID == id {
			continue
		}
		queued += r.PrefillTokens
		if r.DecodeBlocks > 0 {
			decoding++
		}
	}
	return queued, decoding
}

// engineAt is the engine of an instance and rank, nil if there is none.
func (s *sim) engineAt(instance uint64, rank uint32) *simEngine {
	i := (int(instance)-1)*s.cfg.ranks() + int(rank)
	if instance < 1 || int(rank) >= s.cfg.ranks() || i >= len(s.engines) {
		return nil
	}
	return s.engines[i]
}

func (s *sim) reject(err error) {
	s.res.Rejected++
	s.res.LastReject = err.Error()
	s.left--
}

// step runs one engine step and schedules its end.
func (s *sim) step(w *simEngine) {
	res := w.e.Step()
	if res.Duration == 0 && len(res.Outputs) == 0 && len(res.Events) == 0 {
		// Nothing could run (a prefill worker's blocks all held for
		// handoffs): the engine waits for a release or an arrival to
		// step it again, instead of stepping at this instant forever.
		w.busy = false
		return
	}
	w.busy, w.stepEnd = true, s.now+res.Duration
	if s.record && res.DecodeTokens > 0 && res.PrefillTokens > 0 && s.cfg.SlowGap > 0 && res.Duration > s.cfg.SlowGap {
		// Every request decoding in this step gets a slow gap: the
		// step's prompt chunks share them by their tokens.
		for _, c := range res.Chunks {
			if in := s.reqs[c.RequestID]; in != nil && in.rec != nil {
				in.rec.SlowGapsCaused += float64(res.DecodeTokens) * float64(c.Tokens) / float64(res.PrefillTokens)
			}
		}
	}
	if s.record {
		for _, id := range res.Admitted {
			// A pair is admitted twice, by its prefill and its decode
			// engine: its wait is for the first.
			if in := s.reqs[id]; in != nil && in.rec != nil && in.rec.Wait < 0 {
				in.rec.Wait = s.now - in.arrival
			}
		}
	}
	s.at(res.Duration, func() { s.stepped(w, res) })
}

// stepped is the end of a step: first tokens and finished requests are
// reported by the replica that routed them, KV events go out to every
// router after the event delay, and the engine goes on if it has work.
func (s *sim) stepped(w *simEngine, res simengine.StepResult) {
	w.busy = false
	for _, o := range res.Outputs {
		in := s.reqs[o.RequestID]
		if in == nil {
			continue
		}
		owner := s.routers[s.owner[o.RequestID]]
		if o.Finish == simengine.FinishHeld {
			s.handoff(w, in, o, owner)
			continue
		}
		if in.first && len(o.Tokens) > 0 {
			gap := s.now - in.lastToken
			s.itl = append(s.itl, gap)
			if in.rec != nil {
				in.rec.Gaps++
				in.rec.GapSum += gap
				if s.cfg.SlowGap > 0 && gap > s.cfg.SlowGap {
					in.rec.SlowGaps++
				}
			}
			in.lastToken = s.now
		}
		if !in.first && len(o.Tokens) > 0 {
			in.first, in.lastToken = true, s.now
			// The client sees the stream later by the request's
			// overhead, which no engine step pays.
			s.ttft = append(s.ttft, s.now-in.arrival+s.overhead)
			if in.rec != nil {
				in.rec.TTFT = s.now - in.arrival + s.overhead
				in.rec.Cached = o.Usage.CachedPromptTokens / s.cfg.Engine.BlockSize
			}
			if s.disagg != nil {
				s.disagg.firstOutput(in, o, s.cfg.Engine.BlockSize)
			}
			if !in.handedOff {
				owner.PrefillDone(o.RequestID)
			}
		}
		if o.Finish != simengine.FinishNone {
			s.e2e = append(s.e2e, s.now-in.arrival+s.overhead)
			if in.rec != nil {
				in.rec.E2E = s.now - in.arrival + s.overhead
				s.records = append(s.records, *in.rec)
			}
			owner.Free(o.RequestID)
			w.requests--
			delete(s.reqs, o.RequestID)
			delete(s.owner, o.RequestID)
			s.res.Completed++
			s.left--
			s.last = s.now
		}
	}
	if len(res.Pulled) > 0 {
		s.pulled(res.Pulled)
	}
	if len(res.Events) > 0 {
		b, err := simengine.BatchProto(w.id, w.rank, res.Events)
		if err == nil {
			s.at(s.cfg.EventDelay, func() {
				for _, c := range s.routers {
					c.ApplyEvents(b)
				}
			})
		}
	}
	if !w.e.Idle() {
		s.step(w)
	}
}

// reportLoad publishes every engine's load to every router, as workers do
// every LoadInterval, while requests remain.
func (s *sim) reportLoad() {
	if s.left <= 0 {
		return
	}
	at := s.clock()
	for _, w := range s.engines {
		m := w.e.Metrics().Proto(w.id, w.rank, at, s.cfg.Engine.Timing())
		s.at(s.cfg.EventDelay, func() {
			for _, c := range s.routers {
				c.ReportLoad(m)
			}
		})
	}
	s.at(s.cfg.LoadInterval, s.reportLoad)
}

// scrape hands every engine's metrics, as they are now, to a policy that
// polls them itself, every interval it asks for, while requests remain.
func (s *sim) scrape(sc scraper) {
	if s.left <= 0 {
		return
	}
	for _, w := range s.engines {
		sc.Scrape(w.id, w.e.Metrics())
	}
	s.at(sc.ScrapeInterval(), func() { s.scrape(sc) })
}

func percentiles(d []time.Duration) [3]time.Duration {
	if len(d) == 0 {
		return [3]time.Duration{}
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	return [3]time.Duration{at(0.50), at(0.90), at(0.99)}
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func spread(v []float64) float64 {
	sum, hi := 0.0, 0.0
	for _, x := range v {
		sum += x
		hi = max(hi, x)
	}
	if sum == 0 {
		return 0
	}
	return hi / (sum / float64(len(v)))
}

// RunAll replays every mode at every rate scale (cfg.RateScale is
// ignored), at most parallel simulations at once. Results are ordered by
// mode, then rate scale, as given.
func RunAll(trace []Request, cfg Config, modes []string, rates []float64, parallel int) ([]Result, error) {
	jobs := make([]job, 0, len(modes)*len(rates))
	for _, m := range modes {
		for _, r := range rates {
			jobs = append(jobs, job{mode: m, rate: r})
		}
	}
	return runJobs(trace, cfg, jobs, parallel)
}
