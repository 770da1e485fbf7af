package replay

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestCapacityBound checks the compute bound against numbers worked out by
// hand, on timing models simple enough to do so: two workers, 1000
// uncached prompt tokens, 800 decode tokens, arrivals over 17 s, at most
// 8 requests a step, so the rate is 2 x 17 s over the work.
func TestCapacityBound(t *testing.T) {
	// Apart from attention, PrefillMs(t)/t = 1 + 100/t: least at the
	// whole budget, 1.1 ms/token at 1000; beside decodes 1 ms/token.
	// DecodeMs(u) = -10u^2 + 20u + 4: concave, least at u = 0, 4 ms.
	base := timingmodel.Model{PrefillQuadratic: 0.01, PrefillPerToken: 1, PrefillPerBatch: 100,
		DecodeQuadratic: -10, DecodeLinear: 20, DecodeBase: 4, DecodeMin: 1, MaxBatchedTokens: 1000}
	with := func(f func(*timingmodel.Model)) timingmodel.Model { m := base; f(&m); return m }
	tests := []struct {
		name             string
		m                timingmodel.Model
		uncached, decode int64
		ownSquares       float64
		span             time.Duration
		chunk, batch     int
		prefillMs        float64 // per token
		stepMs           float64
		rate             float64
	}{
		// With decode tokens, a prompt token can ride in a decode step
		// without the per-step constant: 1 ms, at any size (1 kept).
		// 1000 x 1 ms + 800/8 x 4 ms = 1.4 s: 34/1.4.
		{name: "prompt tokens beside decodes", m: base, uncached: 1000, decode: 800, span: 17 * time.Second,
			chunk: 1, batch: 8, prefillMs: 1, stepMs: 4, rate: 34 / 1.4},
		// Their attention, request by request: 0.01 x (600^2 + 400^2)
		// = 5.2 s more.
		{name: "attention of two prompts", m: base, uncached: 1000, decode: 800, ownSquares: 600*600 + 400*400, span: 17 * time.Second,
			chunk: 1, batch: 8, prefillMs: 1, stepMs: 4, rate: 34 / 6.6},
		// No decode tokens: prefill steps alone, 1 + 100/t least at the
		// budget, 1.1 ms/token; 1.1 s.
		{name: "no decodes: the whole budget", m: base, uncached: 1000, span: 17 * time.Second,
			chunk: 1000, batch: 8, prefillMs: 1.1, stepMs: 4, rate: 34 / 1.1},
		// 50 tokens: 1 + 2 = 3 ms/token; 3 s.
		{name: "no decodes: a small step budget", m: with(func(m *timingmodel.Model) { m.MaxBatchedTokens = 50 }),
			uncached: 1000, span: 17 * time.Second, chunk: 50, batch: 8, prefillMs: 3, stepMs: 4, rate: 34 / 3.0},
		// 4 requests a decode step: 200 x 4 ms; 1 s of prompt.
		{name: "the token budget caps the decode batch", m: with(func(m *timingmodel.Model) { m.MaxBatchedTokens = 4 }),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 1, batch: 4, prefillMs: 1, stepMs: 4, rate: 34 / 1.8},
		// 10u^2 - 10u + 5: least at u = 0.5, 2.5 ms; 100 steps 0.25 s.
		{name: "convex decode: the vertex", m: with(func(m *timingmodel.Model) { m.DecodeQuadratic, m.DecodeLinear, m.DecodeBase = 10, -10, 5 }),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 1, batch: 8, prefillMs: 1, stepMs: 2.5, rate: 34 / 1.25},
		{name: "the minimum step binds", m: with(func(m *timingmodel.Model) {
			m.DecodeQuadratic, m.DecodeLinear, m.DecodeBase, m.DecodeMin = 10, -10, 5, 3
		}),
			uncached: 1000, decode: 800, span: 17 * time.Second, chunk: 1, batch: 8, prefillMs: 1, stepMs: 3, rate: 34 / 1.3},
		{name: "all at once: no rate", m: base, uncached: 1000, decode: 800,
			chunk: 1, batch: 8, prefillMs: 1, stepMs: 4, rate: math.Inf(1)},
		{name: "no work", m: base, span: 17 * time.Second, chunk: 1000, batch: 8, prefillMs: 1.1, stepMs: 4, rate: math.Inf(1)},
	}
	near := func(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-9*math.Abs(b) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capacityBound(tt.m, 8, 2, 1000, traceWork{Uncached: tt.uncached, Decode: tt.decode, OwnSquares: tt.ownSquares}, tt.span)
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
	// Prefill: alone, 1.518344e-2 + 16.50142/8192 ms a token in whole
	// budgets; beside decodes 1.518344e-2 ms at any size (one token a
	// step kept), the cheaper; and the attention of the misses, request
	// by request: 4.209989e-7 x (1024^2 + 512^2 + 16^2). Decode:
	// -25.74u^2 + 54.01u + 5.74 is least at u = 0, 5.74 ms, for a batch
	// of 256: one step. 80 engine-s over that work.
	if c.PrefillChunk != 1 || math.Abs(c.PrefillMsPerToken-0.01518344) > 1e-12 || c.DecodeMsPerStep != 5.74 || c.DecodeBatch != 256 {
		t.Fatalf("chunk %d at %v ms/token, decode %v ms x %d", c.PrefillChunk, c.PrefillMsPerToken, c.DecodeMsPerStep, c.DecodeBatch)
	}
	attention := 4.209989e-7 * (1024*1024 + 512*512 + 16*16)
	if got := float64(c.AttentionWork) / float64(time.Millisecond); math.Abs(got-attention) > 1e-6 {
		t.Fatalf("attention %v ms, want %v", got, attention)
	}
	if want := 80e3 / (1552*0.01518344 + attention + 5.74); math.Abs(c.Rate-want) > 1e-3 {
		t.Fatalf("capacity bound x%v, want x%v", c.Rate, want)
	}
	// Out of order, a trace has the same bounds: "earlier" is earlier in
	// arrival. A long prompt at 0 s and a request at 10 s that repeats its
	// first 512 tokens: 1536 + 16 tokens to compute. Slice order would
	// count 512 + 1024.
	ordered := []Request{
		{Arrival: 0, InputLength: 1536, OutputLength: 3, HashIDs: []uint64{1, 2, 3}},
		{Arrival: 10 * time.Second, InputLength: 512, OutputLength: 3, HashIDs: []uint64{1}},
	}
	shuffled := []Request{ordered[1], ordered[0]}
	b, sb := ComputeBounds(ordered, cfg), ComputeBounds(shuffled, cfg)
	if b.Capacity.UncachedTokens != 1536+16 {
		t.Fatalf("uncached %d, want 1552", b.Capacity.UncachedTokens)
	}
	if sb.Capacity != b.Capacity || sb.Pooled != b.Pooled || sb.Reuse != b.Reuse || sb.FloorTTFT != b.FloorTTFT ||
		sb.Horizon(time.Second) != b.Horizon(time.Second) {
		t.Fatalf("out of order: %+v, in order %+v", sb, b)
	}
}

// TestComputeBoundsPooledHost: with host tiers, PooledHost is the pooled
// cache as large as the GPU and host blocks together. One engine of 64
// GPU blocks of 16 tokens holds one prompt of 1,024 tokens; a second
// prompt evicts the first from it, and the first again then hits nothing
// in the GPU alone, all but its last block (63 of 64, what the engines
// can hit) with a host tier of 128 more, its first 32 with one of 32.
func TestComputeBoundsPooledHost(t *testing.T) {
	trace := []Request{
		{Arrival: 0, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
		{Arrival: time.Second, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{3, 4}},
		{Arrival: 2 * time.Second, InputLength: 1024, OutputLength: 1, HashIDs: []uint64{1, 2}},
	}
	for _, tc := range []struct {
		name               string
		host               int
		pooled, pooledHost float64
	}{
		{"no host tier", 0, 0, 0},
		{"host tier of two prompts", 128, 0, 63.0 / 192},
		// 96 blocks keep the second prompt and the first's head (its
		// tail, released first, goes first): 32 hits.
		{"host tier of half a prompt", 32, 0, 32.0 / 192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Workers, cfg.Engine.BlockSize, cfg.Engine.NumGPUBlocks, cfg.Engine.NumHostBlocks = 1, 16, 64, tc.host
			b := ComputeBounds(trace, cfg)
			if b.Pooled != tc.pooled || b.PooledHost != tc.pooledHost || b.Reuse != 63.0/192 {
				t.Fatalf("pooled %v, with host %v, reuse %v; want %v, %v, %v", b.Pooled, b.PooledHost, b.Reuse, tc.pooled, tc.pooledHost, 63.0/192)
			}
		})
	}
}

// TestCapacityBoundHeldBlocks checks the decode line a + b u by hand: the
// held block-steps cost b/N each, on top of a/B per decode token, when
// that beats the cheapest step for every token.
func TestCapacityBoundHeldBlocks(t *testing.T) {
	// Concave: -10u^2 + 20u + 4 lies above its chord 4 + 10u.
	concave := timingmodel.Model{PrefillPerToken: 1, DecodeQuadratic: -10, DecodeLinear: 20, DecodeBase: 4, DecodeMin: 1, MaxBatchedTokens: 1000}
	// Convex: 10u^2 + 6u + 2 lies above its tangent at 0, 2 + 6u.
	convex := concave
	convex.DecodeQuadratic, convex.DecodeLinear, convex.DecodeBase = 10, 6, 2
	// Decreasing: 5 - 2u; no line with b > 0, so the cheapest step, 3 ms.
	falling := concave
	falling.DecodeQuadratic, falling.DecodeLinear, falling.DecodeBase = 0, -2, 5
	tests := []struct {
		name           string
		m              timingmodel.Model
		held           int64
		a, b           float64
		decode, heldMs float64 // ms
	}{
		// 800 tokens / 8 a step = 100 steps x 4 ms; 50,000 block-steps
		// / 1000 blocks x 10 ms = 500 ms.
		{name: "concave: the chord", m: concave, held: 50000, a: 4, b: 10, decode: 400 + 500, heldMs: 500},
		{name: "convex: the tangent at 0", m: convex, held: 50000, a: 2, b: 6, decode: 200 + 300, heldMs: 300},
		// 100 x 2 + 10 x 6 = 260 ms is above 100 x the cheapest 2 ms.
		{name: "few blocks held still count", m: convex, held: 10000, a: 2, b: 6, decode: 200 + 60, heldMs: 60},
		{name: "falling: the cheapest step", m: falling, held: 50000, a: 3, decode: 300},
		{name: "no block held", m: concave, a: 4, decode: 400},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6 }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capacityBound(tt.m, 8, 2, 1000, traceWork{Uncached: 1000, Decode: 800, HeldBlockSteps: tt.held}, 17*time.Second)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			if !near(c.DecodeMsPerStep, tt.a) || !near(c.DecodeMsPerUsage, tt.b) || !near(ms(c.DecodeWork), tt.decode) || !near(ms(c.HeldWork), tt.heldMs) {
				t.Fatalf("a %v, b %v, decode %v, held %v; want %v, %v, %v ms, %v ms", c.DecodeMsPerStep, c.DecodeMsPerUsage, c.DecodeWork, c.HeldWork,
					tt.a, tt.b, tt.decode, tt.heldMs)
			}
			// 1000 prompt tokens at 1 ms (linear: the whole budget a step).
			if want := 34000 / (1000 + tt.decode); !near(c.Rate, want) {
				t.Fatalf("rate %v, want %v", c.Rate, want)
			}
		})
	}
}

