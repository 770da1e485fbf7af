package simengine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// TestPrefillLegHoldsItsBlocks: a prefill leg ends with its first token and
// FinishHeld, its blocks held (in use, not evictable, published as stored)
// until Release or Cancel frees them; after that its full blocks stay
// cached, evictable.
func TestPrefillLegHoldsItsBlocks(t *testing.T) {
	tests := []struct {
		name string
		free func(e *Engine) (int, error)
	}{
		{"release", func(e *Engine) (int, error) { return e.Release("p") }},
		{"cancel", func(e *Engine) (int, error) {
			out, err := e.Cancel("p")
			if err == nil && out.Finish != FinishCancelled {
				t.Errorf("Cancel finish = %v, want cancelled", out.Finish)
			}
			return 5, err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, nil) // 4-token blocks, 64 blocks
			// 18 tokens: four full blocks and a partial one.
			if err := e.Add(Request{ID: "p", Prompt: prompt(100, 18), MaxTokens: 50, Hold: true}); err != nil {
				t.Fatal(err)
			}
			d := drain(t, e, 10)
			last := d.last["p"]
			if last.Finish != FinishHeld || len(d.tokens["p"]) != 1 || last.Usage.PromptTokens != 18 {
				t.Fatalf("prefill leg output %+v, tokens %v; want one token and FinishHeld", last, d.tokens["p"])
			}
			set := map[uint64]bool{}
			replay(t, set, 1, d.events)
			if len(set) != 4 {
				t.Fatalf("prefill leg stored %d blocks, want its 4 full ones", len(set))
			}
			if e.HeldBlocks() != 5 || e.Metrics().KVBlocksUsed != 5 || !e.Idle() {
				t.Fatalf("held %d, in use %d, idle %v; want 5, 5 and idle", e.HeldBlocks(), e.Metrics().KVBlocksUsed, e.Idle())
			}
			if err := e.Add(Request{ID: "p", Prompt: prompt(1, 4), MaxTokens: 1}); !errors.Is(err, ErrDuplicateRequest) {
				t.Fatalf("Add of a held id: %v, want ErrDuplicateRequest", err)
			}
			// Pressure: 59 blocks are free; a request needing 64 cannot
			// evict held blocks.
			if err := e.Add(Request{ID: "big", Prompt: prompt(5000, 59*4), MaxTokens: 1}); err != nil {
				t.Fatal(err)
			}
			drain(t, e, 200)
			if e.CachedPrefix(kvhash.Hashes(prompt(100, 18), 4, nil)) != 4 || e.HeldBlocks() != 5 {
				t.Fatalf("held blocks were evicted: prefix %d, held %d", e.CachedPrefix(kvhash.Hashes(prompt(100, 18), 4, nil)), e.HeldBlocks())
			}
			n, err := tt.free(e)
			if err != nil || n != 5 {
				t.Fatalf("free: %d, %v; want 5 blocks", n, err)
			}
			if e.HeldBlocks() != 0 || e.Metrics().KVBlocksUsed != 0 {
				t.Fatalf("after the free: held %d, in use %d", e.HeldBlocks(), e.Metrics().KVBlocksUsed)
			}
			if _, err := e.Release("p"); !errors.Is(err, ErrUnknownRequest) {
				t.Fatalf("second Release: %v, want ErrUnknownRequest", err)
			}
			if _, err := e.Cancel("p"); !errors.Is(err, ErrUnknownRequest) {
				t.Fatalf("Cancel after the free: %v, want ErrUnknownRequest", err)
			}
			if got := e.CachedPrefix(kvhash.Hashes(prompt(100, 18), 4, nil)); got != 4 {
				t.Fatalf("after the free %d blocks cached, want 4 (cached until evicted)", got)
			}
		})
	}
}

// TestPrefillLegCancelledMidPrefill: a prefill leg cancelled before its
// prompt is computed holds nothing.
func TestPrefillLegCancelledMidPrefill(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 8 })
	if err := e.Add(Request{ID: "p", Prompt: prompt(100, 40), MaxTokens: 1, Hold: true}); err != nil {
		t.Fatal(err)
	}
	if res := e.Step(); len(res.Outputs) != 0 {
		t.Fatalf("a first chunk produced %v", res.Outputs)
	}
	if _, err := e.Cancel("p"); err != nil {
		t.Fatal(err)
	}
	if e.HeldBlocks() != 0 || e.Metrics().KVBlocksUsed != 0 || !e.Idle() {
		t.Fatalf("held %d, in use %d after the cancel", e.HeldBlocks(), e.Metrics().KVBlocksUsed)
	}
}

