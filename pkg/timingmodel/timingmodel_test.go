package timingmodel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

func TestProtoRoundTrip(t *testing.T) {
	m := Default().Scaled(4)
	m.MaxRunning = 256
	if got := FromProto(m.Proto()); got != m {
		t.Fatalf("round trip: %+v, want %+v", got, m)
	}
	for name, p := range map[string]*workerv1.TimingModel{
		"nil": nil, "zero": {}, "nan": {PrefillMsPerToken: math.NaN(), MaxBatchedTokens: 1},
		"negative": {PrefillMsPerToken: -1, PrefillMsPerBatch: 2, MaxBatchedTokens: 1}, "no budget": {PrefillMsPerToken: 1},
	} {
		if got := FromProto(p); got != Default() {
			t.Errorf("%s: FromProto = %+v, want the default", name, got)
		}
	}
	if d := cmp.Diff(Default().Proto(), FromProto(nil).Proto(), protocmp.Transform()); d != "" {
		t.Fatal(d)
	}
}

func TestTTFT(t *testing.T) {
	m := Default()
	tests := []struct {
		name                    string
		queued, fresh, decoding int
		usage                   float64
		want                    float64
	}{
		{"nothing to do", 0, 0, 0, 0, 0},
		// Engine time: an idle engine's time to first token less the
		// request's own overhead, which no step pays.
		{"one chunk", 0, 1000, 0, 0, m.PrefillMs(1000) - m.PrefillPerRequest},
		{"queue ahead", 8192, 1000, 0, 0, m.PrefillMs(8192) + m.PrefillMs(1000) - 2*m.PrefillPerRequest},
		// Attention is per sequence: the prompt's second chunk attends
		// to its first, so two chunks cost the whole prompt's attention
		// (16384^2) and two per-step constants, more than two lone
		// chunks (2 x 8192^2).
		{"two chunks exactly", 0, 16384, 0, 0, m.PrefillMs(16384) - m.PrefillPerRequest + m.StepConstant()},
		// With requests decoding, each step's decode pays the per-step
		// constant once; the chunk adds its tokens' compute.
		{"decoders share the steps", 0, 8000, 192, 0.5, m.PrefillMs(8000) - m.PrefillPerBatch + m.DecodeMs(0.5)},
		{"decoders split the chunk", 0, 8100, 192, 0.5, m.PiggybackMs(8100) + 2*m.DecodeMs(0.5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.TTFTMs(tt.queued, tt.fresh, tt.decoding, tt.usage, 1); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("TTFTMs = %v, want %v", got, tt.want)
			}
		})
	}
	if a, b := m.TTFTMs(0, 5000, 3, 0.2, 2), 2*(m.PrefillMs(5000)-m.PrefillPerBatch)+m.DecodeMs(0.2); math.Abs(a-b) > 1e-9 {
		t.Fatalf("weight 2: %v, want %v", a, b)
	}
}

// ttftBefore is TTFTMs written out step by step: the steps' per-step
// constants (none while requests decode: a step that decodes too pays the
// prefill without it, PiggybackMs), the tokens' linear time, the
// attention of the queued tokens and of the request's as two uncached
// prompts, and a decode step per step. TTFTPairMs shares its step costs
// and must not move a decision by a bit, so the sums are in the same
// order as Steps'.
func ttftBefore(m Model, queuedTokens, newTokens, decoding int, usage, weight float64) float64 {
	x := queuedTokens + newTokens
	if x <= 0 {
		return 0
	}
	chunk := max(m.MaxBatchedTokens-decoding, 1)
	full := (x - 1) / chunk
	q, n := float64(max(queuedTokens, 0)), float64(newTokens)
	perBatch := m.StepConstant()
	if decoding > 0 {
		perBatch = 0
	}
	prefill := m.PrefillQuadratic*(q*q+n*n) + m.PrefillPerToken*float64(x) + perBatch*float64(full+1)
	cost := weight * prefill
	if decoding > 0 {
		cost += float64(full+1) * m.DecodeMs(usage)
	}
	return cost
}

func TestTTFTPairMatchesBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	models := []Model{Default(), Default().Scaled(3.7), {PrefillPerToken: 0.01, PrefillPerBatch: 2, DecodeBase: 4, MaxBatchedTokens: 512}}
	huge := Model{PrefillPerToken: 1e-9, PrefillPerBatch: 1, DecodeBase: 4, MaxBatchedTokens: 1 << 33}
	models = append(models, huge)
	for i := range 20_000 {
		m := models[i%len(models)]
		queued, fresh, decoding := rng.IntN(40_000)-100, rng.IntN(20_000), rng.IntN(m.MaxBatchedTokens+300)
		if i%10 == 0 {
			// Token counts past 32 bits (the division is 32-bit below).
			queued, fresh = rng.IntN(1<<34)-(1<<31), rng.IntN(1<<33)
			decoding = rng.IntN(min(m.MaxBatchedTokens+300, 1<<33))
		}
		if i%7 == 3 {
			// Around a chunk's edges: the pair shares the queue's division
			// while queued's remainder and fresh stay under a chunk.
			chunk := max(m.MaxBatchedTokens-decoding, 1)
			queued = chunk*rng.IntN(4) + rng.IntN(3) - 1
			fresh = max(chunk*rng.IntN(3)+rng.IntN(5)-2-queued%chunk, 0)
		}
		usage, weight := rng.Float64()*1.2-0.1, rng.Float64()*3
		want := ttftBefore(m, queued, fresh, decoding, usage, weight)
		if got := m.TTFTMs(queued, fresh, decoding, usage, weight); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("TTFTMs(%d, %d, decoding %d, usage %v, weight %v) = %v, want %v", queued, fresh, decoding, usage, weight, got, want)
		}
		wantAhead := ttftBefore(m, queued, 0, decoding, usage, weight)
		ttft, ahead := m.TTFTPairMs(queued, fresh, decoding, usage, weight)
		if math.Float64bits(ttft) != math.Float64bits(want) || math.Float64bits(ahead) != math.Float64bits(wantAhead) {
			t.Fatalf("TTFTPairMs(%d, %d, decoding %d, usage %v, weight %v) = %v, %v, want %v, %v", queued, fresh, decoding, usage, weight, ttft, ahead, want, wantAhead)
		}
	}
}

// TestSpan: a prefill of x tokens is (x-1)/chunk whole chunks, then the
// last; SpanPair is the two spans Span gives; PrefillMs and DecodeMs are
// its weighted prefill and its decode steps, none for no tokens.
func TestSpan(t *testing.T) {
	m := Model{PrefillPerToken: 1, PrefillPerBatch: 3, DecodeBase: 10, MaxBatchedTokens: 102}
	// Chunks of 100 tokens beside a decode step of 10 ms each, which pays
	// the per-step constant: a token's prefill adds 1 ms.
	s := m.Steps(2, 0)
	tests := []struct {
		x              int
		full           int
		prefill, decod float64
		decodes        bool
	}{
		{x: -5}, {x: 0},
		{x: 1, full: 0, prefill: 1, decod: 10, decodes: true},
		{x: 100, full: 0, prefill: 100, decod: 10, decodes: true},
		{x: 101, full: 1, prefill: 100 + 1, decod: 20, decodes: true},
		{x: 350, full: 3, prefill: 3*100 + 50, decod: 40, decodes: true},
	}
	for _, tt := range tests {
		sp := s.Span(tt.x)
		if sp.Tokens != tt.x || sp.Full != tt.full {
			t.Fatalf("Span(%d) = %+v, want %d whole chunks", tt.x, sp, tt.full)
		}
		if want := float64(max(tt.x, 0) * max(tt.x, 0)); sp.Attn != want {
			t.Fatalf("Span(%d).Attn = %v, want %v (one uncached prompt)", tt.x, sp.Attn, want)
		}
		if got := s.PrefillMs(sp, 2); got != 2*tt.prefill {
			t.Fatalf("PrefillMs(%+v, 2) = %v, want %v", sp, got, 2*tt.prefill)
		}
		if d, ok := s.DecodeMs(sp); d != tt.decod || ok != tt.decodes {
			t.Fatalf("DecodeMs(%+v) = %v, %v, want %v, %v", sp, d, ok, tt.decod, tt.decodes)
		}
		for _, q := range []int{-1, 0, 1, 99, 100, 250} {
			// The steps of the whole and of the queue; the attention
			// of two uncached prompts.
			n := max(tt.x, 0)
			all, ahead := s.SpanPair(q, n)
			wantAll, wantAhead := s.Span(q+n), s.Span(q)
			wantAll.Attn = wantAhead.Attn + float64(n*n)
			if q+n <= 0 {
				wantAll.Attn = 0
			}
			if all != wantAll || ahead != wantAhead {
				t.Fatalf("SpanPair(%d, %d) = %+v, %+v, want %+v, %+v", q, tt.x, all, ahead, wantAll, wantAhead)
			}
		}
	}
	idle := m.Steps(0, 0)
	if d, ok := idle.DecodeMs(idle.Span(50)); ok || d != 0 {
		t.Fatalf("DecodeMs with nothing decoding = %v, %v, want none", d, ok)
	}
	// Nothing decoding: every chunk pays the constant (103 ms a chunk of
	// 102 tokens, 3 + 48 the rest).
	if got := idle.PrefillMs(idle.Span(150), 1); got != 105+51 {
		t.Fatalf("idle PrefillMs(150) = %v, want %v", got, 105+51)
	}
}