func TestPrivateBlockSteps(t *testing.T) {
	tests := []struct {
		prompt, output, bs, unique int
		want                       int64
	}{
		// 1024 tokens = 64 full blocks, 32 unique; 256 decode steps hold
		// 64 + ceil(k/16) blocks: 32 x 256 + (16 x 16 x 17 / 2) = 10368.
		{1024, 257, 16, 32, 32*256 + 2176},
		// 600 tokens: 37 full blocks and a tail of 8; two decode steps
		// hold ceil(601/16) = ceil(602/16) = 38 blocks, 1 past the full.
		{600, 3, 16, 37, 37*2 + 2},
		// The answer's blocks count only with a unique prompt block.
		{1024, 257, 16, 0, 0},
		// One output token: no decode step.
		{1024, 1, 16, 64, 0},
		{16, 5, 16, 1, 1*4 + 4},
	}
	for _, tt := range tests {
		if got := privateBlockSteps(tt.prompt, tt.output, tt.bs, tt.unique); got != tt.want {
			t.Errorf("privateBlockSteps(%d, %d, %d, %d) = %d, want %d", tt.prompt, tt.output, tt.bs, tt.unique, got, tt.want)
		}
	}
	for n := int64(0); n < 100; n++ {
		var sum int64
		for m := int64(1); m <= n; m++ {
			sum += (m + 6) / 7
		}
		if got := ceilSum(n, 7); got != sum {
			t.Fatalf("ceilSum(%d, 7) = %d, want %d", n, got, sum)
		}
	}
}

