package simengine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/testing/protocmp"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestMain checks that the engine, a pure step function, starts no
// goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newEngine returns an engine with small, test-friendly sizes and no delay
// unless cfg says otherwise.
func newEngine(t testing.TB, edit func(*Config)) *Engine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.BlockSize = 4
	cfg.NumGPUBlocks = 64
	cfg.SpeedupRatio = 0
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// prompt returns n tokens starting at from.
func prompt(from uint32, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = from + uint32(i)
	}
	return p
}

// drain steps the engine until it is idle and returns every request's
// generated tokens, its last output and all events. It fails the test if
// the engine does not finish in maxSteps.
type drained struct {
	tokens map[string][]uint32
	last   map[string]Output
	events []Event
	steps  []StepResult
}

func drain(t testing.TB, e *Engine, maxSteps int) drained {
	t.Helper()
	d := drained{tokens: map[string][]uint32{}, last: map[string]Output{}}
	for i := 0; !e.Idle(); i++ {
		if i == maxSteps {
			t.Fatalf("engine not idle after %d steps: %+v", maxSteps, e.Metrics())
		}
		res := e.Step()
		d.steps = append(d.steps, res)
		for _, o := range res.Outputs {
			d.tokens[o.RequestID] = append(d.tokens[o.RequestID], o.Tokens...)
			d.last[o.RequestID] = o
		}
		d.events = append(d.events, res.Events...)
	}
	return d
}

// replay applies events to a set of sequence hashes and checks that they
// are consistent with it: ids without gaps from next, no double store, no
// removal of an absent block.
// fataler is what replay needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func replay(t fataler, set map[uint64]bool, next uint64, events []Event) uint64 {
	t.Helper()
	for _, ev := range events {
		if ev.ID != next {
			t.Fatalf("event id %d, want %d", ev.ID, next)
		}
		next++
		switch ev.Kind {
		case EventStored:
			for _, b := range ev.Blocks {
				if set[b.Sequence] {
					t.Fatalf("event %d stores %#x, already stored", ev.ID, b.Sequence)
				}
				set[b.Sequence] = true
			}
		case EventRemoved:
			for _, h := range ev.Removed {
				if !set[h] {
					t.Fatalf("event %d removes %#x, not stored", ev.ID, h)
				}
				delete(set, h)
			}
		case EventCleared:
			clear(set)
		default:
			t.Fatalf("event %d has kind %v", ev.ID, ev.Kind)
		}
	}
	return next
}

