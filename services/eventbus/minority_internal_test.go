package eventbus

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestJSWatch feeds the JetStream watch of one connection a script of
// answers, one per question, and counts the reconnections it forces: only
// after jsWatchFailures failures in a row, only on a connection that knows
// another server, and never while nats.go reconnects by itself.
func TestJSWatch(t *testing.T) {
	down := errors.New("nats: JetStream system temporarily unavailable")
	for _, tc := range []struct {
		name    string
		answers []error
		alone   bool // the connection knows no other server
		moves   int
	}{
		{name: "answers", answers: []error{nil, nil, nil}},
		{name: "slow once or twice", answers: []error{down, down, nil, down, nil, down, down, nil}},
		{name: "cut from its cluster", answers: []error{nil, down, down, down, nil}, moves: 1},
		{name: "still cut after moving", answers: []error{down, down, down, down, down, down, down}, moves: 2},
		{name: "a single server", answers: []error{down, down, down, down, down, down}, alone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			asked := make(chan chan error)
			var reconnects atomic.Int64
			moves := prometheus.NewCounter(prometheus.CounterOpts{Name: "moves"})
			w := &jsWatch{
				name: "test",
				// The script answers however long the test takes: the
				// question's own deadline is not watched.
				check: func(context.Context) error {
					answer := make(chan error)
					select {
					case asked <- answer:
					case <-ctx.Done():
						return ctx.Err()
					}
					select {
					case err := <-answer:
						return err
					case <-ctx.Done():
						return ctx.Err()
					}
				},
				connected: func() bool { return true },
				others:    func() bool { return !tc.alone },
				reconnect: func() error { reconnects.Add(1); return nil },
				moved:     moves,
				log:       slog.New(slog.DiscardHandler),
				interval:  time.Millisecond,
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.run(ctx)
			}()
			for _, a := range tc.answers {
				(<-asked) <- a
			}
			<-asked // the next question: the last answer was handled
			cancel()
			<-done
			if got := int(reconnects.Load()); got != tc.moves {
				t.Errorf("%d reconnections forced, want %d", got, tc.moves)
			}
			if got := int(testutil.ToFloat64(moves)); got != tc.moves {
				t.Errorf("moves counter %d, want %d", got, tc.moves)
			}
		})
	}
}

// TestJSWatchLeavesReconnectingAlone: while nats.go reconnects by itself,
// the watch asks nothing and forces nothing.
func TestJSWatchLeavesReconnectingAlone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polled := make(chan struct{})
	var n atomic.Int64
	w := &jsWatch{
		name:  "test",
		check: func(context.Context) error { t.Error("asked JetStream while reconnecting"); return nil },
		connected: func() bool {
			if n.Add(1) == 5 {
				close(polled)
			}
			return false
		},
		others:    func() bool { return true },
		reconnect: func() error { t.Error("forced a reconnection while reconnecting"); return nil },
		moved:     prometheus.NewCounter(prometheus.CounterOpts{Name: "moves"}),
		log:       slog.New(slog.DiscardHandler),
		interval:  time.Millisecond,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	<-polled
	cancel()
	<-done
}