// TestComputeBoundsHeldBlocks checks the held block-steps ComputeBounds
// finds: a block in two prompts is nobody's own.
func TestComputeBoundsHeldBlocks(t *testing.T) {
	cfg := smallConfig()
	trace := []Request{
		// Its second 32 blocks are its own: 32 x 256 + 2176.
		{Arrival: 0, InputLength: 1024, OutputLength: 257, HashIDs: []uint64{1, 2}},
		// Shares id 1 with the first: 32 of its own, 10 steps, 1 past.
		{Arrival: time.Second, InputLength: 1024, OutputLength: 11, HashIDs: []uint64{1, 3}},
		// 37 full blocks of its own and a tail: 37 x 2 + 2.
		{Arrival: 2 * time.Second, InputLength: 600, OutputLength: 3, HashIDs: []uint64{4, 5}},
	}
	c := ComputeBounds(trace, cfg).Capacity
	if want := int64(10368 + 330 + 76); c.HeldBlockSteps != want || c.DecodeTokens != 268 || c.KVBlocks != 16384 {
		t.Fatalf("held %d, decode %d, blocks %d; want %d, 268, 16384", c.HeldBlockSteps, c.DecodeTokens, c.KVBlocks, want)
	}
	// 268 / 256 x 5.74 + 28.27 x 10774 / 16384 ms.
	want := 268.0/256*5.74 + 28.27*10774/16384
	if got := float64(c.DecodeWork) / float64(time.Millisecond); math.Abs(got-want) > 1e-5 || math.Abs(c.DecodeMsPerUsage-28.27) > 1e-9 {
		t.Fatalf("decode work %v ms at %v ms per usage, want %v ms at 28.27", got, c.DecodeMsPerUsage, want)
	}
}