// cached returns the engine's prefix cache as a set.
func cached(e *Engine) map[uint64]bool {
	set := map[uint64]bool{}
	for h := range e.pool.cache {
		set[h] = true
	}
	return set
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"no delay", func(c *Config) { c.SpeedupRatio = 0 }, true},
		{"block size", func(c *Config) { c.BlockSize = 0 }, false},
		{"blocks", func(c *Config) { c.NumGPUBlocks = -1 }, false},
		{"seqs", func(c *Config) { c.MaxNumSeqs = 0 }, false},
		{"batched tokens", func(c *Config) { c.MaxNumBatchedTokens = 0 }, false},
		{"negative speedup", func(c *Config) { c.SpeedupRatio = -1 }, false},
		{"empty vocabulary", func(c *Config) { c.OutputTokenMin = c.OutputTokenMax }, false},
		{"most lora slots", func(c *Config) { c.MaxLoras = MaxLoras }, true},
		{"too many lora slots", func(c *Config) { c.MaxLoras = MaxLoras + 1 }, false},
		{"negative lora slots", func(c *Config) { c.MaxLoras = -1 }, false},
		{"negative lora load", func(c *Config) { c.LoraLoadMs = -1 }, false},
		{"NaN lora load", func(c *Config) { c.LoraLoadMs = math.NaN() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			_, err := New(cfg)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Errorf("New = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestAddErrors(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"no id", Request{Prompt: prompt(1, 4), MaxTokens: 1}, ErrInvalidRequest},
		{"no prompt", Request{ID: "a", MaxTokens: 1}, ErrInvalidRequest},
		{"no output", Request{ID: "a", Prompt: prompt(1, 4)}, ErrInvalidRequest},
		{"negative min tokens", Request{ID: "a", Prompt: prompt(1, 4), MaxTokens: 1, MinTokens: -1}, ErrInvalidRequest},
		{"duplicate", Request{ID: "dup", Prompt: prompt(1, 4), MaxTokens: 1}, ErrDuplicateRequest},
		// 64 blocks of 4 tokens: 250 + 7 - 1 tokens need 64 blocks, 250 + 8 - 1 need 65.
		{"fits exactly", Request{ID: "b", Prompt: prompt(1, 250), MaxTokens: 7}, nil},
		{"too large", Request{ID: "c", Prompt: prompt(1, 250), MaxTokens: 8}, ErrRequestTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, nil)
			if err := e.Add(Request{ID: "dup", Prompt: prompt(9, 3), MaxTokens: 1}); err != nil {
				t.Fatal(err)
			}
			if err := e.Add(tt.req); !errors.Is(err, tt.want) {
				t.Errorf("Add = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestTimingFormula(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"prefill 0 tokens", PrefillTime(0, 1), 0},
		{"prefill 1 token", PrefillTime(1, 1), 16516604 * time.Nanosecond},
		{"prefill 1000 tokens", PrefillTime(1000, 1), 32105859 * time.Nanosecond},
		{"prefill 8192 tokens", PrefillTime(8192, 1), 169136918 * time.Nanosecond},
		{"prefill 1000 tokens x2", PrefillTime(1000, 2), 16052929 * time.Nanosecond},
		{"decode empty", DecodeTime(0, 1), ms(5.74)},
		{"decode half", DecodeTime(0.5, 1), ms(26.31)},
		{"decode full", DecodeTime(1, 1), ms(34.01)},
		{"decode full x10", DecodeTime(1, 10), 3401 * time.Microsecond},
		{"decode clamps above 1", DecodeTime(2, 1), ms(34.01)},
		{"prefill no delay", PrefillTime(1000, 0), 0},
		{"decode no delay", DecodeTime(0.5, 0), 0},
		// 26.31 ms of decode + 32.1058589 - 16.50142 ms of prompt.
		{"1000 prompt tokens beside decodes", StepTime(1000, true, 0.5, 1), 41914439 * time.Nanosecond},
		{"decodes alone", StepTime(0, true, 0.5, 1), ms(26.31)},
		// 32.1058589 ms less the request's 10.76142 ms of overhead,
		// which no step pays.
		{"prompt alone", StepTime(1000, false, 0, 1), 21344439 * time.Nanosecond},
		{"request overhead", RequestOverhead(1), 10761420 * time.Nanosecond},
		{"request overhead x2", RequestOverhead(2), 5380710 * time.Nanosecond},
		{"empty step", StepTime(0, false, 0.5, 1), 0},
		{"mixed no delay", StepTime(1000, true, 0.5, 0), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestStepDurations(t *testing.T) {
	tests := []struct {
		name    string
		speedup float64
		// want is the duration of the first (prefill of 40 tokens) and
		// second (decode of one request) steps.
		want [2]time.Duration
	}{
		{"real time", 1, [2]time.Duration{PrefillTime(40, 1) - RequestOverhead(1), DecodeTime(float64(11)/64, 1)}},
		{"ten times faster", 10, [2]time.Duration{PrefillTime(40, 10) - RequestOverhead(10), DecodeTime(float64(11)/64, 10)}},
		{"no delay", 0, [2]time.Duration{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.SpeedupRatio = tt.speedup })
			if err := e.Add(Request{ID: "a", Prompt: prompt(1, 40), MaxTokens: 3}); err != nil {
				t.Fatal(err)
			}
			d := drain(t, e, 10)
			if len(d.steps) != 3 {
				t.Fatalf("%d steps, want 3", len(d.steps))
			}
			// The decode step holds 41 tokens' KV: 11 blocks of 4.
			got := [2]time.Duration{d.steps[0].Duration, d.steps[1].Duration}
			if got != tt.want {
				t.Errorf("durations %v, want %v", got, tt.want)
			}
			var sum time.Duration
			for _, s := range d.steps {
				sum += s.Duration
			}
			if e.Stats().Elapsed != sum {
				t.Errorf("Elapsed %v, want the sum of steps %v", e.Stats().Elapsed, sum)
			}
		})
	}
}

// TestMixedStepPaysOneConstant: a step that prefills a prompt beside a
// decoding request costs the decode step plus the prompt tokens' compute,
// not a whole prefill step on top of the decode step.
func TestMixedStepPaysOneConstant(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.SpeedupRatio = 1 })
	if err := e.Add(Request{ID: "a", Prompt: prompt(1, 40), MaxTokens: 5}); err != nil {
		t.Fatal(err)
	}
	if res, want := e.Step(), PrefillTime(40, 1)-RequestOverhead(1); res.Duration != want {
		t.Fatalf("prefill alone: %v, want %v", res.Duration, want)
	}
	if err := e.Add(Request{ID: "b", Prompt: prompt(2, 40), MaxTokens: 5}); err != nil {
		t.Fatal(err)
	}
	res := e.Step()
	if res.PrefillTokens != 40 || res.DecodeTokens != 1 {
		t.Fatalf("step computed %d prompt and %d decode tokens, want 40 and 1", res.PrefillTokens, res.DecodeTokens)
	}
	// a holds 41 tokens' KV (11 blocks of 4), b 40 (10 blocks), of 64.
	perBatch := timingmodel.Duration(timingmodel.Default().PrefillPerBatch)
	want := DecodeTime(21.0/64, 1) + PrefillTime(40, 1) - perBatch
	if d := res.Duration - want; d < -time.Nanosecond || d > time.Nanosecond {
		t.Fatalf("mixed step: %v, want %v (decode %v + prompt %v - constant %v)", res.Duration, want, DecodeTime(21.0/64, 1), PrefillTime(40, 1), perBatch)
	}
}

func TestOutputTokens(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.OutputTokenMin, c.OutputTokenMax = 100, 110 })
	reqs := []Request{
		{ID: "a", Prompt: prompt(1, 10), MaxTokens: 50},
		{ID: "same-prompt", Prompt: prompt(1, 10), MaxTokens: 50},
		{ID: "other-seed", Prompt: prompt(1, 10), MaxTokens: 50, Seed: 7},
		{ID: "other-prompt", Prompt: prompt(2, 10), MaxTokens: 50},
	}
	for _, r := range reqs {
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	d := drain(t, e, 100)
	for _, r := range reqs {
		toks := d.tokens[r.ID]
		if len(toks) != r.MaxTokens {
			t.Errorf("%s: %d tokens, want %d", r.ID, len(toks), r.MaxTokens)
		}
		for _, tok := range toks {
			if tok < 100 || tok >= 110 {
				t.Errorf("%s: token %d outside [100, 110)", r.ID, tok)
			}
		}
		if o := d.last[r.ID]; o.Finish != FinishLength || o.Usage != (Usage{PromptTokens: 10, CompletionTokens: 50, CachedPromptTokens: o.Usage.CachedPromptTokens}) {
			t.Errorf("%s: last output %+v", r.ID, o)
		}
	}
	if !slices.Equal(d.tokens["a"], d.tokens["same-prompt"]) {
		t.Error("equal prompts generated different tokens")
	}
	if slices.Equal(d.tokens["a"], d.tokens["other-seed"]) || slices.Equal(d.tokens["a"], d.tokens["other-prompt"]) {
		t.Error("a different seed or prompt generated the same tokens")
	}
}

func TestTwoTurnChatReusesBlocks(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.BlockSize = 16; c.NumGPUBlocks = 256 })
	turn1 := prompt(1, 100)
	if err := e.Add(Request{ID: "turn1", Prompt: turn1, MaxTokens: 40}); err != nil {
		t.Fatal(err)
	}
	d1 := drain(t, e, 100)
	if e.Stats().PrefixHitBlocks != 0 {
		t.Fatalf("first turn hit %d blocks of an empty cache", e.Stats().PrefixHitBlocks)
	}
	answer := d1.tokens["turn1"]
	turn2 := slices.Concat(turn1, answer, prompt(5000, 30))
	if err := e.Add(Request{ID: "turn2", Prompt: turn2, MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	d2 := drain(t, e, 100)

	// The first turn computed the KV of its prompt and of all but its last
	// generated token: 139 tokens, 8 full blocks of 16.
	const wantHits = 8
	st := e.Stats()
	if st.PrefixHitBlocks != wantHits {
		t.Errorf("PrefixHitBlocks = %d, want %d", st.PrefixHitBlocks, wantHits)
	}
	if st.PrefixQueriedBlocks != uint64(100/16+len(turn2)/16) {
		t.Errorf("PrefixQueriedBlocks = %d, want %d", st.PrefixQueriedBlocks, 100/16+len(turn2)/16)
	}
	if got := d2.last["turn2"].Usage.CachedPromptTokens; got != wantHits*16 {
		t.Errorf("CachedPromptTokens = %d, want %d", got, wantHits*16)
	}
	if got := d2.steps[0].PrefillTokens; got != len(turn2)-wantHits*16 {
		t.Errorf("second turn prefilled %d tokens, want %d", got, len(turn2)-wantHits*16)
	}
	if got := e.CachedPrefix(kvhash.Hashes(turn2, 16, nil)); got != len(turn2)/16 {
		t.Errorf("CachedPrefix(turn 2) = %d, want all %d blocks", got, len(turn2)/16)
	}
	if got := e.CachedPrefix(kvhash.Hashes(slices.Concat(turn1[:40], prompt(9000, 40)), 16, nil)); got != 2 {
		t.Errorf("CachedPrefix(diverging at token 40) = %d, want 2", got)
	}
	// The turn-2 blocks beyond the hit were stored with the last hit block
	// as parent.
	h := kvhash.Hashes(turn2, 16, nil)
	first := d2.events[0]
	if first.Kind != EventStored || !first.HasParent || first.Parent != h[wantHits-1].Sequence ||
		first.Blocks[0] != h[wantHits] {
		t.Errorf("first turn-2 event %+v, want a store of block %d with parent %#x", first, wantHits, h[wantHits-1].Sequence)
	}
}

func TestEvictionUnderPressure(t *testing.T) {
	// 8 blocks of 4 tokens: each 16-token prompt (+1 generated) holds 5.
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 8 })
	set := map[uint64]bool{}
	next := uint64(1)
	var removed []uint64
	for i := range 4 {
		p := prompt(uint32(1000*i), 16)
		if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 2}); err != nil {
			t.Fatal(err)
		}
		d := drain(t, e, 10)
		next = replay(t, set, next, d.events)
		for _, ev := range d.events {
			removed = append(removed, ev.Removed...)
		}
		if !cmp.Equal(set, cached(e)) {
			t.Fatalf("after request %d, replayed events %v != cache %v", i, set, cached(e))
		}
	}
	if len(removed) == 0 {
		t.Fatal("no block was evicted under pressure")
	}
	// The last request's prefix is cached, the first one's is gone.
	h0 := kvhash.Hashes(prompt(0, 16), 4, nil)
	h3 := kvhash.Hashes(prompt(3000, 16), 4, nil)
	if set[h0[0].Sequence] || !set[h3[0].Sequence] {
		t.Errorf("want the oldest prefix evicted and the newest cached")
	}
	if m := e.Metrics(); m.KVBlocksUsed != 0 || m.CachedBlocks != len(set) || m.CachedBlocks > 8 {
		t.Errorf("idle metrics %+v", m)
	}
}

