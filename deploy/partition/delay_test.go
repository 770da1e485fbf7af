//go:build linux

package partition_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestFrontendToWorkersDelayAndLoss delays by 200 ms and drops 5% of the
// packets the frontend sends to the workers (the request plane's requests,
// and the acknowledgements of what the workers stream back) while a client
// chats through the frontend. Every chat must succeed, and the frontend must
// not start moving requests between workers (migrations). The time to
// first token before, during and after is printed, not judged: it should
// grow by about the delay.
func TestFrontendToWorkersDelayAndLoss(t *testing.T) {
	t.Parallel()
	binaries(t) // before the clock starts: a cold build takes minutes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLab(t)
	c := startCluster(t, ctx, l, 1, 1)
	n, workers, w := c.startWatchedWorkers(t, ctx, 4, 2)
	rt := c.startRouter(t, ctx, "router")
	fe := c.startFrontend(t, ctx, rt.addr+":7003")
	feMetrics := "http://" + fe.addr + ":8000/metrics"
	next := 0
	// ttfts chats k times (streaming) and returns each time to first token
	// of the chats that succeeded, and how many did.
	ttfts := func(k int, until time.Time) ([]time.Duration, int, int) {
		var got []time.Duration
		tried := 0
		for tried < k || time.Now().Before(until) {
			if tried >= 10000 {
				break
			}
			tried++
			ttft, err := chat(ctx, fe, prompt(next), true)
			next++
			if err != nil {
				t.Logf("chat %d: %v", next, err)
				continue
			}
			got = append(got, ttft)
		}
		return got, tried, len(got)
	}
	k := 30
	if testing.Short() {
		k = 10
	}
	before, _, _ := ttfts(k, time.Time{})
	migrations, err := metric(ctx, feMetrics, "switchyard_frontend_migrations_total")
	if err != nil {
		t.Fatal(err)
	}
	var peers []*host
	for i := range n {
		peers = append(peers, l.hostNamed(fmt.Sprintf("w%d", i+1)))
	}
	const delay, loss = 200 * time.Millisecond, 0.05
	d := cutDuration()
	r := row{fault: fmt.Sprintf("frontend->workers +200 ms, 5%% loss, %d workers", n), duration: d}
	im := l.impair(fe, peers, delay, loss)
	during, tried, ok := ttfts(k, time.Now().Add(d))
	r.tried, r.succeeded = tried, ok
	im.stop()
	healed := time.Now()
	// Converged: the first chat answered after the impairment ends.
	after, _, _ := ttfts(1, time.Time{})
	r.converge = time.Since(healed)
	more, _, _ := ttfts(k-1, time.Time{})
	after = append(after, more...)
	migrated, err := metric(ctx, feMetrics, "switchyard_frontend_migrations_total")
	if err != nil {
		t.Fatal(err)
	}
	_, r.workersLost = w.counts()
	for _, p := range workers {
		if !p.running() {
			r.workersLost++
		}
	}
	printRow(t, r)
	t.Logf("time to first token (median, p90): before %s, during %s, after %s; %d packets delayed, %d dropped; %.0f migrations during the impairment",
		quantiles(before), quantiles(during), quantiles(after), im.passed.Load(), im.dropped.Load(), migrated-migrations)
	if r.succeeded != r.tried {
		t.Errorf("%d of %d chats failed with the delay and loss", r.tried-r.succeeded, r.tried)
	}
	if migrated != migrations {
		t.Errorf("%.0f requests migrated between workers: a delay is no worker failure", migrated-migrations)
	}
	if r.workersLost != 0 {
		t.Errorf("%d workers lost", r.workersLost)
	}
}

// quantiles formats the median and the 90th percentile of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%s/%s", s[len(s)/2].Round(time.Millisecond), s[len(s)*9/10].Round(time.Millisecond))
}