// TestCapacityWorkIsBelowEngineTime runs generated traces through real
// engines, all requests at once (large batches) and one at a time, and
// checks that the engines' summed step time is at least the bound's work.
func TestCapacityWorkIsBelowEngineTime(t *testing.T) {
	for _, preset := range []string{"low-reuse", "sessions"} {
		g := Presets[preset]
		g.Requests, g.Seed = 60, 7
		trace, err := Generate(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name    string
			workers int
			blocks  int
			atOnce  bool
		}{
			{"at once on two engines", 2, 1 << 16, true},
			{"one at a time on one engine", 1, 1 << 16, false},
			{"at once on one small engine", 1, 12000, true},
		} {
			t.Run(preset+"/"+tt.name, func(t *testing.T) {
				cfg := smallConfig()
				cfg.Workers, cfg.Engine.NumGPUBlocks = tt.workers, tt.blocks
				c := ComputeBounds(trace, cfg).Capacity
				engines := make([]*simengine.Engine, tt.workers)
				for i := range engines {
					if engines[i], err = simengine.New(cfg.Engine); err != nil {
						t.Fatal(err)
					}
				}
				drain := func() {
					for _, e := range engines {
						for i := 0; !e.Idle(); i++ {
							if i > 1e6 {
								t.Fatal("engine never went idle")
							}
							e.Step()
						}
					}
				}
				var tokens []uint32
				for n, r := range trace {
					tokens = Tokens(r, cfg.TraceBlockSize, tokens)
					req := simengine.Request{ID: strconv.Itoa(n), Prompt: append([]uint32(nil), tokens...), MaxTokens: r.OutputLength, Seed: uint64(n + 1)}
					if err := engines[n%len(engines)].Add(req); err != nil {
						t.Fatal(err)
					}
					if !tt.atOnce {
						drain()
					}
				}
				drain()
				var busy time.Duration
				var preempted uint64
				for _, e := range engines {
					busy += e.Stats().Elapsed
					preempted += e.Stats().Preemptions
				}
				if w := c.PrefillWork + c.DecodeWork; busy < w || c.HeldWork <= 0 {
					t.Fatalf("engines busy %v, below the bound's work %v (held %v; %d preemptions)", busy, w, c.HeldWork, preempted)
				}
				t.Logf("busy %v, bound %v (prefill %v, decode %v of which held %v), %d preemptions", busy, c.PrefillWork+c.DecodeWork,
					c.PrefillWork, c.DecodeWork, c.HeldWork, preempted)
			})
		}
	}
}