func TestEvictionOrderTailFirst(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 6 })
	// 12 tokens + 1 computed generated token: 4 blocks, 3 full and stored.
	if err := e.Add(Request{ID: "a", Prompt: prompt(1, 12), MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	drain(t, e, 10)
	// "a" left 2 never-used blocks and its partial fourth block free. "b"
	// needs 5: the 3 free ones, then the two tail blocks of "a".
	if err := e.Add(Request{ID: "b", Prompt: prompt(100, 17), MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	d := drain(t, e, 10)
	h := kvhash.Hashes(prompt(1, 12), 4, nil)
	var removed []uint64
	for _, ev := range d.events {
		removed = append(removed, ev.Removed...)
	}
	if want := []uint64{h[2].Sequence, h[1].Sequence}; !slices.Equal(removed, want) {
		t.Errorf("removed %#x, want the tail blocks first %#x", removed, want)
	}
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name string
		// steps to run before cancelling.
		steps int
	}{
		{"waiting", 0},
		{"mid prefill", 1},
		{"decoding", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 16 })
			if err := e.Add(Request{ID: "a", Prompt: prompt(1, 30), MaxTokens: 100}); err != nil {
				t.Fatal(err)
			}
			for range tt.steps {
				e.Step()
			}
			out, err := e.Cancel("a")
			if err != nil {
				t.Fatal(err)
			}
			if out.Finish != FinishCancelled || out.RequestID != "a" {
				t.Errorf("Cancel output %+v", out)
			}
			if m := e.Metrics(); m.KVBlocksUsed != 0 || m.Running != 0 || m.Waiting != 0 || !e.Idle() {
				t.Errorf("after cancel: metrics %+v, idle %v", m, e.Idle())
			}
			if res := e.Step(); len(res.Outputs) != 0 || res.Duration != 0 {
				t.Errorf("step after cancel did work: %+v", res)
			}
			if _, err := e.Cancel("a"); !errors.Is(err, ErrUnknownRequest) {
				t.Errorf("second Cancel = %v, want ErrUnknownRequest", err)
			}
		})
	}
}