// TestStepMs: a step's fixed cost is paid once. A step of prompt tokens
// alone costs Prefill; one that decodes costs Decode plus the prompt
// tokens' compute, without Prefill's per-step constant.
func TestStepMs(t *testing.T) {
	m := Model{PrefillQuadratic: 0.5, PrefillPerToken: 1, PrefillPerBatch: 20, DecodeBase: 6, DecodeLinear: 10, MaxBatchedTokens: 64}
	tests := []struct {
		name     string
		tokens   float64
		decoding bool
		usage    float64
		want     float64
	}{
		{"nothing", 0, false, 0, 0},
		{"prefill alone", 4, false, 0, 0.5*16 + 4 + 20},
		{"decode alone", 0, true, 0.5, 6 + 5},
		{"one prompt token beside decodes", 1, true, 0, 6 + 0.5 + 1},
		{"a chunk beside decodes", 4, true, 0.5, 11 + 8 + 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.StepMs(tt.tokens, tt.decoding, tt.usage); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("StepMs(%v, %v, %v) = %v, want %v", tt.tokens, tt.decoding, tt.usage, got, tt.want)
			}
		})
	}
	// The router's prediction of a prompt beside decoding requests is the
	// engine's steps to the bit: one chunk of 40 tokens, two decoding.
	if got, want := m.TTFTMs(0, 40, 2, 0.5, 1), m.StepMs(40, true, 0.5); got != want {
		t.Fatalf("TTFTMs = %v, StepMs = %v", got, want)
	}
}