// TestSplitCapacity checks the split bound's two rates and local share on
// work whose costs are round: prefill-only steps cost 10 ms + 0.01 ms a
// token, at best 0.02 ms a token in 1000-token steps; a prompt token
// beside decodes 0.01 ms.
func TestSplitCapacity(t *testing.T) {
	m := timingmodel.Model{PrefillPerToken: 0.01, PrefillPerBatch: 10, DecodeBase: 5, DecodeMin: 1, MaxBatchedTokens: 1000}
	// 1e6 prompt tokens: 20 s on the prefill pool, 10 s beside decodes;
	// 10 s of decode; 100 s of arrivals.
	c := Capacity{UncachedTokens: 1_000_000, PrefillMsPerToken: 0.01, DecodeWork: 10 * time.Second, Span: 100 * time.Second, Workers: 8}
	inf := math.Inf(1)
	for _, tt := range []struct {
		name                     string
		c                        Capacity
		prefill, decode          int
		always, auto, localShare float64
	}{
		// Prefill pool 5 x 100 / 20 = 25, decode pool 3 x 100 / 10 = 30:
		// a share f = 1/11 on the decode pool evens them at 27.5.
		{"prefill pool binds", c, 5, 3, 25, 27.5, 1.0 / 11},
		// Prefill pool 30, decode pool 20: nothing to move.
		{"decode pool binds", c, 6, 2, 20, 20, 0},
		// No prefill pool: everything on the decode pool, 8 x 100 / 20.
		{"no prefill pool", c, 0, 8, 0, 40, 1},
		{"no decode pool", c, 8, 0, 0, 0, 0},
		{"no span", Capacity{UncachedTokens: 1000, DecodeWork: time.Second}, 4, 4, inf, inf, 0},
		// 5 s of attention more on the prefill pool (25 s: x20): the
		// share f evens 5 x 100 / (25 - 20 f) and 3 x 100 / (10 f + 10)
		// at f = 25/110, x220/9; the attention stays remote.
		{"attention", withAttention(c, 5*time.Second), 5, 3, 20, 220.0 / 9, 25.0 / 110},
		// No prefill pool: the attention too on the decode pool.
		{"attention, no prefill pool", withAttention(c, 5*time.Second), 0, 8, 0, 32, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.c.Split(m, tt.prefill, tt.decode)
			if s.PrefillChunk != 1000 || math.Abs(s.PrefillMsPerToken-0.02) > 1e-12 {
				t.Errorf("prefill-only step %d tokens at %v ms/token, want 1000 at 0.02", s.PrefillChunk, s.PrefillMsPerToken)
			}
			same := func(a, b float64) bool { return a == b || math.Abs(a-b) < 1e-9*max(1, math.Abs(b)) }
			if !same(s.Always, tt.always) || !same(s.Auto, tt.auto) || !same(s.LocalShare, tt.localShare) {
				t.Errorf("always x%v, auto x%v, local share %v; want x%v, x%v, %v", s.Always, s.Auto, s.LocalShare, tt.always, tt.auto, tt.localShare)
			}
		})
	}
}