func TestChunkedPrefill(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 16; c.NumGPUBlocks = 256 })
	for _, r := range []Request{
		{ID: "long", Prompt: prompt(1, 40), MaxTokens: 2},
		{ID: "short", Prompt: prompt(500, 4), MaxTokens: 2},
	} {
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	d := drain(t, e, 20)
	var prefill []int
	var chunks [][]Chunk
	for _, s := range d.steps {
		prefill = append(prefill, s.PrefillTokens)
		chunks = append(chunks, s.Chunks)
		if s.PrefillTokens+s.DecodeTokens > 16 {
			t.Errorf("step computed %d tokens over the budget of 16", s.PrefillTokens+s.DecodeTokens)
		}
	}
	// 16 + 16 + 8 for "long"; "short" waits for budget and fits in the
	// third step's rest; then both decode their second token.
	if want := []int{16, 16, 12, 0}; !slices.Equal(prefill, want) {
		t.Errorf("prefill tokens per step %v, want %v", prefill, want)
	}
	wantChunks := [][]Chunk{{{"long", 16}}, {{"long", 16}}, {{"long", 8}, {"short", 4}}, nil}
	if !slices.EqualFunc(chunks, wantChunks, slices.Equal) {
		t.Errorf("chunks per step %v, want %v", chunks, wantChunks)
	}
	if len(d.tokens["long"]) != 2 || len(d.tokens["short"]) != 2 {
		t.Errorf("tokens %v", d.tokens)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumSeqs = 2; c.NumGPUBlocks = 256 })
	for i := range 5 {
		if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: prompt(uint32(100*i), 5), MaxTokens: 3}); err != nil {
			t.Fatal(err)
		}
	}
	res := e.Step()
	if m := e.Metrics(); m.Running != 2 || m.Waiting != 3 || len(res.Outputs) != 2 {
		t.Errorf("after one step: metrics %+v, %d outputs", m, len(res.Outputs))
	}
	d := drain(t, e, 50)
	if len(d.tokens) != 5 {
		t.Errorf("%d requests finished, want 5", len(d.tokens))
	}
}

