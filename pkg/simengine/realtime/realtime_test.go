package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// TestMain checks that Run's goroutine and timers are all gone after each
// test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs a Runner of a small engine until the test ends.
func start(t *testing.T, speedup float64, opts Options) *Runner {
	t.Helper()
	cfg := simengine.DefaultConfig()
	cfg.NumGPUBlocks = 1024
	cfg.SpeedupRatio = speedup
	e, err := simengine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := New(e, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// collect reads a stream to its end.
func collect(t *testing.T, s *Stream) ([]uint32, simengine.Output) {
	t.Helper()
	var toks []uint32
	var last simengine.Output
	for {
		out, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			return toks, last
		}
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, out.Tokens...)
		last = out
	}
}

func prompt(from uint32, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = from + uint32(i)
	}
	return p
}

func TestRequestsComplete(t *testing.T) {
	var mu sync.Mutex
	var events []simengine.Event
	metrics := 0
	r := start(t, 0, Options{
		OnEvents: func(evs []simengine.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, evs...)
		},
		OnMetrics: func(simengine.Metrics, time.Time) {
			mu.Lock()
			defer mu.Unlock()
			metrics++
		},
	})
	tests := []struct {
		id        string
		prompt    []uint32
		maxTokens int
	}{
		{"a", prompt(1, 40), 5},
		{"b", prompt(1, 48), 9},
		{"c", prompt(500, 3), 1},
	}
	streams := map[string]*Stream{}
	for _, tt := range tests {
		s, err := r.Submit(simengine.Request{ID: tt.id, Prompt: tt.prompt, MaxTokens: tt.maxTokens})
		if err != nil {
			t.Fatal(err)
		}
		streams[tt.id] = s
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			toks, last := collect(t, streams[tt.id])
			if len(toks) != tt.maxTokens || last.Finish != simengine.FinishLength {
				t.Errorf("%d tokens, finish %v; want %d, length", len(toks), last.Finish, tt.maxTokens)
			}
		})
	}
	if _, err := r.Submit(simengine.Request{ID: "a", Prompt: prompt(1, 4), MaxTokens: 1}); err != nil {
		t.Errorf("resubmitting a finished id: %v", err)
	}
	if _, err := r.Submit(simengine.Request{ID: "bad", MaxTokens: 1}); !errors.Is(err, simengine.ErrInvalidRequest) {
		t.Errorf("Submit without prompt = %v, want ErrInvalidRequest", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || metrics == 0 {
		t.Fatalf("%d events, %d metrics reports", len(events), metrics)
	}
	for i, ev := range events {
		if ev.ID != uint64(i+1) {
			t.Fatalf("event %d has id %d", i, ev.ID)
		}
	}
}

func TestCancel(t *testing.T) {
	// Real time: decode steps take milliseconds, so 10000 tokens take
	// minutes and the request is still running when cancelled.
	r := start(t, 1, Options{})
	s, err := r.Submit(simengine.Request{ID: "a", Prompt: prompt(1, 10), MaxTokens: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel("a"); err != nil {
		t.Fatal(err)
	}
	_, last := collect(t, s)
	if last.Finish != simengine.FinishCancelled {
		t.Errorf("last output %+v, want cancelled", last)
	}
	if err := r.Cancel("a"); !errors.Is(err, simengine.ErrUnknownRequest) {
		t.Errorf("second Cancel = %v, want ErrUnknownRequest", err)
	}
}

func TestRunEndCancelsRequests(t *testing.T) {
	e, err := simengine.New(simengine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := New(e, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var streams []*Stream
	for i := range 3 {
		s, err := r.Submit(simengine.Request{ID: fmt.Sprint(i), Prompt: prompt(1, 10), MaxTokens: 10000})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if _, err := streams[0].Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	for i, s := range streams {
		if _, last := collect(t, s); last.Finish != simengine.FinishCancelled {
			t.Errorf("stream %d ended with %+v, want cancelled", i, last)
		}
	}
	if _, err := r.Submit(simengine.Request{ID: "late", Prompt: prompt(1, 4), MaxTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Run = %v, want ErrClosed", err)
	}
}

func TestRecvContext(t *testing.T) {
	r := start(t, 1, Options{})
	s, err := r.Submit(simengine.Request{ID: "a", Prompt: prompt(1, 10), MaxTokens: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Outputs may already be queued; drain them until the context shows.
	for {
		_, err := s.Recv(ctx)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatalf("Recv = %v, want context.Canceled", err)
		}
	}
}

// TestOutputsAtStepEnd: a step's tokens come out when its simulated time
// has passed, as a real engine's do: a request's first token ends its
// prefill, never before (a timer does not fire early, so this holds under
// any load).
func TestOutputsAtStepEnd(t *testing.T) {
	r := start(t, 1, Options{})
	p := prompt(1, 4000)
	submitted := time.Now()
	s, err := r.Submit(simengine.Request{ID: "a", Prompt: p, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, step := time.Since(submitted), simengine.StepTime(len(p), false, 0, 1); got < step {
		t.Fatalf("first token %v after the submission, before its prefill step (%v) ended", got, step)
	}
}