// withAttention is c with attention work a, in its prefill work too.
func withAttention(c Capacity, a time.Duration) Capacity {
	c.AttentionWork, c.PrefillWork = a, c.PrefillWork+a
	return c
}

// TestSplitCapacityBelowAggregated checks, on generated traces, that no
// split's bound exceeds the aggregated one (aggregated engines may do
// every part of the work at its least cost), and that letting prompts run
// on the decode pool never lowers it.
func TestSplitCapacityBelowAggregated(t *testing.T) {
	for _, preset := range []string{"long-context", "sessions"} {
		g := Presets[preset]
		g.Requests, g.Seed = 200, 5
		trace, err := Generate(g)
		if err != nil {
			t.Fatal(err)
		}
		cfg := smallConfig()
		cfg.Workers = 8
		c := ComputeBounds(trace, cfg).Capacity
		for p := range 9 {
			s := c.Split(cfg.Engine.Timing(), p, 8-p)
			if s.Always > s.Auto || s.Auto > c.Rate*(1+1e-12) || s.LocalShare < 0 || s.LocalShare > 1 {
				t.Errorf("%s %d+%d: always x%v, auto x%v (local %v), aggregated x%v", preset, p, 8-p, s.Always, s.Auto, s.LocalShare, c.Rate)
			}
		}
	}
}

// TestPrefillPoolWorkIsBelowEngineTime computes prompts as prefill legs
// (held for a handoff, never decoded) on a real engine, all at once and
// one at a time, and checks that its summed step time is at least the
// split bound's prefill cost of the tokens it computed.
func TestPrefillPoolWorkIsBelowEngineTime(t *testing.T) {
	g := Presets["long-context"]
	g.Requests, g.Seed = 40, 3
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig()
	perToken := Capacity{}.Split(cfg.Engine.Timing(), 1, 1).PrefillMsPerToken
	for _, atOnce := range []bool{true, false} {
		e, err := simengine.New(cfg.Engine)
		if err != nil {
			t.Fatal(err)
		}
		// A leg's blocks are released as soon as it is done, as after a
		// handoff: the legs waiting need them.
		drain := func() {
			for i := 0; !e.Idle(); i++ {
				if i > 1e6 {
					t.Fatal("engine never went idle")
				}
				for _, o := range e.Step().Outputs {
					if o.Finish != simengine.FinishHeld {
						t.Fatalf("output %+v of a prefill leg, want its first token held", o)
					}
					if _, err := e.Release(o.RequestID); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		var tokens []uint32
		for n, r := range trace {
			tokens = Tokens(r, cfg.TraceBlockSize, tokens)
			id := strconv.Itoa(n)
			if err := e.Add(simengine.Request{ID: id, Prompt: append([]uint32(nil), tokens...), MaxTokens: r.OutputLength, Seed: uint64(n + 1), Hold: true}); err != nil {
				t.Fatal(err)
			}
			if !atOnce {
				drain()
			}
		}
		drain()
		st := e.Stats()
		if st.PrefillTokens == 0 || st.GeneratedTokens != uint64(len(trace)) {
			t.Fatalf("at once %v: %d prompt tokens computed, %d tokens made; want some, and one per request", atOnce, st.PrefillTokens, st.GeneratedTokens)
		}
		if w := timingmodel.Duration(float64(st.PrefillTokens) * perToken); st.Elapsed < w {
			t.Errorf("at once %v: engine busy %v for %d prompt tokens, below the bound's %v", atOnce, st.Elapsed, st.PrefillTokens, w)
		}
	}
}
