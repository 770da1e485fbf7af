package replay

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/mocker/engine"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Modes are the routing modes a replay compares, in table order.
var Modes = []string{"round-robin", "random", "least-loaded", "kv", "kv-approx", "kv-3-replicas", "kv-8-replicas", "kv-3-replicas-nosync"}

// policy is a router as the simulation sees it.
type policy interface {
	// route picks a worker for a request with these block hashes.
	route(id string, blocks []kvhash.Block, now time.Duration) int
	// events delivers a worker's KV events.
	events(worker int, evs []engine.Event)
	// prefillDone and free report a request's progress.
	prefillDone(id string)
	free(id string)
}

func workerID(i int) index.WorkerID { return index.WorkerID{Instance: uint64(i + 1)} }

func newPolicy(mode string, cfg Config, rng *rand.Rand) (policy, error) {
	switch mode {
	case "round-robin":
		return &roundRobin{n: cfg.Workers}, nil
	case "random":
		return &random{n: cfg.Workers, rng: rng}, nil
	case "least-loaded":
		return &leastLoaded{n: cfg.Workers, load: scheduler.NewLoad(), rng: rng, blocks: map[string]int{}}, nil
	case "kv":
		return newKV(cfg, rng, false), nil
	case "kv-approx":
		return newKV(cfg, rng, true), nil
	case "kv-3-replicas", "kv-8-replicas", "kv-3-replicas-nosync":
		r := &replicas{sync: mode != "kv-3-replicas-nosync", owner: map[string]int{}}
		n := 3
		if mode == "kv-8-replicas" {
			n = 8
		}
		for range n {
			r.routers = append(r.routers, newKV(cfg, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), false))
		}
		return r, nil
	}
	return nil, fmt.Errorf("replay: unknown mode %q", mode)
}

type roundRobin struct{ n, next int }

func (r *roundRobin) route(string, []kvhash.Block, time.Duration) int {
	i := r.next
	r.next = (r.next + 1) % r.n
	return i
}
func (*roundRobin) events(int, []engine.Event) {}
func (*roundRobin) prefillDone(string)         {}
func (*roundRobin) free(string)                {}

type random struct {
	n   int
	rng *rand.Rand
}

func (r *random) route(string, []kvhash.Block, time.Duration) int { return r.rng.IntN(r.n) }
func (*random) events(int, []engine.Event)                        {}
func (*random) prefillDone(string)                                {}
func (*random) free(string)                                       {}

// leastLoaded sends each request to the worker with the fewest blocks in
// flight (prefill and decode), ignoring caches.
type leastLoaded struct {
	n      int
	load   *scheduler.Load
	rng    *rand.Rand
	blocks map[string]int
}

func (l *leastLoaded) route(id string, blocks []kvhash.Block, _ time.Duration) int {
	cands := make([]scheduler.Candidate, l.n)
	for i := range cands {
		p, d, _ := l.load.Of(workerID(i))
		cands[i] = scheduler.Candidate{Worker: workerID(i), PrefillBlocks: p, DecodeBlocks: d}
	}
	// Weight 1 and no overlap: cost = request + pending prefill + decode.
	i, _ := scheduler.Select(cands, 0, scheduler.Params{OverlapWeight: 1}, l.rng)
	hashes := make([]uint64, len(blocks))
	for j, b := range blocks {
		hashes[j] = b.Sequence
	}
	l.load.Add(id, workerID(i), len(blocks), hashes)
	return i
}
func (*leastLoaded) events(int, []engine.Event) {}
func (l *leastLoaded) prefillDone(id string)    { l.load.PrefillDone(id) }
func (l *leastLoaded) free(id string)           { l.load.Free(id) }

// kvRouter is the router's KV mode: overlaps from the index (fed by events,
// or by its own decisions when approximate), load from its decisions.
type kvRouter struct {
	n      int
	idx    *index.Index
	approx *index.Approx
	load   *scheduler.Load
	params scheduler.Params
	rng    *rand.Rand
	hashes []uint64
	cands  []scheduler.Candidate
	ovl    []index.Overlap
}

