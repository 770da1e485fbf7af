package realtime

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// ended is one OnHandoffEnd call.
type ended struct {
	id     string
	end    HandoffEnd
	blocks int
}

// TestHandoffEnds: a prefill leg's blocks are held after its last output
// until taken, released, cancelled or timed out; each frees them once (the
// held count back to 0, the load reported again with no block in use) and
// is counted by its end.
func TestHandoffEnds(t *testing.T) {
	tests := []struct {
		end HandoffEnd
		// timeout is Options.HandoffTimeout; free frees the handoff
		// (nil: the timeout does).
		timeout time.Duration
		free    func(r *Runner) (int, bool)
	}{
		{HandoffPulled, 0, func(r *Runner) (int, bool) { return r.Take("p") }},
		{HandoffReleased, time.Hour, func(r *Runner) (int, bool) { return r.Release("p") }},
		{HandoffCancelled, time.Hour, func(r *Runner) (int, bool) { return 3, r.Cancel("p") == nil }},
		{HandoffTimedOut, time.Millisecond, nil},
	}
	for _, tt := range tests {
		t.Run(tt.end.String(), func(t *testing.T) {
			ends := make(chan ended, 4)
			used := make(chan int, 1024)
			r := start(t, 0, Options{
				HandoffTimeout: tt.timeout,
				OnHandoffEnd:   func(id string, end HandoffEnd, blocks int) { ends <- ended{id, end, blocks} },
				OnMetrics: func(m simengine.Metrics, _ time.Time) {
					select {
					case used <- m.KVBlocksUsed:
					default:
					}
				},
			})
			// 40 tokens: three 16-token blocks, the last one partial.
			s, err := r.Submit(simengine.Request{ID: "p", Prompt: prompt(1, 40), MaxTokens: 99, Hold: true})
			if err != nil {
				t.Fatal(err)
			}
			toks, last := collect(t, s)
			if len(toks) != 1 || last.Finish != simengine.FinishHeld {
				t.Fatalf("prefill leg: %v, %v; want one token, held", toks, last.Finish)
			}
			if tt.free != nil {
				if st := r.HandoffStats(); st.Held != 1 || st.HeldBlocks != 3 {
					t.Fatalf("held %+v, want 1 handoff of 3 blocks", st)
				}
				if n, ok := tt.free(r); !ok || n != 3 {
					t.Fatalf("free: %d, %v; want 3 blocks", n, ok)
				}
			}
			select {
			case e := <-ends:
				if e != (ended{"p", tt.end, 3}) {
					t.Fatalf("OnHandoffEnd %+v, want p %v 3", e, tt.end)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the handoff did not end")
			}
			st := r.HandoffStats()
			want := [numHandoffEnds]uint64{}
			want[tt.end] = 1
			if st.Held != 0 || st.HeldBlocks != 0 || st.Ended != want {
				t.Fatalf("after the end: %+v, want nothing held and one %v", st, tt.end)
			}
			// The load is reported again once freed.
			for deadline := time.After(30 * time.Second); ; {
				var n int
				select {
				case n = <-used:
				case <-deadline:
					t.Fatal("no load report with the blocks freed")
				}
				if n == 0 {
					break
				}
			}
			// Freed once: every end now finds nothing.
			if _, ok := r.Take("p"); ok {
				t.Error("Take after the end found the handoff")
			}
			if _, ok := r.Release("p"); ok {
				t.Error("Release after the end found the handoff")
			}
			if err := r.Cancel("p"); err == nil {
				t.Error("Cancel after the end found the handoff")
			}
			if _, err := r.Submit(simengine.Request{ID: "p", Prompt: prompt(1, 4), MaxTokens: 1}); err != nil {
				t.Errorf("the id is free again: %v", err)
			}
		})
	}
}

// TestRunEndStopsHandoffTimers: a runner that stops with handoffs held
// stops their timers (goleak checks), and frees nothing after.
func TestRunEndStopsHandoffTimers(t *testing.T) {
	e, err := simengine.New(simengine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ends := make(chan ended, 1)
	r := New(e, Options{HandoffTimeout: time.Hour, OnHandoffEnd: func(id string, end HandoffEnd, n int) { ends <- ended{id, end, n} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	s, err := r.Submit(simengine.Request{ID: "p", Prompt: prompt(1, 40), MaxTokens: 1, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := r.HandoffStats(); st.Held != 0 {
		t.Fatalf("held after Run: %+v", st)
	}
	if _, ok := r.Take("p"); ok {
		t.Fatal("Take after Run found the handoff")
	}
	select {
	case e := <-ends:
		t.Fatalf("a handoff ended after Run: %+v", e)
	default:
	}
}
