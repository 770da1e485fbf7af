package simengine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLoRASlots: with two slots, two adapters load in the first step (its
// duration grows by two load times) while a request for a third waits and
// a base-model request behind it runs; the third loads once a slot's
// requests end, in place of the least recently used adapter; an adapter
// still loaded is reused without a load.
func TestLoRASlots(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxLoras = 2; c.LoraLoadMs = 100; c.SpeedupRatio = 1 })
	add := func(id, lora string, maxTokens int) {
		t.Helper()
		if err := e.Add(Request{ID: id, Prompt: prompt(uint32(len(id))*100, 8), MaxTokens: maxTokens, LoRA: lora}); err != nil {
			t.Fatal(err)
		}
	}
	add("a1", "a", 2)
	add("b1", "b", 8)
	add("c1", "c", 2)
	add("base", "", 2)
	first := e.Step()
	if !slices.Equal(first.Admitted, []string{"a1", "b1", "base"}) || first.LoraLoads != 2 {
		t.Fatalf("first step admitted %v with %d loads, want a1 b1 base with 2", first.Admitted, first.LoraLoads)
	}
	if min := 200 * time.Millisecond; first.Duration < min {
		t.Fatalf("first step took %v, less than its two loads", first.Duration)
	}
	if got := e.Metrics().LoRAs; !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("loaded %v, want a b", got)
	}
	loadedC := false
	for i := 0; i < 20 && !loadedC; i++ {
		res := e.Step()
		if slices.Contains(res.Admitted, "c1") {
			loadedC = res.LoraLoads == 1
			if !loadedC {
				t.Fatalf("c1 admitted with %d loads", res.LoraLoads)
			}
		}
	}
	if !loadedC {
		t.Fatal("c1 never ran")
	}
	if got := e.Metrics().LoRAs; !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("loaded %v, want b c (a, least recently used and idle, evicted)", got)
	}
	drain(t, e, 100)
	add("b2", "b", 1)
	if res := e.Step(); res.LoraLoads != 0 {
		t.Fatalf("b, still loaded, was loaded again (%d loads)", res.LoraLoads)
	}
	if st := e.Stats(); st.LoraLoads != 3 {
		t.Fatalf("%d loads in all, want 3", st.LoraLoads)
	}
}

// TestLoRACachesApart: the same prompt under two adapters and the base
// model shares no cached block; the same adapter again hits its own.
func TestLoRACachesApart(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxLoras = 4 })
	p := prompt(7, 33)
	run := func(id, lora string) int {
		t.Helper()
		if err := e.Add(Request{ID: id, Prompt: p, MaxTokens: 1, LoRA: lora}); err != nil {
			t.Fatal(err)
		}
		return drain(t, e, 50).last[id].Usage.CachedPromptTokens
	}
	for _, tc := range []struct {
		id, lora string
		cached   int
	}{{"a1", "a", 0}, {"b1", "b", 0}, {"base1", "", 0}, {"a2", "a", 32}, {"b2", "b", 32}, {"base2", "", 32}} {
		if got := run(tc.id, tc.lora); got != tc.cached {
			t.Errorf("%s (adapter %q): %d cached prompt tokens, want %d", tc.id, tc.lora, got, tc.cached)
		}
	}
}

// TestLoRARequests: an adapter on an engine without slots, and a name over
// MaxLoRALen, are ErrInvalidRequest; a name of exactly MaxLoRALen runs.
func TestLoRARequests(t *testing.T) {
	none := newEngine(t, nil)
	if err := none.Add(Request{ID: "x", Prompt: prompt(1, 4), MaxTokens: 1, LoRA: "a"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("an adapter without slots: %v", err)
	}
	e := newEngine(t, func(c *Config) { c.MaxLoras = 1 })
	if err := e.Add(Request{ID: "y", Prompt: prompt(1, 4), MaxTokens: 1, LoRA: strings.Repeat("l", MaxLoRALen+1)}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a name over the limit: %v", err)
	}
	if err := e.Add(Request{ID: "z", Prompt: prompt(1, 4), MaxTokens: 1, LoRA: strings.Repeat("l", MaxLoRALen)}); err != nil {
		t.Fatalf("a name at the limit: %v", err)
	}
	drain(t, e, 10)
}
