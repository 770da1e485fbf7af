package simengine

import (
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// hostTier is the engine's host-memory KV tier (Config.NumHostBlocks), as
// vLLM's CPU offloading and SGLang's HiCache keep one: a block evicted from
// the GPU cache is copied here instead of lost, and a later request whose
// prefix continues into it loads it back to the GPU, paying the copy
// (Config.Timing's CPU load time per token) instead of its recomputation.
// A block is on one tier at a time: the copy back moves it to the GPU, and
// an eviction from here, least recently offloaded first, loses it.
//
// The copy back runs beside the engine's steps, as vLLM's offloading
// connector runs it (an asynchronous copy on its own stream while the
// request waits for remote KV and the scheduler goes on with the others):
// the request holds its GPU blocks and computes nothing until its copy is
// done, and the running requests are not slowed. Copies share the one
// host-to-GPU link, one after another. A step in which every request waits
// for a copy lasts until the first copy ends.
//
// Its events follow KvMedium's rules: an offload is a store with
// KV_MEDIUM_CPU of a block the GPU held (it moves), a load back a store
// with KV_MEDIUM_GPU, and an eviction from host a removal with
// KV_MEDIUM_CPU. An engine without a host tier publishes as before (no
// medium).
type hostTier struct {
	cap int
	// blocks maps a sequence hash to its entry of the LRU list.
	blocks map[uint64]*hostBlock
	// head is the least recently offloaded block, tail the most.
	head, tail *hostBlock
}

type hostBlock struct {
	id         kvhash.Block
	prev, next *hostBlock
}

func newHostTier(n int) *hostTier {
	if n <= 0 {
		return nil
	}
	return &hostTier{cap: n, blocks: make(map[uint64]*hostBlock, n)}
}

func (h *hostTier) has(seq uint64) bool {
	_, ok := h.blocks[seq]
	return ok
}

// add puts a block evicted from the GPU at the most recent end, and
// returns the block it evicted to make room (ok false: none).
func (h *hostTier) add(id kvhash.Block) (evicted uint64, ok bool) {
	if _, dup := h.blocks[id.Sequence]; dup {
		return 0, false
	}
	if len(h.blocks) >= h.cap {
		old := h.head
		h.unlink(old)
		delete(h.blocks, old.id.Sequence)
		evicted, ok = old.id.Sequence, true
	}
	b := &hostBlock{id: id, prev: h.tail}
	if h.tail != nil {
		h.tail.next = b
	} else {
		h.head = b
	}
	h.tail = b
	h.blocks[id.Sequence] = b
	return evicted, ok
}

// take removes a block the GPU loads back.
func (h *hostTier) take(seq uint64) (kvhash.Block, bool) {
	b, ok := h.blocks[seq]
	if !ok {
		return kvhash.Block{}, false
	}
	h.unlink(b)
	delete(h.blocks, seq)
	return b.id, true
}

func (h *hostTier) unlink(b *hostBlock) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		h.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		h.tail = b.prev
	}
	b.prev, b.next = nil, nil
}

func (h *hostTier) clear() {
	clear(h.blocks)
	h.head, h.tail = nil, nil
}

// offload records a GPU eviction with a host tier: the block moves to
// host (a stored event on KV_MEDIUM_CPU, merged with the previous one when
// that is an offload too; its blocks need not chain, so such an event has
// no parent) and the host's own eviction, if any, is a removal on
// KV_MEDIUM_CPU.
func (e *Engine) offload(id kvhash.Block) {
	gone, ok := e.host.add(id)
	if ok {
		e.stats.HostEvictedBlocks++
		if n := len(e.events); n > 0 && e.events[n-1].Kind == EventRemoved && e.events[n-1].Medium == workerv1.KvMedium_KV_MEDIUM_CPU {
			e.events[n-1].Removed = append(e.events[n-1].Removed, gone)
		} else {
			e.emit(Event{Kind: EventRemoved, Removed: []uint64{gone}, Medium: workerv1.KvMedium_KV_MEDIUM_CPU})
		}
	}
	e.emit(Event{Kind: EventStored, Blocks: []kvhash.Block{id}, Medium: workerv1.KvMedium_KV_MEDIUM_CPU})
}

// unhost drops a block the GPU caches again from the host tier, if there:
// computed again after its prefix was lost (or received), it is on GPU
// now, and the GPU store event moves it there. A block is on one tier.
func (e *Engine) unhost(seq uint64) {
	if e.host != nil {
		e.host.take(seq)
	}
}

// startCopy starts the copy of tokens of r's prefix from host to GPU after
// those already on the link, at the published load time per token.
func (e *Engine) startCopy(r *request, tokens int) {
	// The rate Config.Timing publishes for the host tier.
	d := scale(float64(tokens)*timingmodel.DefaultCPULoadMsPerToken, e.cfg.SpeedupRatio)
	if d <= 0 {
		return
	}
	e.link += d
	r.loading = e.link
}

// copyFromHost lets the step's time pass for the copies on the link: a
// request whose copy ends with the step computes from the next one. A step
// that computed nothing while copies run lasts until the first ends.
func (e *Engine) copyFromHost(res *StepResult) {
	if e.link <= 0 {
		return
	}
	if res.Duration == 0 {
		first := e.link
		for _, r := range e.running {
			if r.loading > 0 {
				first = min(first, r.loading)
			}
		}
		res.Duration = first
	}
	e.link = max(e.link-res.Duration, 0)
	for _, r := range e.running {
		r.loading = max(r.loading-res.Duration, 0)
	}
}