func TestPreemption(t *testing.T) {
	// 12 blocks of 4 tokens; three requests of 8 + 24 tokens need 8 blocks
	// each at the end, so the cache runs out while they decode.
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 12 })
	for i := range 3 {
		if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: prompt(uint32(100*i), 8), MaxTokens: 24}); err != nil {
			t.Fatal(err)
		}
	}
	set := map[uint64]bool{}
	d := drain(t, e, 500)
	replay(t, set, 1, d.events)
	if !cmp.Equal(set, cached(e)) {
		t.Errorf("replayed events %v != cache %v", set, cached(e))
	}
	if e.Stats().Preemptions == 0 {
		t.Error("no preemption")
	}
	// Preempted requests resume where they were: same tokens as alone.
	for i := range 3 {
		alone := newEngine(t, nil)
		id := fmt.Sprint(i)
		if err := alone.Add(Request{ID: id, Prompt: prompt(uint32(100*i), 8), MaxTokens: 24}); err != nil {
			t.Fatal(err)
		}
		want := drain(t, alone, 100).tokens[id]
		if !slices.Equal(d.tokens[id], want) {
			t.Errorf("request %s generated %v, alone %v", id, d.tokens[id], want)
		}
	}
}

func TestReset(t *testing.T) {
	e := newEngine(t, nil)
	for i := range 3 {
		if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: prompt(uint32(100*i), 9), MaxTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	first := e.Step()
	if len(first.Events) == 0 {
		t.Fatal("prefill stored nothing")
	}
	res := e.Reset()
	if len(res.Outputs) != 3 {
		t.Errorf("Reset cancelled %d requests, want 3", len(res.Outputs))
	}
	for _, o := range res.Outputs {
		if o.Finish != FinishCancelled {
			t.Errorf("output %+v", o)
		}
	}
	last := first.Events[len(first.Events)-1].ID
	if len(res.Events) != 1 || res.Events[0].Kind != EventCleared || res.Events[0].ID != last+1 {
		t.Errorf("Reset events %+v, want one cleared event with id %d", res.Events, last+1)
	}
	// The counts since the engine started stay: 3 requests, a token each.
	if m := e.Metrics(); !cmp.Equal(m, Metrics{KVBlocksTotal: 64, Requests: []RequestLoad{}, RequestsTotal: 3, OutputTokensTotal: 3}) || !e.Idle() {
		t.Errorf("metrics after Reset %+v", m)
	}
	// The engine works on after a reset, from an empty cache.
	if err := e.Add(Request{ID: "0", Prompt: prompt(0, 9), MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	d := drain(t, e, 10)
	if e.Stats().PrefixHitBlocks != 0 || d.events[0].ID != last+2 {
		t.Errorf("after Reset: hits %d, first event %+v", e.Stats().PrefixHitBlocks, d.events[0])
	}
}

func TestMetrics(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 8 })
	for i, n := range []int{6, 20} {
		if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: prompt(uint32(100*i), n), MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	e.Step() // "0" prefilled (6 tokens, 2 blocks), "1" got a 2-token chunk.
	want := Metrics{
		ActiveDecodeBlocks:  2,
		ActivePrefillTokens: 18,
		KVBlocksUsed:        3,
		KVBlocksTotal:       64,
		CachedBlocks:        1,
		Running:             2,
		Requests:            []RequestLoad{{ID: "0", DecodeBlocks: 2}, {ID: "1", PrefillTokens: 18}},
		RequestsTotal:       2,
		OutputTokensTotal:   1,
	}
	if diff := cmp.Diff(want, e.Metrics()); diff != "" {
		t.Errorf("Metrics (-want +got):\n%s", diff)
	}
}

func TestEventProto(t *testing.T) {
	parent := uint64(7)
	tests := []struct {
		name string
		ev   Event
		want *workerv1.KvCacheEvent
	}{
		{"stored with parent", Event{ID: 3, Kind: EventStored, Parent: 7, HasParent: true, Blocks: []kvhash.Block{{Local: 1, Sequence: 2}}},
			&workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{
				ParentSequenceHash: &parent, Blocks: []*workerv1.KvBlock{{SequenceHash: 2, LocalHash: 1}}}}}},
		{"stored first", Event{ID: 3, Kind: EventStored, Blocks: []kvhash.Block{{Local: 1, Sequence: 1}}},
			&workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{
				Blocks: []*workerv1.KvBlock{{SequenceHash: 1, LocalHash: 1}}}}}},
		{"removed", Event{ID: 4, Kind: EventRemoved, Removed: []uint64{5, 6}},
			&workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{5, 6}}}}},
		{"cleared", Event{ID: 5, Kind: EventCleared},
			&workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Cleared{Cleared: &workerv1.KvCacheCleared{}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.ev.Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("Proto (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{EventStored.String(), "stored"},
		{EventRemoved.String(), "removed"},
		{EventCleared.String(), "cleared"},
		{EventKind(0).String(), "unknown"},
		{FinishNone.String(), "none"},
		{FinishLength.String(), "length"},
		{FinishCancelled.String(), "cancelled"},
		{FinishStop.String(), "stop"},
		{FinishHeld.String(), "held"},
		{FinishReason(9).String(), "unknown"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestDeterministic runs the same workload, with preemption and eviction, on
// two engines and expects identical step results: the replay benchmark
// relies on it.
func TestDeterministic(t *testing.T) {
	run := func() []StepResult {
		e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 20; c.MaxNumBatchedTokens = 24; c.SpeedupRatio = 1 })
		var steps []StepResult
		for i := range 12 {
			p := slices.Concat(prompt(1, 8), prompt(uint32(100*(i%3)), 5+i))
			if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 10 + i}); err != nil {
				t.Fatal(err)
			}
			if i%4 == 3 {
				if _, err := e.Cancel(fmt.Sprint(i - 2)); err != nil {
					t.Fatal(err)
				}
			}
			steps = append(steps, e.Step())
		}
		steps = append(steps, drain(t, e, 1000).steps...)
		evicted := false
		for _, s := range steps {
			for _, ev := range s.Events {
				evicted = evicted || ev.Kind == EventRemoved
			}
		}
		if st := e.Stats(); st.Preemptions == 0 || st.PrefixHitBlocks == 0 || !evicted {
			t.Fatalf("workload did not preempt, hit and evict: %+v, evicted %v", st, evicted)
		}
		return steps
	}
	a, b := run(), run()
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
}

