package simengine

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// replayMedia applies events to a map of sequence hash to medium by
// KvMedium's rules, checking that each is consistent with it: a GPU store
// of a block not on GPU (new, or loaded back from host), a host store of a
// block the GPU held (an offload), a host removal of a block on host.
func replayMedia(t fataler, held map[uint64]workerv1.KvMedium, next uint64, events []Event) uint64 {
	t.Helper()
	const gpu, cpu = workerv1.KvMedium_KV_MEDIUM_GPU, workerv1.KvMedium_KV_MEDIUM_CPU
	for _, ev := range events {
		if ev.ID != next {
			t.Fatalf("event id %d, want %d", ev.ID, next)
		}
		next++
		switch ev.Kind {
		case EventStored:
			for _, b := range ev.Blocks {
				switch was, ok := held[b.Sequence]; {
				case ev.Medium == gpu && ok && was == gpu:
					t.Fatalf("event %d stores %#x on GPU, already there", ev.ID, b.Sequence)
				case ev.Medium == cpu && (!ok || was != gpu):
					t.Fatalf("event %d offloads %#x, not on GPU (%v, %v)", ev.ID, b.Sequence, was, ok)
				case ev.Medium != gpu && ev.Medium != cpu:
					t.Fatalf("event %d stores on %v", ev.ID, ev.Medium)
				}
				held[b.Sequence] = ev.Medium
			}
		case EventRemoved:
			for _, h := range ev.Removed {
				if was, ok := held[h]; ev.Medium != cpu || !ok || was != cpu {
					t.Fatalf("event %d removes %#x from %v, held %v %v", ev.ID, h, ev.Medium, was, ok)
				}
				delete(held, h)
			}
		case EventCleared:
			clear(held)
		}
	}
	return next
}

// TestPropertyHostTierReplay drives an engine with a host tier through
// random requests with shared prefixes, cancellations and resets, and
// checks after every step that replaying its events by medium gives
// exactly its GPU cache and its host tier, that the host never holds more
// than its size, and that every request still completes.
func TestPropertyHostTierReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.SpeedupRatio = 0
		cfg.BlockSize = rapid.IntRange(1, 4).Draw(t, "block_size")
		cfg.NumGPUBlocks = rapid.IntRange(8, 32).Draw(t, "num_gpu_blocks")
		cfg.NumHostBlocks = rapid.IntRange(1, 32).Draw(t, "num_host_blocks")
		cfg.MaxNumSeqs = rapid.IntRange(1, 4).Draw(t, "max_num_seqs")
		cfg.MaxNumBatchedTokens = rapid.IntRange(4, 64).Draw(t, "max_num_batched_tokens")
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		bases := rapid.SliceOfN(rapid.SliceOfN(rapid.Uint32Range(0, 3), 0, 24), 1, 4).Draw(t, "bases")
		held := map[uint64]workerv1.KvMedium{}
		next := uint64(1)
		// The blocks the events offload to host and remove from it, which
		// the engine's counters must match.
		var offloaded, lost uint64
		replay := func(events []Event) {
			next = replayMedia(t, held, next, events)
			for _, ev := range events {
				switch {
				case ev.Kind == EventStored && ev.Medium == workerv1.KvMedium_KV_MEDIUM_CPU:
					offloaded += uint64(len(ev.Blocks))
				case ev.Kind == EventRemoved && ev.Medium == workerv1.KvMedium_KV_MEDIUM_CPU:
					lost += uint64(len(ev.Removed))
				}
			}
		}
		check := func() {
			if len(e.host.blocks) > cfg.NumHostBlocks {
				t.Fatalf("host holds %d blocks of %d", len(e.host.blocks), cfg.NumHostBlocks)
			}
			want := map[uint64]workerv1.KvMedium{}
			for h := range e.pool.cache {
				want[h] = workerv1.KvMedium_KV_MEDIUM_GPU
			}
			for h := range e.host.blocks {
				if _, both := want[h]; both {
					t.Fatalf("%#x on GPU and host", h)
				}
				want[h] = workerv1.KvMedium_KV_MEDIUM_CPU
			}
			if fmt.Sprint(want) != fmt.Sprint(held) {
				t.Fatalf("events replay to %v, engine holds %v", held, want)
			}
		}
		for i := range rapid.IntRange(1, 60).Draw(t, "ops") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5:
				base := rapid.SampledFrom(bases).Draw(t, "base")
				p := append(append([]uint32{}, base...), rapid.SliceOfN(rapid.Uint32Range(0, 3), 1, 12).Draw(t, "suffix")...)
				_ = e.Add(Request{ID: fmt.Sprint("r", i), Prompt: p, MaxTokens: rapid.IntRange(1, 6).Draw(t, "max_tokens")})
			case op < 6:
				_, _ = e.Cancel(fmt.Sprint("r", rapid.IntRange(0, i).Draw(t, "cancel")))
			case op < 7 && rapid.IntRange(0, 4).Draw(t, "reset") == 0:
				replay(e.Reset().Events)
			default:
				replay(e.Step().Events)
			}
			check()
		}
		for range 10000 {
			if e.Idle() {
				break
			}
			replay(e.Step().Events)
		}
		if !e.Idle() {
			t.Fatalf("not idle: %+v", e.Metrics())
		}
		check()
		if st := e.Stats(); st.EvictedBlocks != offloaded || st.HostEvictedBlocks != lost {
			t.Fatalf("counted %d blocks evicted from GPU and %d from host, events offload %d and remove %d from host",
				st.EvictedBlocks, st.HostEvictedBlocks, offloaded, lost)
		}
	})
}

