package replay

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestCapacityBound checks the compute bound against numbers worked out by
// hand, on timing models simple enough to do so: two workers, 1000
// uncached prompt tokens, 800 decode tokens, arrivals over 17 s, at most
// 8 requests a step, so the rate is 2 x 17 s over the work.
func TestCapacityBound(t *testing.T) {
	// PrefillMs(t)/t = 0.01t + 1 + 100/t: least at t = 100, 3 ms/token.
	// DecodeMs(u) = -10u^2 + 20u + 4: concave, least at u = 0, 4 ms.
	base := timingmodel.Model{PrefillQuadratic: 0.01, PrefillPerToken: 1, PrefillPerBatch: 100,
		DecodeQuadratic: -10, DecodeLinear: 20, DecodeBase: 4, DecodeMin: 1, MaxBatchedTokens: 1000}
	with := func(f func(*timingmodel.Model)) timingmodel.Model { m := base; f(&m); return m }
	tests := []struct {
		name             string
		m                timingmodel.Model
		uncached, decode int64
		span             time.Duration
		chunk, batch     int
		prefillMs        float64 // per token
		stepMs           float64
		rate             float64
	}{
		// 1000 x 3 ms + 800/8 x 4 ms = 3.4 s: 34/3.4.
		{name: "interior optimum", m: base, uncached: 1000, decode: 800, span: 17 * time.Second,
			chunk: 100, batch: 8, prefillMs: 3, stepMs: 4, rate: 10},
		// 50 tokens: 0.5 + 1 + 2 = 3.5 ms/token; 3.5 s + 0.4 s.
		{name: "the step budget is below the optimum", m: with(func(m *timingmodel.Model) { m.MaxBatchedTokens = 50 }),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 50, batch: 8, prefillMs: 3.5, stepMs: 4, rate: 34 / 3.9},
		// 4 tokens: 0.04 + 1 + 25 ms/token = 26.04 s; 4 requests a decode step: 200 x 4 ms.
		{name: "the token budget caps the decode batch", m: with(func(m *timingmodel.Model) { m.MaxBatchedTokens = 4 }),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 4, batch: 4, prefillMs: 26.04, stepMs: 4, rate: 34 / 26.84},
		// No quadratic term: the whole budget, 1 + 0.1 ms/token.
		{name: "linear prefill takes the whole budget", m: with(func(m *timingmodel.Model) { m.PrefillQuadratic = 0 }),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 1000, batch: 8, prefillMs: 1.1, stepMs: 4, rate: 34 / 1.5},
		// 10u^2 - 10u + 5: least at u = 0.5, 2.5 ms; 100 steps 0.25 s.
		{name: "convex decode: the vertex", m: with(func(m *timingmodel.Model) { m.DecodeQuadratic, m.DecodeLinear, m.DecodeBase = 10, -10, 5 }),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 100, batch: 8, prefillMs: 3, stepMs: 2.5, rate: 34 / 3.25},
		{name: "the minimum step binds", m: with(func(m *timingmodel.Model) {
			m.DecodeQuadratic, m.DecodeLinear, m.DecodeBase, m.DecodeMin = 10, -10, 5, 3
		}),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 100, batch: 8, prefillMs: 3, stepMs: 3, rate: 34 / 3.3},
		{name: "all at once: no rate", m: base, uncached: 1000, decode: 800,
			chunk: 100, batch: 8, prefillMs: 3, stepMs: 4, rate: math.Inf(1)},
		{name: "no work", m: base, span: 17 * time.Second, chunk: 100, batch: 8, prefillMs: 3, stepMs: 4, rate: math.Inf(1)},
	}
	near := func(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-9*math.Abs(b) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capacityBound(tt.m, 8, 2, tt.uncached, tt.decode, tt.span)
			if c.PrefillChunk != tt.chunk || c.DecodeBatch != tt.batch || !near(c.PrefillMsPerToken, tt.prefillMs) ||
				!near(c.DecodeMsPerStep, tt.stepMs) || !near(c.Rate, tt.rate) {
				t.Fatalf("chunk %d, batch %d, %v ms/token, %v ms/step, rate %v; want %d, %d, %v, %v, %v",
					c.PrefillChunk, c.DecodeBatch, c.PrefillMsPerToken, c.DecodeMsPerStep, c.Rate,
					tt.chunk, tt.batch, tt.prefillMs, tt.stepMs, tt.rate)
			}
			if !math.IsInf(tt.rate, 1) {
				if b := c.Busy(tt.rate / 2); !near(b, 0.5) {
					t.Fatalf("busy at half the bound %v, want 0.5", b)
				}
			}
		})
	}
}

// TestComputeBoundsCapacity checks what ComputeBounds feeds the bound on a
// tiny trace, with the engines' published model (4 workers, 16-token
// blocks, 256 requests a step, 8192-token budget).
func TestComputeBoundsCapacity(t *testing.T) {
	cfg := smallConfig()
	trace := []Request{
		{Arrival: 0, InputLength: 1024, OutputLength: 257, HashIDs: []uint64{1, 2}},
		{Arrival: 10 * time.Second, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 3}},
		{Arrival: 20 * time.Second, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
	}
	c := ComputeBounds(trace, cfg).Capacity
	// Misses: all 1024 of the first; the second half of the second; the
	// third repeats the first but computes its last block (16 tokens).
	// Decode: 256 tokens after the first's first.
	if c.UncachedTokens != 1024+512+16 || c.DecodeTokens != 256 || c.Span != 20*time.Second || c.Workers != 4 {
		t.Fatalf("uncached %d, decode %d, span %v, workers %d; want 1552, 256, 20s, 4", c.UncachedTokens, c.DecodeTokens, c.Span, c.Workers)
	}
	// Prefill: sqrt(16.50142 / 4.209989e-7) = 6260.66, and 6261 tokens
	// cost 4.209989e-7 x 6261 + 1.518344e-2 + 16.50142/6261 = 0.0204549
	// ms each. Decode: -25.74u^2 + 54.01u + 5.74 is least at u = 0,
	// 5.74 ms, for a batch of 256: one step. 80 engine-s over
	// 1552 x 0.0204549 + 5.74 = 37.486 ms of work.
	if c.PrefillChunk != 6261 || math.Abs(c.PrefillMsPerToken-0.0204549027) > 1e-9 || c.DecodeMsPerStep != 5.74 || c.DecodeBatch != 256 {
		t.Fatalf("chunk %d at %v ms/token, decode %v ms x %d", c.PrefillChunk, c.PrefillMsPerToken, c.DecodeMsPerStep, c.DecodeBatch)
	}
	if math.Abs(c.Rate-2134.1296) > 1e-3 {
		t.Fatalf("capacity bound x%v, want x2134.1296", c.Rate)
	}
}
