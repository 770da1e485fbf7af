package router

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBusWatch feeds the eventbus watch a script of health answers, one per
// question, and checks the statuses it reports and its metrics: unknown
// (NOT_SERVING) until the first answer, one failed answer is not an
// outage, two in a row are, and the first answer after them ends it.
func TestBusWatch(t *testing.T) {
	down := errors.New("eventbus health is NOT_SERVING")
	for _, tc := range []struct {
		name      string
		answers   []error
		statuses  []bool // reported after the initial NOT_SERVING
		reachable int
		outages   int
	}{
		{name: "reachable", answers: []error{nil, nil, nil}, statuses: []bool{true}, reachable: 1},
		{name: "one late answer is no outage", answers: []error{nil, down, nil, down, nil}, statuses: []bool{true}, reachable: 1},
		{name: "cut and healed", answers: []error{nil, down, down, down, nil, nil}, statuses: []bool{true, false, true}, reachable: 1, outages: 1},
		{name: "cut twice", answers: []error{nil, down, down, nil, down, down}, statuses: []bool{true, false, true, false}, outages: 2},
		{name: "unreachable from the start", answers: []error{down, down, down, nil}, statuses: []bool{false, true}, reachable: 1, outages: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			asked := make(chan chan error)
			// The script answers, however long the test takes: the
			// question's own deadline (the interval) is not watched.
			health := func(context.Context) error {
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
			}
			statuses := make(chan bool, 16)
			reg := prometheus.NewRegistry()
			w := newBusWatch(reg, health, func(ok bool) { statuses <- ok }, slog.New(slog.DiscardHandler))
			w.interval = time.Millisecond
			if <-statuses {
				t.Fatal("the eventbus status is SERVING before any answer")
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.run(ctx)
			}()
			for _, a := range tc.answers {
				(<-asked) <- a
			}
			// One more question asked means the last answer was handled.
			<-asked
			cancel()
			<-done
			close(statuses)
			var got []bool
			for s := range statuses {
				got = append(got, s)
			}
			if !slices.Equal(got, tc.statuses) {
				t.Errorf("statuses %v, want %v", got, tc.statuses)
			}
			want := strings.NewReplacer("REACHABLE", strconv.Itoa(tc.reachable), "OUTAGES", strconv.Itoa(tc.outages)).Replace(`
# HELP switchyard_router_eventbus_reachable 1 while the router reaches the eventbus and the eventbus answers its health SERVING (it reaches NATS), else 0; at 0 the router routes on an index that no KV events or load reports update.
# TYPE switchyard_router_eventbus_reachable gauge
switchyard_router_eventbus_reachable REACHABLE
# HELP switchyard_router_eventbus_unreachable_total Times the eventbus became unreachable to the router (or stopped answering SERVING).
# TYPE switchyard_router_eventbus_unreachable_total counter
switchyard_router_eventbus_unreachable_total OUTAGES
`)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
				t.Error(err)
			}
		})
	}
}
