package replay

import (
	"math"
	"math/rand/v2"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// The peer policies: what Dynamo's, llm-d's and SGLang's routers would
// decide with the same requests, on the same simulated engines, from the
// same KV events (after the same delay) as the router's kv mode. Each is
// the peer's published default policy, reimplemented from its formula (no
// code of theirs is copied); the version read is named on each type. They
// live here, beside the replay, and not in the router's core: they are
// yardsticks for the router, not routing modes it serves. Each keeps its
// own state, behind the same interface the replay drives the router's
// Core through (router), because each peer's state differs in kind from
// the core's (Dynamo's own record of active sequences, llm-d's scraped
// engine metrics, SGLang's in-flight counts) and none is a cost term over
// the core's candidates.

// router is what the replay drives: the router's Core, or a peer policy.
type router interface {
	Route(*routerv1.RouteRequest) (*routerv1.RouteResponse, error)
	PrefillDone(id string)
	Free(id string)
	ApplyEvents(*workerv1.KvEventBatch)
	ReportLoad(*workerv1.LoadMetrics)
}

// scraper is a policy that reads the engines' metrics itself, every
// ScrapeInterval of virtual time (llm-d's endpoint picker polls each
// pod's metrics endpoint), instead of the workers' load reports.
type scraper interface {
	ScrapeInterval() time.Duration
	Scrape(instance uint64, m simengine.Metrics)
}

// peerModes are the peer policies' mode names.
var peerModes = []string{"dynamo", "llm-d", "sglang"}

// newPeer builds a peer policy over workers instances 1..workers.
func newPeer(mode string, workers, blockSize int, seed uint64) router {
	base := newPeerBase(workers, blockSize, seed)
	switch mode {
	case "dynamo":
		return newDynamo(base)
	case "llm-d":
		return newLLMD(base)
	case "sglang":
		return newSGLang(base)
	}
	return nil
}

// peerBase is what every peer policy shares: the workers, the KV index fed
// by the workers' events (the same index type as the router's, so overlaps
// are counted the same way), the request's block hashes and a seeded
// random source for ties.
type peerBase struct {
	workers []index.WorkerID // sorted by instance id, instance i+1 at i
	bs      int
	idx     *index.Index
	rng     *rand.Rand
	// Per-decision buffers.
	blocks   []kvhash.Block
	overlaps []index.Overlap
	overlap  []int
}

func newPeerBase(workers, blockSize int, seed uint64) *peerBase {
	p := &peerBase{bs: blockSize, idx: index.New(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := range workers {
		p.workers = append(p.workers, index.WorkerID{Instance: uint64(i + 1)})
	}
	p.overlap = make([]int, workers)
	return p
}

// ApplyEvents applies one worker's batch of KV events to the index, as the
// router's core does (duplicates and late events dropped).
func (p *peerBase) ApplyEvents(b *workerv1.KvEventBatch) {
	if b == nil {
		return
	}
	w := index.WorkerID{Instance: b.GetInstanceId(), DPRank: b.GetDpRank()}
	for i, ev := range b.GetEvents() {
		id := uint64(0)
		if b.GetFirstEventId() != 0 {
			id = b.GetFirstEventId() + uint64(i)
		}
		p.idx.Apply(w, id, func(tx index.Tx) {
			switch k := ev.GetEvent().(type) {
			case *workerv1.KvCacheEvent_Stored:
				hashes := make([]uint64, len(k.Stored.GetBlocks()))
				for i, b := range k.Stored.GetBlocks() {
					hashes[i] = b.GetSequenceHash()
				}
				tx.Store(hashes)
			case *workerv1.KvCacheEvent_Removed:
				tx.Remove(k.Removed.GetSequenceHashes())
			case *workerv1.KvCacheEvent_Cleared:
				tx.Clear()
			}
		})
	}
}

// hashes are the sequence hashes of the request's full blocks, and
// p.overlap each worker's cached prefix of them, in blocks, from the index.
func (p *peerBase) hashes(tokens []uint32) []uint64 {
	p.blocks = kvhash.Hashes(tokens, p.bs, p.blocks[:0])
	hashes := make([]uint64, len(p.blocks))
	for i, b := range p.blocks {
		hashes[i] = b.Sequence
	}
	clear(p.overlap)
	p.overlaps = p.idx.AppendOverlaps(p.overlaps[:0], hashes)
	for _, o := range p.overlaps {
		if o.Worker.DPRank == 0 && o.Worker.Instance >= 1 && int(o.Worker.Instance) <= len(p.overlap) {
			p.overlap[o.Worker.Instance-1] = o.Blocks
		}
	}
	return hashes
}

// response is the route response for worker chosen, listing every
// worker's overlap and cost (what the replay's request records read).
func (p *peerBase) response(chosen int, blocks int, cost []float64) *routerv1.RouteResponse {
	resp := &routerv1.RouteResponse{InstanceId: p.workers[chosen].Instance, OverlapBlocks: uint32(p.overlap[chosen]),
		RequestBlocks: uint32(blocks)}
	msgs := make([]routerv1.Candidate, len(p.workers))
	for i, w := range p.workers {
		msgs[i] = routerv1.Candidate{InstanceId: w.Instance, OverlapBlocks: uint32(p.overlap[i]), Cost: cost[i]}
		resp.Candidates = append(resp.Candidates, &msgs[i])
	}
	return resp
}

// argmin is the position of the least of v, uniformly at random among
// equals (Dynamo's temperature-0 pick).
func (p *peerBase) argmin(v []float64) int {
	best, ties := 0, 0
	for i, x := range v {
		switch {
		case x < v[best] || ties == 0:
			best, ties = i, 1
		case x == v[best]:
			ties++
			if p.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// argmax is the position of the greatest of v, uniformly at random among
// equals (llm-d's max-score picker shuffles, then sorts stably).
func (p *peerBase) argmax(v []float64) int {
	neg := make([]float64, len(v))
	for i, x := range v {
		neg[i] = -x
	}
	return p.argmin(neg)
}

// dynamo is Dynamo's default KV router (DefaultWorkerSelector, read at
// ai-dynamo/dynamo lib/kv-router/src/scheduling/selector/default.rs, file
// version 07a6c9ce, and its active-sequence tracking in
// lib/kv-router/src/sequences). For each worker, with the request's ISL in
// tokens and the index's device overlap in blocks:
//
//	raw_prefill_blocks = (active prefill tokens + ISL) / block size
//	prefill           = prefill_load_scale x max(0, raw_prefill_blocks - overlap_score_credit x overlap)
//	decode            = active blocks + the request's blocks not already active there
//	cost              = prefill + decode + decode_active_request_weight x active requests
//
// with the defaults prefill_load_scale 1, overlap_score_credit 1 (its
// credit decay 0), decode_active_request_weight 0 and temperature 0: the
// least cost, uniformly at random among equal costs. Its own record of
// each worker's active sequences: a routed request adds its uncached
// prompt tokens (ISL minus the overlap) to the worker's active prefill
// tokens and its full blocks to the worker's active blocks (counted once
// per worker however many requests share them); its first token removes
// its prefill tokens; its end frees its blocks. Docs and code differ: the
// router docs still describe a two-term logit (overlap_score_weight x
// prefill blocks + decode blocks) and the `--kv-overlap-score-weight`
// flag; the code has the three-term cost with the overlap as a credit
// clamped at zero, which is what this follows. The workers' load reports
// are not used (Dynamo's busy threshold, which reads them, is off by
// default); host, disk and shared-cache tiers are absent here (one device
// tier per engine).
type dynamo struct {
	*peerBase
	prefillLoadScale, overlapCredit, activeRequestWeight float64
	prefill                                              []int              // active prefill tokens per worker
	blocks                                               []map[uint64]int32 // active blocks per worker, with their request counts
	active                                               []int              // active requests per worker
	seqs                                                 map[string]*dynamoSeq
	cost                                                 []float64
}

type dynamoSeq struct {
	w       int
	prefill int
	hashes  []uint64
}

func newDynamo(b *peerBase) *dynamo {
	n := len(b.workers)
	d := &dynamo{peerBase: b, prefillLoadScale: 1, overlapCredit: 1, prefill: make([]int, n),
		blocks: make([]map[uint64]int32, n), active: make([]int, n), seqs: map[string]*dynamoSeq{}, cost: make([]float64, n)}
	for i := range d.blocks {
		d.blocks[i] = map[uint64]int32{}
	}
	return d
}

// costs sets d.cost for a request of isl tokens and full-block hashes.
func (d *dynamo) costs(isl int, hashes []uint64) {
	bs := float64(d.bs)
	for i := range d.workers {
		raw := float64(d.prefill[i]+isl) / bs
		prefill := d.prefillLoadScale * math.Max(0, raw-d.overlapCredit*float64(d.overlap[i]))
		fresh := 0
		for _, h := range hashes {
			if d.blocks[i][h] == 0 {
				fresh++
			}
		}
		decode := float64(len(d.blocks[i]) + fresh)
		d.cost[i] = prefill + decode + d.activeRequestWeight*float64(d.active[i])
	}
}

func (d *dynamo) Route(r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	hashes := d.hashes(r.TokenIds)
	isl := len(r.TokenIds)
	d.costs(isl, hashes)
	w := d.argmin(d.cost)
	seq := &dynamoSeq{w: w, prefill: max(0, isl-d.overlap[w]*d.bs), hashes: hashes}
	d.seqs[r.RequestId] = seq
	d.prefill[w] += seq.prefill
	for _, h := range hashes {
		d.blocks[w][h]++
	}
	d.active[w]++
	return d.response(w, len(hashes), d.cost), nil
}

func (d *dynamo) PrefillDone(id string) {
	if s := d.seqs[id]; s != nil {
		d.prefill[s.w] -= s.prefill
		s.prefill = 0
	}
}

func (d *dynamo) Free(id string) {
	s := d.seqs[id]
	if s == nil {
		return
	}
	d.PrefillDone(id)
	for _, h := range s.hashes {
		if d.blocks[s.w][h]--; d.blocks[s.w][h] <= 0 {
			delete(d.blocks[s.w], h)
		}
	}
	d.active[s.w]--
	delete(d.seqs, id)
}

func (d *dynamo) ReportLoad(*workerv1.LoadMetrics) {}

// llmdScrapeInterval is how often llm-d's endpoint picker refreshes each
// pod's metrics (the inference extension's refresh-metrics-interval
// default, 50 ms): the queue and KV-cache figures it scores are up to
// that old.
const llmdScrapeInterval = 50 * time.Millisecond

// llmD is llm-d's endpoint picker with the scheduling profile of its Helm
// guide for precise prefix-cache routing (llm-d/llm-d
// guides/precise-prefix-cache-aware/gaie-kv-events/values.yaml, which runs
// llm-d-inference-scheduler v0.5.0 on gateway-api-inference-extension
// v1.3.0 and llm-d-kv-cache v0.5.0; read at those tags): three scorers,
// summed with weights, and the max-score picker.
//   - precise-prefix-cache-scorer, weight 3: each pod's longest run of
//     consecutive cached blocks from the prompt's start, from the KV
//     events (tier weight 1 for GPU blocks, the only tier here); only pods
//     holding the first block have a score, which is normalised min-max
//     over them ((s - min) / (max - min), 1 when they are all equal); the
//     others score 0. (Its main branch, after v0.8.0, divides by the
//     prompt's blocks instead; the released scorer is followed here.)
//   - queue-scorer, weight 2: (max - q) / (max - min) of the pods' waiting
//     queue lengths, 1 for all when they are equal.
//   - kv-cache-utilization-scorer, weight 2: 1 - the pod's KV-cache usage
//     (blocks held by running requests over its blocks).
//
// The picker takes the highest total, uniformly at random among equals.
// The queue and usage come from each engine's metrics scraped every 50 ms
// (stale by up to that), not from the router's own record. The profile has
// no prefix-cache affinity filter. The sample EndpointPickerConfig in the
// scheduler's own repository weights the scorers 2 / 1 / 1; the Helm
// guide's 3 / 2 / 2 is what a deployment gets and what this follows.
type llmD struct {
	*peerBase
	wPrefix, wQueue, wKV float64
	waiting              []int
	usage                []float64
	score                []float64
}

func newLLMD(b *peerBase) *llmD {
	n := len(b.workers)
	return &llmD{peerBase: b, wPrefix: 3, wQueue: 2, wKV: 2, waiting: make([]int, n), usage: make([]float64, n), score: make([]float64, n)}
}

func (l *llmD) ScrapeInterval() time.Duration { return llmdScrapeInterval }

func (l *llmD) Scrape(instance uint64, m simengine.Metrics) {
	i := int(instance) - 1
	if i < 0 || i >= len(l.waiting) {
		return
	}
	l.waiting[i] = m.Waiting
	if m.KVBlocksTotal > 0 {
		l.usage[i] = float64(m.KVBlocksUsed) / float64(m.KVBlocksTotal)
	}
}

// scores sets l.score from p.overlap and the last scrape.
func (l *llmD) scores() {
	lo, hi := math.MaxInt, 0
	for _, o := range l.overlap {
		if o > 0 {
			lo, hi = min(lo, o), max(hi, o)
		}
	}
	qlo, qhi := math.MaxInt, math.MinInt
	for _, q := range l.waiting {
		qlo, qhi = min(qlo, q), max(qhi, q)
	}
	for i := range l.workers {
		prefix := 0.0
		if o := l.overlap[i]; o > 0 {
			prefix = 1
			if hi > lo {
				prefix = float64(o-lo) / float64(hi-lo)
			}
		}
		queue := 1.0
		if qhi > qlo {
			queue = float64(qhi-l.waiting[i]) / float64(qhi-qlo)
		}
		l.score[i] = l.wPrefix*prefix + l.wQueue*queue + l.wKV*(1-l.usage[i])
	}
}

func (l *llmD) Route(r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	hashes := l.hashes(r.TokenIds)
	l.scores()
	w := l.argmax(l.score)
	return l.response(w, len(hashes), l.score), nil
}

func (l *llmD) PrefillDone(string)               {}
func (l *llmD) Free(string)                      {}
func (l *llmD) ReportLoad(*workerv1.LoadMetrics) {}

// sglang is SGLang's cache-aware policy (sgl-project/sglang
// sgl-model-gateway/src/policies/cache_aware.rs, file version b93974f1;
// defaults from its PolicyConfig::CacheAware: cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5) in its event-driven
// form: the prefix match is read from the workers' KV events, through the
// same index as kv, instead of its approximate radix tree of routed text.
// Its load is its own count of each worker's in-flight requests (up at
// routing, down at the request's end). When the counts are imbalanced
// (max - min > 64 and max > 1.5 x min) it takes the least-loaded worker;
// otherwise the worker with the longest cached prefix if that prefix is
// more than 0.3 of the prompt (in blocks; the tree counts characters),
// uniformly at random among equal matches (the tree takes its node's first
// tenant in hash order); else the least-loaded worker. The least-loaded is
// the first (lowest instance) among equals, as Rust's min_by_key takes.
// Docs and code differ twice: the file's own header and the router's
// README say a match at or below the threshold goes to the worker with the
// smallest tree, while the code takes the least-loaded; and the old
// router's README gives cache_threshold 0.5 as the default, while the code's
// default is 0.3. This follows the code.
type sglang struct {
	*peerBase
	absThreshold   int
	relThreshold   float64
	cacheThreshold float64
	load           []int
	owner          map[string]int
	score          []float64
}

func newSGLang(b *peerBase) *sglang {
	n := len(b.workers)
	return &sglang{peerBase: b, absThreshold: 64, relThreshold: 1.5, cacheThreshold: 0.3, load: make([]int, n),
		owner: map[string]int{}, score: make([]float64, n)}
}

// choose picks a worker for a request of blocks full blocks, from
// s.overlap and s.load.
func (s *sglang) choose(blocks int) int {
	lo, hi := math.MaxInt, 0
	least := 0
	for i, l := range s.load {
		if l < lo {
			lo, least = l, i
		}
		hi = max(hi, l)
	}
	if hi-lo > s.absThreshold && float64(hi) > float64(lo)*s.relThreshold {
		return least
	}
	best := 0
	for _, o := range s.overlap {
		best = max(best, o)
	}
	if blocks == 0 || float64(best)/float64(blocks) <= s.cacheThreshold {
		return least
	}
	// Uniformly at random among the longest matches.
	pick, ties := 0, 0
	for i, o := range s.overlap {
		if o == best {
			ties++
			if s.rng.IntN(ties) == 0 {
				pick = i
			}
		}
	}
	return pick
}

func (s *sglang) Route(r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	hashes := s.hashes(r.TokenIds)
	w := s.choose(len(hashes))
	s.load[w]++
	s.owner[r.RequestId] = w
	for i, l := range s.load {
		s.score[i] = float64(l)
	}
	return s.response(w, len(hashes), s.score), nil
}

func (s *sglang) Free(id string) {
	if w, ok := s.owner[id]; ok {
		s.load[w]--
		delete(s.owner, id)
	}
}

func (s *sglang) PrefillDone(string)               {}
func (s *sglang) ReportLoad(*workerv1.LoadMetrics) {}

// peerSeed is a peer's random seed from the run's.
func peerSeed(seed uint64, mode string) uint64 {
	h := seed*1000 + 1
	for _, c := range mode {
		h = h*31 + uint64(c)
	}
	return h
}
