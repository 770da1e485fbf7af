package simengine

import (
	"fmt"
	"testing"
)

// BenchmarkStep measures one engine step with 256 running sequences in
// steady state: each request has a 256-token prompt (a shared 128-token
// system prompt, then its own 128 tokens) and generates 256 tokens; a
// finished request is replaced at once, so most steps are pure decode and
// some also prefill a newcomer.
func BenchmarkStep(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SpeedupRatio = 0
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	system := prompt(1, 128)
	n := 0
	add := func() {
		p := append(append(make([]uint32, 0, 256), system...), prompt(uint32(1000+n*128), 128)...)
		if err := e.Add(Request{ID: fmt.Sprint("r", n), Prompt: p, MaxTokens: 256, Seed: uint64(n)}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for range cfg.MaxNumSeqs {
		add()
	}
	// Warm up past the initial prefill, and stagger completions.
	for i := range 300 {
		res := e.Step()
		for _, o := range res.Outputs {
			if o.Finish != FinishNone {
				add()
			}
		}
		if i < 255 {
			if _, err := e.Cancel(fmt.Sprint("r", i)); err == nil {
				add()
			}
		}
	}
	b.ReportAllocs()
	tokens := 0
	for b.Loop() {
		res := e.Step()
		tokens += len(res.Outputs)
		for _, o := range res.Outputs {
			if o.Finish != FinishNone {
				add()
			}
		}
	}
	b.ReportMetric(float64(tokens)/float64(b.N), "tokens/step")
	b.ReportMetric(float64(e.Metrics().Running), "running")
}