// TestAttention: a chunk's attention term, and a step's cost with it.
func TestAttention(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, n int
		want float64
	}{
		{"no context", 0, 1000, 1e6},
		{"after a prefix", 800, 200, 1000*1000 - 800*800},
		{"one token after a long context", 7000, 1, 7001*7001 - 7000*7000},
		{"nothing computed", 500, 0, 0},
		{"negative parts count as none", -5, -3, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Attention(tt.a, tt.n); got != tt.want {
				t.Fatalf("Attention(%d, %d) = %v, want %v", tt.a, tt.n, got, tt.want)
			}
		})
	}
	// Chunks of a prompt add up to its whole square, however it is cut.
	if got := Attention(0, 300) + Attention(300, 500) + Attention(800, 4200); got != 5000*5000 {
		t.Fatalf("three chunks of 5000 tokens: %v, want %v", got, 5000*5000)
	}
	m := Default()
	for _, tt := range []struct {
		name     string
		tokens   float64
		attn     float64
		decoding bool
		u, want  float64
	}{
		// One uncached prompt alone: StepMs's own case.
		{"a prompt alone", 1000, 1e6, false, 0, m.StepMs(1000, false, 0)},
		{"a prompt beside decodes", 1000, 1e6, true, 0.5, m.StepMs(1000, true, 0.5)},
		{"two prompts of 500", 1000, 2 * 500 * 500, false, 0, m.StepConstant() + 1000*m.PrefillPerToken + 5e5*m.PrefillQuadratic},
		{"decodes alone", 0, 0, true, 0.5, m.DecodeMs(0.5)},
		{"an empty step", 0, 0, false, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.StepAttentionMs(tt.tokens, tt.attn, tt.decoding, tt.u); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("StepAttentionMs = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPerRequestSplit works the split of the prefill constant by hand with
// round numbers: PrefillPerBatch 10, of which PrefillPerRequest 6 is each
// request's overhead, leaving a step constant of 4; 1 ms per prompt token,
// no attention, 100 tokens a step, a decode step of 3 ms.
func TestPerRequestSplit(t *testing.T) {
	m := Model{PrefillPerToken: 1, PrefillPerBatch: 10, PrefillPerRequest: 6, DecodeBase: 3, DecodeMin: 1, MaxBatchedTokens: 100}
	steps := m.Steps(0, 0)
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		// An idle engine's time to first token keeps the whole constant.
		{"PrefillMs(50): 50 + 10", m.PrefillMs(50), 60},
		{"StepConstant: 10 - 6", m.StepConstant(), 4},
		// A step of prompt tokens alone pays the step constant only.
		{"StepMs(50, alone): 50 + 4", m.StepMs(50, false, 0), 54},
		{"StepAttentionMs(50, alone): 50 + 4", m.StepAttentionMs(50, 0, false, 0), 54},
		// Beside decoding requests the decode step pays the constant.
		{"StepMs(50, decoding): 3 + 50", m.StepMs(50, true, 0), 53},
		{"StepMs(0, alone)", m.StepMs(0, false, 0), 0},
		// 250 tokens alone are three steps (100, 100, 50): 250 + 3 x 4;
		// the overhead is the request's, not the steps'.
		{"Steps.PrefillMs(250): 250 + 3 x 4", steps.PrefillMs(steps.Span(250), 1), 262},
		{"TTFTMs(150 queued, 100 new): 250 + 3 x 4", m.TTFTMs(150, 100, 0, 0, 1), 262},
		// The client sees the first token after the engine's time and
		// the request's overhead: an idle engine's is PrefillMs.
		{"FirstTokenMs(50 alone): 50 + 4 + 6", m.FirstTokenMs(0, 50, 0, 0), 60},
		{"FirstTokenMs(150 queued, 100 new): 262 + 6", m.FirstTokenMs(150, 100, 0, 0), 268},
		// Beside 2 decoding requests, chunks of 98: 3 steps of 3 ms.
		{"FirstTokenMs(250, decoding): 250 + 3 x 3 + 6", m.FirstTokenMs(0, 250, 2, 0), 265},
		{"Steps.RequestMs", steps.RequestMs(), 6},
		// An engine that publishes no overhead keeps its steps.
		{"EngineOnly: StepConstant 4", m.EngineOnly().StepConstant(), 4},
		{"EngineOnly: PrefillMs(50): 50 + 4", m.EngineOnly().PrefillMs(50), 54},
		{"EngineOnly: TTFTMs(150 queued, 100 new)", m.EngineOnly().TTFTMs(150, 100, 0, 0, 1), 262},
		{"EngineOnly: FirstTokenMs(50 alone): 50 + 4", m.EngineOnly().FirstTokenMs(0, 50, 0, 0), 54},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

// TestFirstTokenMs: the time to first token a client sees is the
// engine's (TTFTMs) plus the request's overhead, whatever the load; on an
// idle engine, for a prompt within a step, it is the fit's own PrefillMs.
func TestFirstTokenMs(t *testing.T) {
	for _, m := range []Model{Default(), Default().Scaled(0.05), Default().EngineOnly()} {
		if got, want := m.FirstTokenMs(0, 1000, 0, 0), m.PrefillMs(1000); math.Abs(got-want) > 1e-9*want {
			t.Errorf("%+v: FirstTokenMs(0, 1000) = %v, want PrefillMs %v", m, got, want)
		}
		for _, tt := range []struct{ queued, fresh, decoding int }{{0, 20000, 0}, {5000, 3000, 40}, {0, 1, 200}} {
			want := m.TTFTMs(tt.queued, tt.fresh, tt.decoding, 0.3, 1) + m.PrefillPerRequest
			if got := m.FirstTokenMs(tt.queued, tt.fresh, tt.decoding, 0.3); got != want {
				t.Errorf("%+v: FirstTokenMs(%d, %d, %d) = %v, want %v", m, tt.queued, tt.fresh, tt.decoding, got, want)
			}
		}
		if e := m.EngineOnly(); !e.Valid() || e.StepConstant() != m.StepConstant() || e.PrefillPerRequest != 0 {
			t.Errorf("%+v: EngineOnly = %+v: valid %v, step constant %v (want %v)", m, e, e.Valid(), e.StepConstant(), m.StepConstant())
		}
	}
}

// TestPerRequestProto checks the per-request part on the wire: it round
// trips, a model that leaves it unset (an older worker) pays the whole
// constant every step, and one that claims more than the constant is
// invalid (the default).
func TestPerRequestProto(t *testing.T) {
	m := Model{PrefillPerToken: 1, PrefillPerBatch: 10, PrefillPerRequest: 6, DecodeBase: 3, DecodeMin: 1, MaxBatchedTokens: 100, LoraLoadMs: 1}
	if got := FromProto(m.Proto()); got != m {
		t.Fatalf("round trip: %+v, want %+v", got, m)
	}
	older := m.Proto()
	older.PrefillMsPerRequest = 0
	if got := FromProto(older); got.StepConstant() != 10 || got.StepMs(50, false, 0) != 60 {
		t.Errorf("unset: step constant %v, StepMs(50) %v; want 10, 60", got.StepConstant(), got.StepMs(50, false, 0))
	}
	over := m.Proto()
	over.PrefillMsPerRequest = 11
	if got := FromProto(over); got != Default() {
		t.Errorf("per request over the constant: %+v, want the default", got)
	}
	if got := m.Scaled(2); got.PrefillPerRequest != 3 || got.StepConstant() != 2 {
		t.Errorf("Scaled(2): per request %v, step constant %v; want 3, 2", got.PrefillPerRequest, got.StepConstant())
	}
}
