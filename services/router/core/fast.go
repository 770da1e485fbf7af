package core

import (
	"errors"
	"math"
	"slices"
	"sync/atomic"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// A decision over thousands of workers need not price every one: a worker
// that caches none of the request (no block in the index, on any tier, and
// none predicted) costs at least a bound that grows with its load
// (scheduler.NoOverlapBound, from the bounds a scheduler.Floor keeps per
// worker as the load record changes). A sparse decision prices:
//
//   - the workers that cache the most of the request (the index's
//     overlaps, every rank of their instances, extended by the
//     predictions, which can credit beyond the index only the workers the
//     request's first block is predicted on): the homes, whose number and
//     queues the credit of a copy of the shared prefix reads;
//   - the worker the request's session is bound to, which the session
//     rule may take whatever its cost;
//   - the worker with the least queue bound;
//   - then every worker whose bound, at what it caches, is not above the
//     cheapest cost priced so far (the floor finds those caching none
//     without visiting the others), again until none is added.
//
// Every worker left out then costs more than the cheapest priced one: the
// cheapest cost, the workers tied at it (in the same order, so the same
// draws break the tie) and so the choice are those of pricing every
// worker. What reads more than the choice is given what it reads: the
// saturation count walks the workers in order and fills each one it
// reaches that was not priced (it stops at MaxRoom requests, at once below
// saturation), the arrival rate and the shared prefix count every worker.
// Where a part reads every worker's cost, the decision prices them all:
// a candidate list asked for (omit_candidates unset), a sampled choice
// (temperature above 0), the spread over the peer replicas' unheard
// decisions, modes other than kv, a disaggregated model's pairs, excluded
// instances, an explanation (ExplainRoute), a zero overlap weight (every
// queue free), a timing model with a coefficient below zero (the bound
// assumes none), and fleets smaller than sparseMinCandidates, where
// pricing them all is as cheap. The decision is the full one for the load
// record as it stands while the decision is made; a change racing with it
// (a report, another decision's request) may be seen or not, as by a full
// decision made a moment earlier or later.

// sparseMinCandidates is the fewest candidates a decision prices sparsely:
// below a few hundred, pricing every worker (~170 ns each) is as quick as
// finding those that can win.
const sparseMinCandidates = 512

// maxSparseLens bounds the lengths of the overlaps whose first uncached
// block a sparse decision looks up in the predictions; past it, the
// decision prices every candidate.
const maxSparseLens = 16

// maxSparsePasses bounds the rounds of adding workers under the bound:
// each round adds at least one, and a decision that keeps finding more
// prices them all instead.
const maxSparsePasses = 4

// errNotSparse makes a sparse decision give way to a full one.
var errNotSparse = errors.New("decision needs every candidate priced")

// sparseEligible says whether q may be decided sparsely over n
// candidates of an aggregated model (see the list above).
func (c *Core) sparseEligible(q query, n int) bool {
	if n < c.sparseMin || !q.omit || q.dryRun || c.comp.named {
		return false
	}
	if _, ok := c.comp.choose.(byCost); !ok || c.comp.cost != &scheduler.KV {
		return false
	}
	temperature, weight := c.temperature, c.weight
	if q.temperature != nil {
		temperature = *q.temperature
	}
	if q.weight != nil {
		weight = *q.weight
	}
	return temperature <= 0 && weight > 0
}

// targetLocked is q's cached candidates, if current.
func (c *Core) targetLocked(q query) *targetCands {
	key := targetKey{lora: q.lora}
	switch k := q.target.GetKind().(type) {
	case *routerv1.Target_Endpoint:
		key.ep = endpointKey{k.Endpoint.GetNamespace(), k.Endpoint.GetComponent(), k.Endpoint.GetEndpoint()}
	case *routerv1.Target_Model:
		key.model = k.Model
	}
	tc, ok := c.targets[key]
	if !ok || tc.gen != c.gen {
		return nil
	}
	if tc.floor == nil {
		models := make([]*timingmodel.Model, len(tc.cands))
		for i := range tc.cands {
			models[i] = tc.cands[i].timing
		}
		tc.floor = scheduler.NewFloor(tc.workers, models, tc.bs)
		tc.first = make(map[uint64]int, len(tc.workers))
		for i := len(tc.workers) - 1; i >= 0; i-- {
			tc.first[tc.workers[i].Instance] = i
		}
	}
	return tc
}

// evaluateSparse decides q pricing only the candidates that can win;
// nil (and no error) when it cannot, and the caller prices them all.
func (c *Core) evaluateSparse(q query) (*decision, error) {
	c.mu.Lock()
	tc := c.targetLocked(q)
	if tc == nil {
		c.mu.Unlock()
		return nil, nil
	}
	f := tc.floor
	c.load.Sync(f, c.timingVer)
	valid, perToken, least := f.Valid(), f.PerToken(), f.Min()
	c.mu.Unlock()
	if !valid {
		return nil, nil
	}
	cands, workers, bs := tc.cands, tc.workers, tc.bs
	n := len(cands)
	d := decisionPool.Get().(*decision)
	d.prefill, d.disagg, d.pools, d.priced = -1, "", nil, -1
	d.saturated, d.room, d.leftEarliest, d.keptWithin = false, 0, false, false
	hashes := c.hashesOf(d, q, bs)
	now := c.expireAged()
	// The index lists the workers caching the most and the few at each
	// length; the many at one length (a shared system prompt's holders)
	// it keeps as a group, asked for the workers priced only.
	d.grouped.Overlaps, d.grouped.GroupAll = d.overlaps[:0], c.groupAll
	c.idx.Lookup(&d.grouped, hashes)
	d.overlaps = d.grouped.Overlaps
	// An instance's first position is looked up in a map: a decision
	// has hundreds or thousands of overlaps, in no order, and a binary
	// search of thousands of workers is a cache miss per step.
	first := tc.first
	addInstance := func(to []int, id uint64) []int {
		i, ok := first[id]
		if !ok {
			return to
		}
		for ; i < n && workers[i].Instance == id; i++ {
			to = append(to, i)
		}
		return to
	}
	// What each worker caches is what the index says, except for the
	// workers the predictions extend: those predicted on the block where
	// the index stops for them, one of the few lengths the overlaps have
	// (or the first block, for the workers the index credits with none).
	// They are located and extended as prepare does (extended, every
	// rank of their instances); the others are not located at all.
	d.lens = append(d.lens[:0], 0)
	most := 0
	for _, l := range d.grouped.Levels {
		most = max(most, l.Blocks)
		if len(d.lens) < maxSparseLens {
			d.lens = append(d.lens, l.Blocks)
		}
	}
	extended := d.extended[:0]
	if c.pending != nil && !c.pending.Empty() {
		if len(d.lens) == maxSparseLens {
			// Too many lengths to look up each: price them all.
			d.release()
			return nil, nil
		}
		d.held = d.held[:0]
		for _, at := range d.lens {
			if at < len(hashes) {
				d.held = c.pending.AppendWorkersOn(d.held, hashes, at)
			}
		}
		for _, w := range d.held {
			extended = addInstance(extended, w.Instance)
		}
		slices.Sort(extended)
		extended = slices.Compact(extended)
	}
	d.subWorkers = d.subWorkers[:0]
	for _, i := range extended {
		d.subWorkers = append(d.subWorkers, workers[i])
	}
	ext := slices.Grow(d.reach[:0], len(extended))[:len(extended)]
	clear(ext)
	if len(extended) > 0 {
		setIndexed(ext, nil, d.subWorkers, overlapsOf(d, d.subWorkers, c.rankBlind), c.rankBlind)
		c.pending.ExtendAll(d.subWorkers, hashes, ext)
	}
	for _, r := range ext {
		most = max(most, r)
	}
	d.extended, d.reach = extended, ext
	// Priced from the start: the workers caching the most (the homes,
	// whose count and queues the shared prefix's credit reads: every
	// rank of their instances), the session's worker, the worker with the
	// least queue. Every other worker caches at most second blocks. The
	// index lists every worker of its longest overlap.
	pos := d.pos[:0]
	second := 0
	if most > 0 {
		for _, o := range d.overlaps {
			if o.Blocks == most {
				pos = addInstance(pos, o.Worker.Instance)
			}
		}
		for _, l := range d.grouped.Levels {
			if l.Blocks != most {
				second = max(second, l.Blocks)
			}
		}
		for k, i := range extended {
			if ext[k] == most {
				pos = append(pos, i)
			} else {
				second = max(second, ext[k])
			}
		}
	}
	if w, ok := c.sessions.peek(q.session); ok {
		pos = addInstance(pos, w.Instance)
	}
	if least >= 0 {
		pos = append(pos, least)
	}
	for pass := 0; ; pass++ {
		slices.Sort(pos)
		pos = slices.Compact(pos)
		if pass == maxSparsePasses {
			d.pos = pos
			d.release()
			return nil, nil
		}
		d.sub, d.subWorkers = d.sub[:0], d.subWorkers[:0]
		for _, i := range pos {
			d.sub = append(d.sub, cands[i])
			d.subWorkers = append(d.subWorkers, workers[i])
		}
		// prepare reads the overlaps of the workers it prices only.
		all := d.overlaps
		d.overlaps = overlapsOf(d, d.subWorkers, c.rankBlind)
		c.prepareOver(d, q, d.sub, d.subWorkers, bs, hashes, n, now)
		d.overlaps = all
		c.comp.cost.Price(d.scored, d.req, d.params)
		best := math.Inf(1)
		for i := range d.scored {
			best = min(best, d.scored[i].Cost)
		}
		// Every worker not priced caches second blocks or fewer, and
		// costs at least the bound of caching second (a worker caching
		// fewer costs at least as much: see CostBound).
		credit := scheduler.MaxSeedCredit(d.scored, d.req)
		perAhead, perDecoding, base, ok := scheduler.CostBound(d.req, d.params, perToken, credit, second)
		if !ok || math.IsNaN(best) || math.IsInf(best, 0) || math.IsNaN(base) || math.IsInf(base, 0) {
			d.pos = pos
			d.release()
			return nil, nil
		}
		// Under a bound by rounding alone counts as under: a worker
		// left out must cost more than best, not as much.
		slack := 1e-9 * (math.Abs(best) + math.Abs(base) + 1)
		had := len(pos)
		c.mu.Lock()
		c.load.Sync(f, c.timingVer)
		pos = f.Below(pos, perAhead, perDecoding, best-base+slack)
		c.mu.Unlock()
		slices.Sort(pos)
		if pos = slices.Compact(pos); len(pos) == had {
			break
		}
	}
	d.pos, d.sparse, d.all, d.allWorkers, d.first = pos, true, cands, workers, first
	d.holders, d.holderReach, d.scans = nil, nil, 0
	err := c.decide(d)
	if errors.Is(err, errNotSparse) {
		d.release()
		return nil, nil
	}
	if err != nil {
		d.release()
		return nil, err
	}
	c.sparse.decisions.Add(1)
	if d.grouped.Grouped() {
		c.sparse.grouped.Add(1)
	}
	c.sparse.priced.Add(uint64(len(pos)))
	c.sparse.candidates.Add(uint64(n))
	return d, nil
}

// sparseCounts count sparse decisions, the candidates they priced and
// those they had, and the decisions whose lookup kept groups.
type sparseCounts struct{ decisions, priced, candidates, grouped atomic.Uint64 }

// overlapsOf is the overlaps of d's request of the instances of workers
// (sorted by instance), in d's buffer: what prepare reads of them, each
// rank's listed and, of those the index grouped, each worker's (every
// rank's with anyRank, for the rank-blind maximum). A request cached on
// thousands of workers has as many overlaps, and prepare reads them per
// pass.
func overlapsOf(d *decision, workers []index.WorkerID, anyRank bool) []index.Overlap {
	d.insts = d.insts[:0]
	for _, w := range workers {
		if len(d.insts) == 0 || d.insts[len(d.insts)-1] != w.Instance {
			d.insts = append(d.insts, w.Instance)
		}
	}
	d.subOverlaps = d.subOverlaps[:0]
	for _, o := range d.overlaps {
		if _, ok := slices.BinarySearch(d.insts, o.Worker.Instance); ok {
			d.subOverlaps = append(d.subOverlaps, o)
		}
	}
	d.subOverlaps = d.grouped.Append(d.subOverlaps, workers, anyRank)
	return d.subOverlaps
}

// reachAt is what the worker at position i of a sparse decision d caches
// of the request, as prepare finds it: the predictions' extension for the
// workers the decision located (d.extended), else the index's overlap,
// listed or in a group. The first few are found by a pass over the listed
// overlaps; past them (the saturation count walking many workers) every
// worker listed is located at once.
func (c *Core) reachAt(d *decision, i int) int {
	if k, ok := slices.BinarySearch(d.extended, i); ok {
		return d.reach[k]
	}
	w := d.allWorkers[i]
	return max(c.listedReach(d, i, w), d.grouped.Blocks(w, c.rankBlind))
}

// listedReach is the most blocks the index's listed overlaps credit the
// worker w at position i of d with (see reachAt).
func (c *Core) listedReach(d *decision, i int, w index.WorkerID) int {
	if d.scans < maxReachScans {
		d.scans++
		blocks := 0
		for _, o := range d.overlaps {
			if o.Worker == w || c.rankBlind && o.Worker.Instance == w.Instance {
				blocks = max(blocks, o.Blocks)
			}
		}
		return blocks
	}
	if d.holders == nil {
		n := len(d.allWorkers)
		d.holders = []int{}
		for _, o := range d.overlaps {
			if k, ok := d.first[o.Worker.Instance]; ok {
				for ; k < n && d.allWorkers[k].Instance == o.Worker.Instance; k++ {
					d.holders = append(d.holders, k)
				}
			}
		}
		slices.Sort(d.holders)
		d.holders = slices.Compact(d.holders)
		located := make([]index.WorkerID, len(d.holders))
		for j, k := range d.holders {
			located[j] = d.allWorkers[k]
		}
		d.holderReach = make([]int, len(d.holders))
		setIndexed(d.holderReach, nil, located, d.overlaps, c.rankBlind)
	}
	if k, ok := slices.BinarySearch(d.holders, i); ok {
		return d.holderReach[k]
	}
	return 0
}

// maxReachScans is how many workers reachAt finds by a pass over the
// overlaps before it locates them all.
const maxReachScans = 8

// roomSparse is scheduler.Limits.RoomOfEach over every candidate of a
// sparse decision d, in order: the priced ones as priced, each other one filled
// when reached, with what it caches. Under c.mu (the timing models are
// read).
func (c *Core) roomSparse(d *decision, req, typical scheduler.Request, chosen int, l scheduler.Limits) int {
	j := 0
	var other scheduler.Candidate
	return l.RoomOfEach(len(d.all), func(i int) (*scheduler.Candidate, bool) {
		for j < len(d.pos) && d.pos[j] < i {
			j++
		}
		if j < len(d.pos) && d.pos[j] == i {
			return &d.scored[j], j == chosen
		}
		other = scheduler.Candidate{Worker: d.allWorkers[i], Timing: *d.all[i].timing, Overlap: c.reachAt(d, i)}
		c.load.Fill(&other, d.blockSize)
		if k, ok := slices.BinarySearch(d.extended, i); ok && d.reach[k] > 0 {
			// Predicted blocks count where computed in time, as prepare
			// finds them (scheduler.Load.FillComputed).
			w := d.allWorkers[i]
			indexed := max(c.listedReach(d, i, w), d.grouped.Blocks(w, c.rankBlind))
			c.load.FillComputedOne(&other, d.hashes, indexed, d.blockSize)
		}
		return &other, false
	}, req, typical, MaxRoom)
}

// SparseStats are how many decisions priced only the candidates that could
// win, how many candidates they priced and how many they had, since the
// core started.
func (c *Core) SparseStats() (decisions, priced, candidates uint64) {
	return c.sparse.decisions.Load(), c.sparse.priced.Load(), c.sparse.candidates.Load()
}