// TestOutputTokenViewsStayValid keeps every output's Tokens slice, as a
// streaming worker may, and reads them after the request's token list has
// grown past its initial capacity.
func TestOutputTokenViewsStayValid(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 1024 })
	if err := e.Add(Request{ID: "a", Prompt: prompt(1, 10), MaxTokens: 2000}); err != nil {
		t.Fatal(err)
	}
	var views [][]uint32
	var copied []uint32
	for !e.Idle() {
		for _, o := range e.Step().Outputs {
			views = append(views, o.Tokens)
			copied = append(copied, o.Tokens...)
		}
	}
	var later []uint32
	for _, v := range views {
		later = append(later, v...)
	}
	if len(copied) != 2000 || !slices.Equal(later, copied) {
		t.Errorf("token views changed after later steps")
	}
}

func TestOutputText(t *testing.T) {
	text := []uint32{11, 12, 13, 14, 15}
	e := newEngine(t, func(c *Config) { c.OutputText = text })
	if err := e.Add(Request{ID: "a", Prompt: []uint32{1, 2, 3}, MaxTokens: 7}); err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for !e.Idle() {
		for _, o := range e.Step().Outputs {
			got = append(got, o.Tokens...)
		}
	}
	if len(got) != 7 {
		t.Fatalf("got %d tokens", len(got))
	}
	start := -1
	for i, tok := range text {
		if tok == got[0] {
			start = i
		}
	}
	for i, tok := range got {
		if start < 0 || tok != text[(start+i)%len(text)] {
			t.Fatalf("output %v is not the text %v read from one position", got, text)
		}
	}
}

