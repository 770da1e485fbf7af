package replay_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/replay"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

// TestReplayAgreesWithLive plays a ~200-request generated trace through a
// real router and 4 mockers, in real time sped up 2 times, and replays it
// in the replay's virtual time: the prefix hit rates agree within 5 points.
func TestReplayAgreesWithLive(t *testing.T) {
	g := replay.Presets["sessions"]
	g.Requests, g.Groups, g.Seed = 200, 12, 7
	g.Output = replay.Dist{Median: 8, Sigma: 0.5, Min: 2, Max: 32}
	g.Think = 4 * time.Second
	trace, err := replay.Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	const speedup, workers = 2.0, 4
	// Replayed: the mocker's engine at its defaults, sped up alike.
	cfg := replay.Config{Workers: workers, Engine: simengine.DefaultConfig(), TraceBlockSize: g.BlockSize, RateScale: speedup,
		OverlapWeight: 1, ApproxTTL: 2 * time.Minute, ApproxMaxEntries: 1 << 20, Seed: 1,
		EventDelay: 5 * time.Millisecond, SyncDelay: 5 * time.Millisecond, LoadInterval: time.Second, RequestTTL: 30 * time.Minute}
	cfg.Engine.SpeedupRatio = speedup
	replayed, err := replay.Run(trace, cfg, "kv")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := stacktest.StartLive(t, ctx, workers, "--speedup-ratio", fmt.Sprint(speedup))
	var mu sync.Mutex
	var hit, queried int
	var wg sync.WaitGroup
	errs := make(chan error, len(trace))
	start := time.Now()
	for i, r := range trace {
		if d := time.Until(start.Add(time.Duration(float64(r.Arrival) / speedup))); d > 0 {
			time.Sleep(d) // the trace's arrival times, not a race with a ticker
		}
		wg.Go(func() {
			prompt := replay.Tokens(r, g.BlockSize, nil)
			_, u, err := s.Play(ctx, "t"+strconv.Itoa(i), prompt, r.OutputLength)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			hit += int(u.GetCachedPromptTokens()) / cfg.Engine.BlockSize
			queried += len(prompt) / cfg.Engine.BlockSize
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	live := float64(hit) / float64(queried)
	t.Logf("prefix hit rate: live %.3f, replayed %.3f (%d requests)", live, replayed.HitRate, len(trace))
	if replayed.Completed != len(trace) || math.Abs(live-replayed.HitRate) > 0.05 {
		t.Fatalf("live hit rate %.3f, replayed %.3f (%d of %d completed): want within 5 points", live, replayed.HitRate, replayed.Completed, len(trace))
	}
}