func newKV(cfg Config, rng *rand.Rand, approximate bool) *kvRouter {
	k := &kvRouter{n: cfg.Workers, load: scheduler.NewLoad(), rng: rng,
		params: scheduler.Params{OverlapWeight: cfg.OverlapWeight, Temperature: cfg.Temperature}}
	if approximate {
		k.approx = index.NewApprox(index.ApproxConfig{TTL: cfg.ApproxTTL, MaxEntries: cfg.ApproxMaxEntries, PruneTargetRatio: 0.8})
		k.idx = k.approx.Index()
	} else {
		k.idx = index.New()
	}
	return k
}

func virtual(now time.Duration) time.Time { return time.Unix(0, 0).Add(now) }

// decide picks a worker without recording the decision.
func (k *kvRouter) decide(blocks []kvhash.Block, now time.Duration) int {
	k.hashes = k.hashes[:0]
	for _, b := range blocks {
		k.hashes = append(k.hashes, b.Sequence)
	}
	if k.approx != nil {
		k.approx.Expire(virtual(now))
	}
	k.ovl = k.idx.AppendOverlaps(k.ovl[:0], k.hashes)
	k.cands = k.cands[:0]
	for i := range k.n {
		p, d, _ := k.load.Of(workerID(i))
		k.cands = append(k.cands, scheduler.Candidate{Worker: workerID(i), PrefillBlocks: p, DecodeBlocks: d})
	}
	for _, o := range k.ovl {
		k.cands[o.Worker.Instance-1].Overlap = o.Blocks
	}
	i, _ := scheduler.Select(k.cands, len(blocks), k.params, k.rng)
	return i
}

// record applies a decision to the load (and, approximate, the index).
func (k *kvRouter) record(id string, w int, blocks []kvhash.Block, overlap int, now time.Duration) { // k.hashes holds blocks' sequence hashes
	k.load.Add(id, workerID(w), len(blocks)-overlap, k.hashes)
	if k.approx != nil {
		k.approx.Predict(workerID(w), k.hashes, virtual(now))
	}
}

func (k *kvRouter) route(id string, blocks []kvhash.Block, now time.Duration) int {
	i := k.decide(blocks, now)
	k.record(id, i, blocks, k.cands[i].Overlap, now)
	return i
}

func (k *kvRouter) events(w int, evs []engine.Event) {
	if k.approx != nil {
		return // approximate mode consumes no events
	}
	for _, ev := range evs {
		k.idx.Apply(workerID(w), ev.ID, func(tx index.Tx) {
			switch ev.Kind {
			case engine.EventStored:
				for _, b := range ev.Blocks {
					tx.Store([]uint64{b.Sequence})
				}
			case engine.EventRemoved:
				tx.Remove(ev.Removed)
			case engine.EventCleared:
				tx.Clear()
			}
		})
	}
}

func (k *kvRouter) prefillDone(id string) { k.load.PrefillDone(id) }
func (k *kvRouter) free(id string)        { k.load.Free(id) }

// replicas is several KV routers that each see every KV event and take
// requests in turn. With sync they share every decision and load change, as
// --router-replica-sync does over the eventbus; without it each knows only
// its own decisions.
type replicas struct {
	routers []*kvRouter
	sync    bool
	next    int
	owner   map[string]int
}

func (r *replicas) route(id string, blocks []kvhash.Block, now time.Duration) int {
	me := r.next
	r.next = (r.next + 1) % len(r.routers)
	k := r.routers[me]
	w := k.decide(blocks, now)
	overlap := k.cands[w].Overlap
	r.owner[id] = me
	for j, other := range r.routers {
		if j == me || r.sync {
			if j != me {
				other.hashes = append(other.hashes[:0], k.hashes...)
			}
			other.record(id, w, blocks, overlap, now)
		}
	}
	return w
}

func (r *replicas) events(w int, evs []engine.Event) {
	for _, k := range r.routers {
		k.events(w, evs)
	}
}

func (r *replicas) each(id string, fn func(*kvRouter)) {
	if r.sync {
		for _, k := range r.routers {
			fn(k)
		}
		return
	}
	if me, ok := r.owner[id]; ok {
		fn(r.routers[me])
	}
}

func (r *replicas) prefillDone(id string) { r.each(id, func(k *kvRouter) { k.prefillDone(id) }) }

func (r *replicas) free(id string) {
	r.each(id, func(k *kvRouter) { k.free(id) })
	delete(r.owner, id)
}