func TestScript(t *testing.T) {
	text := []uint32{11, 12, 13, 14, 15}
	for _, tc := range []struct {
		name      string
		r         Request
		wantHead  []uint32
		wantLen   int
		wantFinal FinishReason
	}{
		{"script then text", Request{ID: "a", Prompt: []uint32{1, 2, 3}, MaxTokens: 6, Script: []uint32{7, 8}}, []uint32{7, 8}, 6, FinishLength},
		{"script that ends", Request{ID: "b", Prompt: []uint32{1, 2, 3}, MaxTokens: 6, Script: []uint32{7, 8, 9}, ScriptEnds: true}, []uint32{7, 8, 9}, 3, FinishStop},
		{"max tokens cuts the script", Request{ID: "c", Prompt: []uint32{1, 2, 3}, MaxTokens: 2, Script: []uint32{7, 8, 9}, ScriptEnds: true}, []uint32{7, 8}, 2, FinishLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.OutputText = text })
			if err := e.Add(tc.r); err != nil {
				t.Fatal(err)
			}
			d := drain(t, e, 100)
			got := d.tokens[tc.r.ID]
			if len(got) != tc.wantLen || !slices.Equal(got[:len(tc.wantHead)], tc.wantHead) || d.last[tc.r.ID].Finish != tc.wantFinal {
				t.Fatalf("tokens %v finish %v; want %d tokens starting %v, finish %v", got, d.last[tc.r.ID].Finish, tc.wantLen, tc.wantHead, tc.wantFinal)
			}
		})
	}
}