// TestHostTierReload: a prompt evicted from a small GPU cache goes to host
// (stores on KV_MEDIUM_CPU), and the same prompt again loads it back
// (stores on KV_MEDIUM_GPU) instead of computing it: its tokens count as
// cached, and the step pays the host tier's load time, less than the
// prefill it saves.
func TestHostTierReload(t *testing.T) {
	run := func(host int) (cached int, loaded uint64, d drained) {
		e := newEngine(t, func(c *Config) { c.NumGPUBlocks, c.NumHostBlocks, c.SpeedupRatio = 40, host, 1 })
		a, b := prompt(0, 128), prompt(10000, 128) // 32 blocks each: b evicts a
		for i, p := range [][]uint32{a, b, a} {
			if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 1}); err != nil {
				t.Fatal(err)
			}
			d = drain(t, e, 100)
		}
		return d.last["2"].Usage.CachedPromptTokens, e.Stats().HostHitBlocks, d
	}
	cachedHost, loaded, withHost := run(64)
	cachedNone, _, without := run(0)
	if cachedHost != 124 || cachedNone >= cachedHost || int(loaded)*4 != cachedHost-cachedNone {
		t.Fatalf("third request cached %d tokens with a host tier (%d blocks loaded), %d without; want 124 (all but the last block), of which those the GPU lost loaded", cachedHost, loaded, cachedNone)
	}
	var gpuStores int
	for _, ev := range withHost.events {
		if ev.Kind == EventStored && ev.Medium == workerv1.KvMedium_KV_MEDIUM_GPU {
			gpuStores += len(ev.Blocks)
		}
	}
	if want := int(loaded) + 1; gpuStores != want {
		t.Fatalf("the reload stored %d blocks on GPU, want %d loaded + 1 computed", gpuStores, loaded)
	}
	// Alone on the engine, the request first waits for its copy (a step
	// of the load time, nothing computed), then computes its last block.
	load := timingmodel.Duration(float64(loaded*4) * timingmodel.DefaultCPULoadMsPerToken)
	if len(withHost.steps) < 2 || withHost.steps[0].Duration != load || len(withHost.steps[0].Outputs) != 0 || withHost.steps[0].PrefillTokens != 0 {
		t.Fatalf("first step %+v, want a wait of the load of %d tokens, %v, computing nothing", withHost.steps[0], loaded*4, load)
	}
	// The last block's 4 tokens attend to the 124 loaded before them.
	lastBlock := timingmodel.Default().StepAttentionMs(4, timingmodel.Attention(124, 4), false, 0)
	if got, want := withHost.steps[1].Duration, timingmodel.Duration(lastBlock); got != want || withHost.steps[1].PrefillTokens != 4 {
		t.Fatalf("second step took %v for %d tokens, want the last block's prefill after its prefix, %v", got, withHost.steps[1].PrefillTokens, want)
	}
	if got, full := load+withHost.steps[1].Duration, without.steps[0].Duration; !(got < full) {
		t.Fatalf("reload %v not shorter than recomputing, %v", got, full)
	}
}