// TestArrivedKV: a decode leg's prompt KV arrives: the blocks the engine
// lacks are stored (events as any stored block), only the last block is
// computed, usage counts as cached only what the engine held before, and
// the first token is the relayed one.
func TestArrivedKV(t *testing.T) {
	p := prompt(100, 18) // 4 full blocks and 2 tokens
	tests := []struct {
		name string
		// warm is a prompt served before, whose blocks the engine caches.
		warm []uint32
		// stored are the blocks the arrival stores; cached the prompt
		// tokens usage counts as cached.
		stored, cached int
	}{
		{name: "nothing cached", stored: 4},
		{name: "a prefix cached", warm: prompt(100, 9), stored: 2, cached: 8},
		{name: "all cached", warm: prompt(100, 17), stored: 0, cached: 16},
		{name: "another prompt cached", warm: prompt(900, 12), stored: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, nil)
			set := map[uint64]bool{}
			next := uint64(1)
			if tt.warm != nil {
				if err := e.Add(Request{ID: "warm", Prompt: tt.warm, MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
				next = replay(t, set, next, drain(t, e, 10).events)
			}
			before := len(set)
			first := uint32(4242)
			// Two tokens: the first generated one's KV is computed, which
			// fills no block.
			if err := e.Add(Request{ID: "d", Prompt: p, MaxTokens: 2, Arrived: true, FirstToken: &first}); err != nil {
				t.Fatal(err)
			}
			d := drain(t, e, 10)
			replay(t, set, next, d.events)
			if got := len(set) - before; got != tt.stored {
				t.Errorf("stored %d blocks, want %d", got, tt.stored)
			}
			// The last block (2 tokens) is computed; the rest arrived.
			if got := d.steps[0].PrefillTokens; got != 2 {
				t.Errorf("computed %d prompt tokens, want 2", got)
			}
			last := d.last["d"]
			if last.Usage.CachedPromptTokens != tt.cached || last.Finish != FinishLength {
				t.Errorf("usage %+v finish %v; want %d cached, length", last.Usage, last.Finish, tt.cached)
			}
			if toks := d.tokens["d"]; len(toks) != 2 || toks[0] != first {
				t.Errorf("tokens %v, want 2 starting with %d", toks, first)
			}
		})
	}
}

// TestLegsMatchAWholeRequest: a prefill leg on one engine, then a decode
// leg on another with its KV arrived and its first token relayed, generate
// what the whole request generates on a third, with the same events on the
// decode engine as if it had computed the prompt.
func TestLegsMatchAWholeRequest(t *testing.T) {
	for _, n := range []int{1, 2, 17} {
		p := prompt(300, 37)
		whole := newEngine(t, nil)
		if err := whole.Add(Request{ID: "r", Prompt: p, MaxTokens: n, Seed: 9}); err != nil {
			t.Fatal(err)
		}
		want := drain(t, whole, 100)

		pre := newEngine(t, nil)
		if err := pre.Add(Request{ID: "r", Prompt: p, MaxTokens: n, Seed: 9, Hold: true}); err != nil {
			t.Fatal(err)
		}
		held := drain(t, pre, 100)
		first := held.tokens["r"][0]
		if _, err := pre.Release("r"); err != nil {
			t.Fatal(err)
		}

		dec := newEngine(t, nil)
		if err := dec.Add(Request{ID: "r", Prompt: p, MaxTokens: n, Seed: 9, Arrived: true, FirstToken: &first}); err != nil {
			t.Fatal(err)
		}
		got := drain(t, dec, 100)
		if !slices.Equal(got.tokens["r"], want.tokens["r"]) || got.last["r"].Finish != want.last["r"].Finish {
			t.Errorf("max %d: legs generated %v (%v), whole %v (%v)", n, got.tokens["r"], got.last["r"].Finish, want.tokens["r"], want.last["r"].Finish)
		}
		if !cmpSets(cached(dec), cached(whole)) {
			t.Errorf("max %d: decode engine caches %v, whole %v", n, cached(dec), cached(whole))
		}
	}
}

