package simengine

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cloneWorkload adds request i (of 12) at step 2i: prompts that share
// prefixes, on a pool small enough for eviction and preemption.
func cloneWorkload(t *testing.T, e *Engine, step int) {
	t.Helper()
	if step%2 != 0 || step/2 >= 12 {
		return
	}
	i := step / 2
	p := append(prompt(100, 8+4*(i%3)), prompt(uint32(1000+100*i), 6+i)...)
	if err := e.Add(Request{ID: fmt.Sprint("r", i), Prompt: p, MaxTokens: 12 + 3*(i%4), Seed: uint64(i)}); err != nil {
		t.Fatal(err)
	}
}

func runFrom(t *testing.T, e *Engine, from, to int, extra bool) []StepResult {
	t.Helper()
	var out []StepResult
	for s := from; s < to; s++ {
		cloneWorkload(t, e, s)
		if extra && s == from {
			if err := e.Add(Request{ID: "other", Prompt: prompt(100, 30), MaxTokens: 9}); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, e.Step())
	}
	return out
}

// TestCloneGoesOnIndependently clones an engine at several steps of a
// workload with shared prefixes, eviction and preemption. The clone,
// given the rest of the workload, steps exactly as the engine never cloned
// does; and the original, stepped in turn with a clone that got another
// request too, is not disturbed by it.
func TestCloneGoesOnIndependently(t *testing.T) {
	const steps = 90
	edit := func(c *Config) { c.NumGPUBlocks = 20; c.MaxNumBatchedTokens = 16; c.SpeedupRatio = 1 }
	ref := runFrom(t, newEngine(t, edit), 0, steps, false)
	var preempted, evicted bool
	for _, r := range ref {
		preempted = preempted || r.Preempted > 0
		for _, ev := range r.Events {
			evicted = evicted || ev.Kind == EventRemoved
		}
	}
	if !preempted || !evicted {
		t.Fatalf("workload preempted %v, evicted %v: want both", preempted, evicted)
	}
	for _, at := range []int{0, 3, 11, 20, 35} {
		t.Run(fmt.Sprint("at step ", at), func(t *testing.T) {
			e := newEngine(t, edit)
			runFrom(t, e, 0, at, false)
			c := e.Clone()
			other := e.Clone()
			if d := cmp.Diff(ref[at:], runFrom(t, c, at, steps, false)); d != "" {
				t.Fatalf("the clone stepped otherwise (-never cloned +clone):\n%s", d)
			}
			// Interleave the original with a clone that diverges.
			var got []StepResult
			for s := at; s < steps; s++ {
				got = append(got, runFrom(t, e, s, s+1, false)...)
				runFrom(t, other, s, s+1, s == at)
			}
			if d := cmp.Diff(ref[at:], got); d != "" {
				t.Fatalf("a diverging clone changed the original (-never cloned +original):\n%s", d)
			}
			if other.Stats() == e.Stats() {
				t.Fatal("the diverging clone did not diverge")
			}
		})
	}
}
