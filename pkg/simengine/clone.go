package simengine

import (
	"maps"
	"slices"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// Clone returns an engine in the same state as e (requests, cache, pending
// events, counters) that goes on independently: stepping, adding to or
// cancelling on either never changes the other. It lets a simulation try
// alternatives from one state (what-if placement searches).
func (e *Engine) Clone() *Engine {
	c := &Engine{cfg: e.cfg, nextID: e.nextID, stats: e.stats, requests: make(map[string]*request, len(e.requests))}
	c.pool = e.pool.clone(c.evicted)
	c.host, c.link = e.host.clone(), e.link
	copies := make(map[*request]*request, len(e.requests))
	for id, r := range e.requests {
		cr := *r
		// The slices the engine appends to are copied, with no spare
		// capacity shared.
		cr.tokens = slices.Clip(slices.Clone(r.tokens))
		cr.blocks = slices.Clip(slices.Clone(r.blocks))
		cr.hashes = slices.Clip(slices.Clone(r.hashes))
		if r.hasher != nil {
			cr.hasher = r.hasher.Clone()
		}
		c.requests[id] = &cr
		copies[r] = &cr
	}
	remap := func(list []*request) []*request {
		out := make([]*request, len(list))
		for i, r := range list {
			out[i] = copies[r]
		}
		return out
	}
	c.waiting, c.running = remap(e.waiting), remap(e.running)
	for _, ev := range e.events {
		ev.Blocks = slices.Clip(slices.Clone(ev.Blocks))
		ev.Removed = slices.Clip(slices.Clone(ev.Removed))
		c.events = append(c.events, ev)
	}
	return c
}

// clone copies the pool, telling onEvict of the copy's evictions.
func (p *pool) clone(onEvict func(kvhash.Block)) *pool {
	c := *p
	c.blocks = slices.Clone(p.blocks)
	c.free = slices.Clone(p.free)
	c.cache = maps.Clone(p.cache)
	c.onEvict = onEvict
	return &c
}

// clone copies the host tier, in the same order; nil stays nil.
func (h *hostTier) clone() *hostTier {
	if h == nil {
		return nil
	}
	c := newHostTier(h.cap)
	for b := h.head; b != nil; b = b.next {
		c.add(b.id)
	}
	return c
}