// TestStepChargesAttentionPerSequence: a step's quadratic term is each
// prompt chunk's attention over its own sequence's tokens before it. A
// prompt in chunks pays its whole length squared over its steps (a later
// chunk attends to the earlier ones), prompts in one step pay each their
// own square, and a prompt after a cached prefix attends to the prefix.
func TestStepChargesAttentionPerSequence(t *testing.T) {
	m := timingmodel.Default()
	ms := func(tokens, attn float64) time.Duration {
		return timingmodel.Duration(m.StepAttentionMs(tokens, attn, false, 0))
	}
	for _, tt := range []struct {
		name   string
		budget int
		// first is computed (and its one token made) before the others
		// are added, to leave its blocks cached.
		first  []uint32
		others [][]uint32
		// steps are the steps the others take, each of its prompt
		// tokens and its attention term.
		steps [][2]float64
	}{
		{"one prompt in one step", 2048, nil, [][]uint32{prompt(1, 1000)},
			[][2]float64{{1000, 1000 * 1000}}},
		{"one prompt in two chunks", 600, nil, [][]uint32{prompt(1, 1000)},
			[][2]float64{{600, 600 * 600}, {400, 1000*1000 - 600*600}}},
		{"two prompts in one step", 2048, nil, [][]uint32{prompt(1, 500), prompt(5000, 700)},
			[][2]float64{{1200, 500*500 + 700*700}}},
		// The second shares the first's 800 tokens (200 blocks of 4) and
		// computes its last 200 after them.
		{"a prompt after a cached prefix", 2048, prompt(1, 800), [][]uint32{prompt(1, 1000)},
			[][2]float64{{200, 1000*1000 - 800*800}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.SpeedupRatio, c.NumGPUBlocks, c.MaxNumBatchedTokens = 1, 1024, tt.budget })
			if tt.first != nil {
				if err := e.Add(Request{ID: "first", Prompt: tt.first, MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
				drain(t, e, 10)
			}
			for i, p := range tt.others {
				if err := e.Add(Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 1}); err != nil {
					t.Fatal(err)
				}
			}
			d := drain(t, e, 10)
			if len(d.steps) != len(tt.steps) {
				t.Fatalf("%d steps, want %d", len(d.steps), len(tt.steps))
			}
			for i, s := range d.steps {
				if want := ms(tt.steps[i][0], tt.steps[i][1]); s.Duration != want || s.PrefillTokens != int(tt.steps[i][0]) {
					t.Errorf("step %d: %v for %d prompt tokens, want %v for %v", i, s.Duration, s.PrefillTokens, want, tt.steps[i][0])
				}
			}
		})
	}
}
