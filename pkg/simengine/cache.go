package simengine

import "github.com/switchyard-llm/switchyard/pkg/kvhash"

// nilBlock marks the end of the LRU list.
const nilBlock = -1

// block is one physical KV block of the pool.
type block struct {
	// id is the identity of the block once it is full and registered.
	id kvhash.Block
	// ref counts the requests holding the block.
	ref int32
	// registered says the block is in the prefix cache under id.Sequence.
	registered bool
	// inLRU says the block is on the evictable list (registered, ref 0).
	inLRU      bool
	prev, next int32
}

// pool is the paged KV cache: a fixed number of blocks, a prefix cache from
// sequence hash to block, and the blocks nobody holds. Unregistered free blocks
// (partial, or duplicates of a cached block) are on a free stack and cost
// nothing to reuse; registered ones with no holder stay cached on an LRU list
// and are evicted, least recently released first, when no free or unused
// block is left.
//
// blocks grows as blocks are first used, up to size, so an engine with a large
// cache and little traffic holds (and copies, in Clone) only what it used.
// Block numbers are handed out in the order a pool of size preallocated free
// blocks would: a released block first, else the lowest never used.
type pool struct {
	blocks []block
	size   int
	free   []int32
	cache  map[uint64]int32
	// head is the least recently released cached block, tail the most.
	head, tail int32
	lruLen     int
	inUse      int
	// onEvict is told the identity of every block evicted from the cache.
	onEvict func(id kvhash.Block)
}

func newPool(n int, onEvict func(kvhash.Block)) *pool {
	return &pool{
		size:    n,
		cache:   make(map[uint64]int32),
		head:    nilBlock,
		tail:    nilBlock,
		onEvict: onEvict,
	}
}

// available returns how many blocks could be allocated now.
func (p *pool) available() int { return len(p.free) + p.size - len(p.blocks) + p.lruLen }

// lookup returns the cached block of a sequence hash.
func (p *pool) lookup(seq uint64) (int32, bool) {
	b, ok := p.cache[seq]
	return b, ok
}

// acquire adds a holder to a cached block, taking it off the LRU list.
func (p *pool) acquire(b int32) {
	blk := &p.blocks[b]
	if blk.ref == 0 {
		p.inUse++
		if blk.inLRU {
			p.unlink(b)
		}
	}
	blk.ref++
}

// alloc returns a new block with one holder, evicting the least recently
// released cached block when no free one is left. It fails when every block
// is held.
func (p *pool) alloc() (int32, bool) {
	var b int32
	switch {
	case len(p.free) > 0:
		b = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	case len(p.blocks) < p.size:
		b = int32(len(p.blocks))
		p.blocks = append(p.blocks, block{})
	case p.head != nilBlock:
		b = p.head
		p.unlink(b)
		blk := &p.blocks[b]
		delete(p.cache, blk.id.Sequence)
		blk.registered = false
		p.onEvict(blk.id)
	default:
		return 0, false
	}
	p.blocks[b] = block{ref: 1, prev: nilBlock, next: nilBlock}
	p.inUse++
	return b, true
}

// register puts a full held block in the prefix cache. It returns false,
// leaving the block private, when another block already caches the same
// sequence.
func (p *pool) register(b int32, id kvhash.Block) bool {
	if _, dup := p.cache[id.Sequence]; dup {
		return false
	}
	blk := &p.blocks[b]
	blk.id = id
	blk.registered = true
	p.cache[id.Sequence] = b
	return true
}

// release drops one holder of a block. A cached block nobody holds goes to
// the most recently used end of the LRU list; an uncached one is free at once.
func (p *pool) release(b int32) {
	blk := &p.blocks[b]
	blk.ref--
	if blk.ref > 0 {
		return
	}
	p.inUse--
	if !blk.registered {
		p.free = append(p.free, b)
		return
	}
	blk.inLRU = true
	blk.prev, blk.next = p.tail, nilBlock
	if p.tail != nilBlock {
		p.blocks[p.tail].next = b
	} else {
		p.head = b
	}
	p.tail = b
	p.lruLen++
}

// unlink takes a block off the LRU list.
func (p *pool) unlink(b int32) {
	blk := &p.blocks[b]
	if blk.prev != nilBlock {
		p.blocks[blk.prev].next = blk.next
	} else {
		p.head = blk.next
	}
	if blk.next != nilBlock {
		p.blocks[blk.next].prev = blk.prev
	} else {
		p.tail = blk.prev
	}
	blk.prev, blk.next, blk.inLRU = nilBlock, nilBlock, false
	p.lruLen--
}

// clear forgets every cached block. Only called with no block held.
func (p *pool) clear() {
	p.blocks = p.blocks[:0]
	p.free = p.free[:0]
	clear(p.cache)
	p.head, p.tail, p.lruLen, p.inUse = nilBlock, nilBlock, 0, 0
}
