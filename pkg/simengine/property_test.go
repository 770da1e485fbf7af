package simengine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// checkInvariants checks the engine's bookkeeping against its blocks.
func checkInvariants(t *rapid.T, e *Engine) {
	p := e.pool
	refs := map[int32]int32{}
	for _, r := range e.running {
		if want := e.blocksFor(r.computed); len(r.blocks) != want {
			t.Fatalf("request %s holds %d blocks for %d computed tokens, want %d", r.id, len(r.blocks), r.computed, want)
		}
		for _, b := range r.blocks {
			refs[b]++
		}
	}
	held := 0
	for _, r := range e.held {
		if want := e.blocksFor(r.promptLen); len(r.blocks) != want {
			t.Fatalf("held request %s holds %d blocks for a %d-token prompt, want %d", r.id, len(r.blocks), r.promptLen, want)
		}
		held += len(r.blocks)
		for _, b := range r.blocks {
			refs[b]++
		}
	}
	if held != e.HeldBlocks() {
		t.Fatalf("held requests hold %d blocks, HeldBlocks says %d", held, e.HeldBlocks())
	}
	for _, r := range e.waiting {
		if len(r.blocks) != 0 || r.running {
			t.Fatalf("waiting request %s holds %d blocks", r.id, len(r.blocks))
		}
	}
	inUse := 0
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.ref != refs[int32(i)] {
			t.Fatalf("block %d has ref %d, requests hold it %d times", i, b.ref, refs[int32(i)])
		}
		if b.ref > 0 {
			inUse++
		}
		if b.inLRU != (b.registered && b.ref == 0) {
			t.Fatalf("block %d: inLRU %v, registered %v, ref %d", i, b.inLRU, b.registered, b.ref)
		}
		if b.registered && p.cache[b.id.Sequence] != int32(i) {
			t.Fatalf("registered block %d is not the cache's block for %#x", i, b.id.Sequence)
		}
	}
	if inUse != p.inUse || inUse+len(p.free)+p.lruLen != len(p.blocks) {
		t.Fatalf("in use %d (counted %d), free %d, lru %d, total %d", inUse, p.inUse, len(p.free), p.lruLen, len(p.blocks))
	}
	if len(e.running) > e.cfg.MaxNumSeqs || len(e.running)+len(e.waiting) != len(e.requests) {
		t.Fatalf("running %d, waiting %d, requests %d", len(e.running), len(e.waiting), len(e.requests))
	}
}

// TestPropertyEventsReplayToCache drives an engine with random request
// streams, cancellations and resets, and checks after every operation that
// replaying its events gives exactly its cached blocks, that event ids have
// no gaps, and that every request that was not cancelled generates exactly
// its MaxTokens tokens. Some requests are prefill legs (one token, then
// their blocks held until released or cancelled) and some decode legs
// whose prompt's KV arrives.
func TestPropertyEventsReplayToCache(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.SpeedupRatio = 0
		cfg.BlockSize = rapid.IntRange(1, 8).Draw(t, "block_size")
		cfg.NumGPUBlocks = rapid.IntRange(4, 64).Draw(t, "num_gpu_blocks")
		cfg.MaxNumSeqs = rapid.IntRange(1, 8).Draw(t, "max_num_seqs")
		cfg.MaxNumBatchedTokens = rapid.IntRange(1, 64).Draw(t, "max_num_batched_tokens")
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Prompts share prefixes, so that they hit each other's blocks.
		bases := rapid.SliceOfN(rapid.SliceOfN(rapid.Uint32Range(0, 3), 0, 24), 1, 4).Draw(t, "bases")

		set := map[uint64]bool{}
		next := uint64(1)
		want := map[string]int{}
		got := map[string]int{}
		finished := map[string]bool{}
		var ids, holding []string
		step := func() {
			res := e.Step()
			next = replay(t, set, next, res.Events)
			for _, o := range res.Outputs {
				got[o.RequestID] += len(o.Tokens)
				if o.Finish == FinishLength {
					finished[o.RequestID] = true
				}
				if o.Finish == FinishHeld {
					finished[o.RequestID] = true
					holding = append(holding, o.RequestID)
				}
			}
		}
		ops := rapid.IntRange(1, 80).Draw(t, "ops")
		for i := range ops {
			switch op := rapid.IntRange(0, 19).Draw(t, "op"); {
			case op < 7:
				id := fmt.Sprint("r", i)
				base := rapid.SampledFrom(bases).Draw(t, "base")
				suffix := rapid.SliceOfN(rapid.Uint32Range(0, 3), 0, 12).Draw(t, "suffix")
				p := append(append([]uint32{}, base...), suffix...)
				n := rapid.IntRange(1, 20).Draw(t, "max_tokens")
				r := Request{ID: id, Prompt: p, MaxTokens: n}
				switch rapid.IntRange(0, 3).Draw(t, "leg") {
				case 1:
					r.Hold, n = true, 1
				case 2:
					first := uint32(7)
					r.Arrived, r.FirstToken = true, &first
				}
				err := e.Add(r)
				switch {
				case err == nil:
					want[id] = n
					ids = append(ids, id)
				case errors.Is(err, ErrRequestTooLarge), errors.Is(err, ErrInvalidRequest):
				default:
					t.Fatalf("Add: %v", err)
				}
			case op < 8 && len(ids) > 0:
				id := rapid.SampledFrom(ids).Draw(t, "cancel")
				if _, err := e.Cancel(id); err == nil {
					delete(want, id)
				} else if !errors.Is(err, ErrUnknownRequest) || !finished[id] && want[id] != 0 {
					t.Fatalf("Cancel(%s): %v", id, err)
				}
			case op == 9 && len(holding) > 0:
				id := rapid.SampledFrom(holding).Draw(t, "release")
				before := e.HeldBlocks()
				n, err := e.Release(id)
				if err == nil && e.HeldBlocks() != before-n {
					t.Fatalf("Release(%s) freed %d blocks, held went %d -> %d", id, n, before, e.HeldBlocks())
				}
				if err != nil && !errors.Is(err, ErrUnknownRequest) {
					t.Fatalf("Release(%s): %v", id, err)
				}
			case op == 8 && rapid.IntRange(0, 9).Draw(t, "reset") == 0:
				res := e.Reset()
				for _, o := range res.Outputs {
					delete(want, o.RequestID)
				}
				next = replay(t, set, next, res.Events)
			default:
				step()
			}
			checkInvariants(t, e)
			if !cmp.Equal(set, cached(e)) {
				t.Fatalf("replayed events %v != cached blocks %v", set, cached(e))
			}
		}
		// Held blocks wait for their decode legs, which never come here:
		// what is left waiting may need them.
		for steps := 0; !e.Idle(); steps++ {
			if steps > 10000 {
				t.Fatalf("engine not idle after 10000 steps: %+v", e.Metrics())
			}
			for _, id := range holding {
				_, _ = e.Release(id)
			}
			step()
			checkInvariants(t, e)
		}
		if !cmp.Equal(set, cached(e)) {
			t.Fatalf("replayed events %v != cached blocks %v", set, cached(e))
		}
		for id, n := range want {
			if got[id] != n || !finished[id] {
				t.Fatalf("request %s generated %d tokens (finished %v), want %d", id, got[id], finished[id], n)
			}
		}
		st := e.Stats()
		if st.PrefixHitBlocks > st.PrefixQueriedBlocks {
			t.Fatalf("hits %d > queried %d", st.PrefixHitBlocks, st.PrefixQueriedBlocks)
		}
	})
}
