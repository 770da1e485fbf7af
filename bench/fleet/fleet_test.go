package fleet_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/bench/fleet"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// TestMain checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// buildBench builds fleet-bench, whose binary runs every part of the plane:
// built without the race detector, the seven parts cost what they cost in
// production rather than several times more, beside the test's own workers.
func buildBench(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleet-bench")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/switchyard-llm/switchyard/bench/fleet/cmd/fleet-bench").CombinedOutput()
	if err != nil {
		t.Fatalf("go build fleet-bench: %v\n%s", err, out)
	}
	return bin
}

// TestFleetLosesNothing runs the whole control plane (3-member etcd, 3-server
// NATS JetStream cluster, registry, eventbus, router, two frontends, each
// its own process) with a fleet of simulated workers publishing KV events
// and load, and checks only that nothing is lost: every registration is
// seen by both frontends, every worker is routed to through them and, once
// deregistered, routed away from; every KV event the eventbus acknowledged
// is indexed by the router; added and removed probe workers are seen and
// routed as well, and a killed one (its lease left to expire) is dropped by
// every frontend and the router. No timing is asserted. The short form runs 16 workers
// whose KV batches are held for a publish interval and sent merged (so the
// held events are flushed at the bench's pause and at each worker's stop);
// the long form runs 100 workers that way and 100 that publish each batch at
// once.
func TestFleetLosesNothing(t *testing.T) {
	type run struct {
		n        int
		interval time.Duration
		// target is the eventbus's --publish-rate-target: under what the
		// workers send, it asks them for an interval (0: its default).
		target int
	}
	// The short form runs the eventbus's pacing: 100 workers send about 550
	// batches a second (5 KV, a load report every 1-2 s each) against a
	// target of 100, one a worker a second at the interval's cap; the long
	// form adds an interval under the cap (300: one every 333 ms).
	runs := []run{{n: 100, target: 100}}
	if !testing.Short() {
		runs = []run{{n: 100, interval: 400 * time.Millisecond}, {n: 100}, {n: 100, target: 300}}
	}
	exe := buildBench(t)
	for _, tc := range runs {
		t.Run(fmt.Sprintf("%d workers, KV publish interval %s, publish rate target %d", tc.n, tc.interval, tc.target), func(t *testing.T) {
			losesNothing(t, exe, tc.n, tc.interval, tc.target)
		})
	}
}

func losesNothing(t *testing.T, exe string, n int, interval time.Duration, target int) {
	cfg := fleet.Config{Workers: []int{n}, Concurrency: 8, KVRate: 5, LoadInterval: time.Second, LoadHeartbeat: worker.DefaultLoadHeartbeat, LeaseTTL: 10 * time.Second,
		KVPublishInterval: interval, PublishRateTarget: target, Settle: 0, Window: time.Second, Probes: 2, Kills: 1, Routes: 10, TTFTs: 10, CheckEach: true, Exe: exe}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rs, err := fleet.Run(ctx, cfg, &out, slog.New(slog.DiscardHandler))
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1", len(rs))
	}
	r := rs[0]
	if len(r.Lost) > 0 || r.Published == 0 || r.Applied < r.Published || r.KVFailed > 0 {
		t.Fatalf("lost %v; %d KV events published, %d indexed, %d refused", r.Lost, r.Published, r.Applied, r.KVFailed)
	}
	if len(r.Routable) != cfg.Probes || len(r.Unrouted) != cfg.Probes || len(r.Indexed) != cfg.Probes {
		t.Fatalf("probe workers: %d routable, %d unrouted, %d indexed, want %d each", len(r.Routable), len(r.Unrouted), len(r.Indexed), cfg.Probes)
	}
	if len(r.Killed) != cfg.Kills {
		t.Fatalf("killed probe workers: %d dropped by every frontend and the router, want %d", len(r.Killed), cfg.Kills)
	}
	t.Logf("%d workers: %d KV events published and indexed, %d load reports refused", n, r.Published, r.LoadFailed)
}