// TestHostCopyBesideSteps: a request loading its prefix from host does not
// slow the requests decoding beside it (the copy runs on the link, not in
// the steps), gets its first token only after its copy, and copies share
// the link one after another.
func TestHostCopyBesideSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		loaders int // requests loading their prefix from host at once
	}{
		{"one copy", 1},
		{"two copies share the link", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.NumGPUBlocks, c.NumHostBlocks, c.SpeedupRatio = 80, 256, 1 })
			// Offload prompts to host: each computed, then pushed out of
			// the GPU by the next ones.
			var hosted [][]uint32
			for i := range tc.loaders {
				hosted = append(hosted, prompt(uint32(20000*(i+1)), 128))
			}
			for i, p := range append(append([][]uint32{}, hosted...), prompt(90000, 160), prompt(95000, 160)) {
				if err := e.Add(Request{ID: fmt.Sprint("warm", i), Prompt: p, MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
				drain(t, e, 100)
			}
			// A long decode runs; then the hosted prompts come back.
			if err := e.Add(Request{ID: "decoder", Prompt: prompt(1, 8), MaxTokens: 50}); err != nil {
				t.Fatal(err)
			}
			e.Step() // its prefill
			before := e.Stats().HostHitBlocks
			for i, p := range hosted {
				if err := e.Add(Request{ID: fmt.Sprint("loader", i), Prompt: p, MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
			}
			var elapsed time.Duration
			besideCopy := 0
			first := map[string]time.Duration{}
			for step := 0; len(first) < tc.loaders; step++ {
				if step == 100 {
					t.Fatal("the loaders never produced a token")
				}
				res := e.Step()
				if res.PrefillTokens == 0 && res.DecodeTokens == 1 {
					// The decoder alone computed: the step takes a decode
					// step's time at the blocks in use (none was released
					// in it), the copies beside it add nothing.
					if want := DecodeTime(float64(e.Metrics().KVBlocksUsed)/80, 1); res.Duration != want {
						t.Fatalf("a decode step beside the copy took %v, want %v", res.Duration, want)
					}
					besideCopy++
				}
				elapsed += res.Duration
				for _, o := range res.Outputs {
					if _, ok := first[o.RequestID]; !ok && o.RequestID != "decoder" {
						first[o.RequestID] = elapsed
					}
				}
			}
			if besideCopy == 0 {
				t.Fatal("no decode step ran while a copy did")
			}
			loaded := e.Stats().HostHitBlocks - before
			perLoader := loaded / uint64(tc.loaders)
			if perLoader == 0 {
				t.Fatal("no block was loaded from host")
			}
			copyOne := timingmodel.Duration(float64(perLoader*4) * timingmodel.DefaultCPULoadMsPerToken)
			for i := range tc.loaders {
				// The i-th copy ends after the copies before it.
				if got, min := first[fmt.Sprint("loader", i)], time.Duration(i+1)*copyOne; got < min {
					t.Errorf("loader %d's first token after %v, before its copy could end (%v)", i, got, min)
				}
			}
		})
	}
}