func cmpSets(a, b map[uint64]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestArrivedKVWaitsForRoom: a decode leg whose arrived KV does not fit
// beside the running requests waits for room with its KV still on the
// wire, not in the engine's cache for the running requests' growth to
// evict; once admitted it takes all its arrived blocks and computes only
// the prompt's last block. Blocks of 4 tokens, 64 of them: a request of
// 220 prompt tokens holds 56 blocks from its first decode step and 63 at
// its 30th token; the leg's 40 tokens need 10 (9 arrived, the last
// computed), which fit only once it ends.
func TestArrivedKVWaitsForRoom(t *testing.T) {
	e := newEngine(t, nil)
	if err := e.Add(Request{ID: "run", Prompt: prompt(1000, 220), MaxTokens: 30}); err != nil {
		t.Fatal(err)
	}
	e.Step()
	first := uint32(7)
	if err := e.Add(Request{ID: "d", Prompt: prompt(5000, 40), MaxTokens: 2, Arrived: true, FirstToken: &first}); err != nil {
		t.Fatal(err)
	}
	set := map[uint64]bool{}
	computed, admittedAt, steps := 0, -1, 0
	for ; !e.Idle(); steps++ {
		if steps == 100 {
			t.Fatal("engine not idle after 100 steps")
		}
		res := e.Step()
		for _, c := range res.Chunks {
			if c.RequestID == "d" {
				computed += c.Tokens
			}
		}
		if slices.Contains(res.Admitted, "d") {
			admittedAt = steps
		}
		for _, ev := range res.Events {
			if ev.Kind == EventStored && admittedAt < 0 {
				for _, b := range ev.Blocks {
					set[b.Sequence] = true
				}
			}
		}
	}
	if admittedAt < 29 {
		t.Fatalf("the leg was admitted at step %d, while the running request held the room (29 more steps)", admittedAt)
	}
	if computed != 4 {
		t.Fatalf("the leg computed %d prompt tokens; want 4 (its last block), the rest arrived", computed)
	}
	for _, b := range kvhash.NewExtraHasher(4, kvhash.Extra{}).Append(prompt(5000, 40), nil) {
		if set[b.Sequence] {
			t.Fatalf("the leg's block %#x was stored before it was admitted (its KV is not the engine's until then)", b.Sequence)
		}
	}
}

// TestArrivedKVPulledAfterAdmission: an arrived prompt's KV is pulled once
// the engine admits it, into the blocks allocated for it: the transfer of
// the blocks it lacks (PullPerBlock each) passes with the engine's steps,
// the request computes nothing meanwhile, its blocks are stored when the
// pull ends (StepResult.Pulled), and then it computes its last block and
// gives the relayed first token. Blocks of 4 tokens; a 40-token prompt
// arrives as 9 blocks (its last block is computed) at 10 ms a block.
func TestArrivedKVPulledAfterAdmission(t *testing.T) {
	const perBlock = 10 * time.Millisecond
	first := uint32(7)
	leg := Request{ID: "d", Prompt: prompt(5000, 40), MaxTokens: 2, Arrived: true, FirstToken: &first, PullPerBlock: perBlock}
	t.Run("alone", func(t *testing.T) {
		e := newEngine(t, func(c *Config) { c.SpeedupRatio = 1 })
		if err := e.Add(leg); err != nil {
			t.Fatal(err)
		}
		// The first step admits it and lasts the pull: 9 blocks x 10 ms.
		res := e.Step()
		if !slices.Equal(res.Admitted, []string{"d"}) || !slices.Equal(res.Pulled, []string{"d"}) || len(res.Chunks) != 0 || len(res.Outputs) != 0 {
			t.Fatalf("first step: admitted %v, pulled %v, chunks %v, outputs %v; want d admitted and pulled, nothing computed",
				res.Admitted, res.Pulled, res.Chunks, res.Outputs)
		}
		if res.Duration != 9*perBlock {
			t.Errorf("first step lasted %v, want the pull's %v", res.Duration, 9*perBlock)
		}
		stored := 0
		for _, ev := range res.Events {
			if ev.Kind == EventStored {
				stored += len(ev.Blocks)
			}
		}
		if stored != 9 {
			t.Errorf("%d blocks stored when the pull ended, want the 9 that arrived", stored)
		}
		// Then its last block (4 tokens) and the relayed token.
		res = e.Step()
		if len(res.Chunks) != 1 || res.Chunks[0].Tokens != 4 || len(res.Outputs) != 1 || res.Outputs[0].Tokens[0] != first {
			t.Fatalf("second step: chunks %v, outputs %v; want 4 tokens computed and token %d", res.Chunks, res.Outputs, first)
		}
		// 4 tokens after 36 of their own: attention 4 x (2 x 36 + 4).
		if want := stepTime(4, 4*(2*36+4), false, 0, 1); res.Duration != want {
			t.Errorf("second step lasted %v, want %v (4 prompt tokens alone)", res.Duration, want)
		}
	})
	t.Run("beside a running request", func(t *testing.T) {
		// 64 blocks: "run" (212 tokens, 53 blocks, growing to 63) and the
		// leg's 10 fill 63. While the leg pulls, "run" needs a block
		// that is not there: it is preempted itself, the pulling leg is
		// not (vLLM keeps a request waiting for remote KV out of the
		// running batch).
		e := newEngine(t, func(c *Config) { c.SpeedupRatio = 1 })
		if err := e.Add(Request{ID: "run", Prompt: prompt(1000, 212), MaxTokens: 40}); err != nil {
			t.Fatal(err)
		}
		e.Step()
		slow := leg
		slow.PullPerBlock = 100 * time.Millisecond
		if err := e.Add(slow); err != nil {
			t.Fatal(err)
		}
		var elapsed, pulledAt time.Duration
		preempted, computed := 0, 0
		for steps := 0; !e.Idle(); steps++ {
			if steps == 200 {
				t.Fatal("engine not idle after 200 steps")
			}
			res := e.Step()
			elapsed += res.Duration
			for _, c := range res.Chunks {
				if c.RequestID == "d" {
					if pulledAt == 0 {
						t.Fatalf("the leg computed %d tokens before its pull ended", c.Tokens)
					}
					computed += c.Tokens
				}
			}
			if pulledAt == 0 {
				preempted += res.Preempted
			}
			if slices.Contains(res.Pulled, "d") {
				pulledAt = elapsed
			}
		}
		if pulledAt < 9*slow.PullPerBlock {
			t.Errorf("the pull ended after %v of steps, want at least %v", pulledAt, 9*slow.PullPerBlock)
		}
		if preempted == 0 {
			t.Error("the running request was never preempted while the leg pulled: the test does not test it")
		}
		if computed != 4 {
			t.Errorf("the leg computed %d prompt tokens; want 4 (its last block), the rest arrived", computed)
		}
	})
	t.Run("slots", func(t *testing.T) {
		// Two running slots: "run" holds one, the leg is admitted into
		// the other but leaves it free while it pulls, so "x", added
		// then, takes it; pulled, the leg waits for a slot until "run"
		// or "x" ends (both decode 300 tokens, longer than the pull).
		e := newEngine(t, func(c *Config) { c.SpeedupRatio, c.MaxNumSeqs, c.NumGPUBlocks = 1, 2, 512 })
		if err := e.Add(Request{ID: "run", Prompt: prompt(1000, 20), MaxTokens: 300}); err != nil {
			t.Fatal(err)
		}
		e.Step()
		slow := leg
		slow.PullPerBlock = 100 * time.Millisecond
		if err := e.Add(slow); err != nil {
			t.Fatal(err)
		}
		if res := e.Step(); !slices.Equal(res.Admitted, []string{"d"}) {
			t.Fatalf("admitted %v, want the leg (a slot was free)", res.Admitted)
		}
		if err := e.Add(Request{ID: "x", Prompt: prompt(9000, 8), MaxTokens: 300}); err != nil {
			t.Fatal(err)
		}
		pulled, ended, ran := -1, -1, -1
		for steps := 0; !e.Idle() && ran < 0; steps++ {
			if steps == 1000 {
				t.Fatal("the leg never ran")
			}
			res := e.Step()
			if steps == 0 && !slices.Equal(res.Admitted, []string{"x"}) {
				t.Fatalf("admitted %v while the leg pulled, want x (the leg holds no slot then)", res.Admitted)
			}
			for _, c := range res.Chunks {
				if c.RequestID == "d" {
					ran = steps
				}
			}
			for _, o := range res.Outputs {
				if o.Finish != FinishNone && ended < 0 {
					ended = steps
				}
			}
			if slices.Contains(res.Pulled, "d") {
				pulled = steps
			}
		}
		if pulled < 0 || ended < pulled || ran != ended+1 {
			t.Errorf("pulled at step %d, first end at %d, the leg ran at %d; want it to run in the step after the first end, past its pull",
				pulled, ended, ran)
		}
	})
}

// TestAwaitedPull: a leg whose pull is the caller's (AwaitPull) is named
// in PullStarts when admitted, with the arrived blocks past the prefix the
// engine held; until EndPull it holds its blocks and computes nothing however many steps pass; then its arrived blocks are
// stored and it computes its last block and the relayed token. EndPull of
// a request not waiting for it fails; a cancelled one frees its blocks.
func TestAwaitedPull(t *testing.T) {
	first := uint32(7)
	leg := Request{ID: "d", Prompt: prompt(5000, 40), MaxTokens: 2, Arrived: true, FirstToken: &first, AwaitPull: true}
	tests := []struct {
		name string
		// cached prompt tokens the engine holds before the leg comes.
		cached int
		// cancel cancels the leg during its pull instead of ending it.
		cancel bool
	}{
		{"nothing cached", 0, false},
		// 16 tokens (4 blocks) cached: 5 of the 9 full blocks arrive.
		{"a prefix cached", 16, false},
		{"cancelled while pulling", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// "run" decodes 50 tokens beside the leg, so that steps run
			// while the caller pulls.
			e := newEngine(t, nil)
			if tt.cached > 0 {
				if err := e.Add(Request{ID: "warm", Prompt: leg.Prompt[:tt.cached+1], MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
				drain(t, e, 100)
			}
			if err := e.Add(Request{ID: "run", Prompt: prompt(1000, 8), MaxTokens: 50}); err != nil {
				t.Fatal(err)
			}
			e.Step()
			if err := e.EndPull("d"); !errors.Is(err, ErrUnknownRequest) {
				t.Fatalf("EndPull before the leg was added: %v, want ErrUnknownRequest", err)
			}
			if err := e.Add(leg); err != nil {
				t.Fatal(err)
			}
			res := e.Step()
			want := []PullStart{{RequestID: "d", Blocks: 9 - tt.cached/4}}
			if !slices.Equal(res.Admitted, []string{"d"}) || !slices.Equal(res.PullStarts, want) {
				t.Fatalf("admitted %v, pull starts %v; want d admitted, pull starts %v", res.Admitted, res.PullStarts, want)
			}
			used := e.Metrics().KVBlocksUsed
			for range 10 {
				res := e.Step()
				for _, c := range res.Chunks {
					if c.RequestID == "d" {
						t.Fatalf("the leg computed %d tokens before its pull ended", c.Tokens)
					}
				}
				if len(res.PullStarts) != 0 || len(res.Pulled) != 0 {
					t.Fatalf("pull starts %v, pulled %v while the caller pulls", res.PullStarts, res.Pulled)
				}
			}
			if got := e.Metrics().KVBlocksUsed; got < used {
				t.Fatalf("%d blocks in use while the leg pulls, %d when admitted: its blocks were freed", got, used)
			}
			if tt.cancel {
				before := e.Metrics().KVBlocksUsed
				if _, err := e.Cancel("d"); err != nil {
					t.Fatal(err)
				}
				if err := e.EndPull("d"); !errors.Is(err, ErrUnknownRequest) {
					t.Fatalf("EndPull after the cancel: %v, want ErrUnknownRequest", err)
				}
				if got := e.Metrics().KVBlocksUsed; got != before-10 {
					t.Fatalf("%d blocks in use after the cancel, %d before; want its 10 freed", got, before)
				}
				return
			}
			if err := e.EndPull("d"); err != nil {
				t.Fatal(err)
			}
			if err := e.EndPull("d"); !errors.Is(err, ErrUnknownRequest) {
				t.Fatalf("second EndPull: %v, want ErrUnknownRequest", err)
			}
			stored, computed, out := 0, 0, []uint32(nil)
			for steps := 0; !e.Idle(); steps++ {
				if steps == 200 {
					t.Fatal("engine not idle after 200 steps")
				}
				res := e.Step()
				for _, ev := range res.Events {
					if ev.Kind == EventStored {
						for _, b := range ev.Blocks {
							for i, h := range kvhash.Hashes(leg.Prompt, 4, nil) {
								if h == b && i < 9 {
									stored++
								}
							}
						}
					}
				}
				for _, c := range res.Chunks {
					if c.RequestID == "d" {
						computed += c.Tokens
					}
				}
				for _, o := range res.Outputs {
					if o.RequestID == "d" {
						out = append(out, o.Tokens...)
					}
				}
			}
			if stored != 9-tt.cached/4 || computed != 4 || len(out) != 2 || out[0] != first {
				t.Errorf("after EndPull: %d prompt blocks stored, %d tokens computed, output %v; want %d stored, 4 computed (the last block), 2 tokens from %d",
					stored, computed, out, 9-tt.cached/4, first)
			}
		})
	}
}
