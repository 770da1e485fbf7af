package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testConfig is the defaults with the objectives the simple model's hand
// figures use: at 100+10 tokens a worker holds them up to 40 req/s. The
// ITL objective is the simple engine's 90th percentile of ITL at 40 req/s
// (41.6 ms: a mean step of 20/(1-0.4) = 33.3 ms and the spread of the
// prompts a request sees, see itlQuantile); its TTFT there is far under
// the default 500 ms.
func testConfig() Config {
	c := DefaultConfig()
	c.Window = 1
	c.MaxReplicas = 8
	c.ITLMs = itlAt40
	// Judged over all requests: the capacities below are the steady
	// state's, worked out by hand (TestDecideJudgedByWindows and
	// window_test.go cover windows).
	c.JudgedWindow = 0
	return c
}

var itlAt40 = Engine{Model: simple}.SteadyState(Agg, 40, 100, 0, 10).ITLMs

var pool = PoolKey{Model: "m", Role: Agg}

// fleet is n fresh workers of the simple engine sharing rps requests per
// second of 100+10 tokens at their steady state.
func fleet(n int, rps float64, at time.Time) []Worker {
	e := Engine{Model: simple}
	var ws []Worker
	l := e.SteadyState(Agg, rps/float64(max(n, 1)), 100, 0, 10)
	for i := range n {
		ws = append(ws, Worker{ID: uint64(i + 1), Engine: e, Reported: at,
			Queued: int(l.Prefill), Running: int(math.Ceil(l.Decoding)), Usage: l.Usage})
	}
	return ws
}

func demand(rps float64, at time.Time) Sample {
	return Sample{At: at, Demand: Demand{RequestsPerSec: rps, PromptTokensPerSec: 100 * rps, OutputTokensPerSec: 10 * rps}}
}

func obs(n int, rps float64, at time.Time) PoolObservation {
	return PoolObservation{Key: pool, Demand: demand(rps, at), Workers: fleet(n, rps, at)}
}

func TestDecide(t *testing.T) {
	type step struct {
		o          PoolObservation
		target     int
		reason     string // a part of the reason
		drainCount int
	}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		steps []step
	}{
		// 100 req/s over 40 a worker: 3.
		{"scale up to the throughput", nil, []step{{obs(1, 100, at(1)), 3, "throughput", 0}}},
		{"bounded by max", nil, []step{{obs(1, 1000, at(1)), 8, "bounded to 1..8", 0}}},
		{"bounded by min", func(c *Config) { c.MinReplicas = 2 }, []step{{obs(1, 1, at(1)), 2, "bounded to 2..8", 0}}},
		{"at the minimum", func(c *Config) { c.MinReplicas = 2 }, []step{{obs(2, 1, at(1)), 2, "at the minimum of 2", 0}}},
		// 4 workers at 100 req/s: 3 would do at full capacity, but
		// shrinking needs 100 <= 3*40*0.8 = 96: no. At 5, 4 would do:
		// 100 <= 4*32.
		{"hysteresis holds", noCooldown, []step{{obs(4, 100, at(1)), 4, "hysteresis", 0}}},
		{"hysteresis allows", noCooldown, []step{{obs(5, 100, at(1)), 4, "down to 4", 1}}},
		// A new planner observes Cooldown+1 intervals before it shrinks
		// a pool: one interval's rate says little of the next.
		{"observes before a shrink", nil, []step{
			{obs(5, 100, at(1)), 5, "1 intervals observed, a shrink needs 4", 0},
			{obs(5, 100, at(2)), 5, "2 intervals observed", 0},
			{obs(5, 100, at(3)), 5, "3 intervals observed", 0},
			{obs(5, 100, at(4)), 4, "down to 4", 1},
		}},
		// After a change the pool does not shrink for 3 intervals.
		{"cooldown", forecastOnly, []step{
			{obs(1, 100, at(1)), 3, "throughput", 0},
			{obs(3, 10, at(2)), 3, "within 3 intervals", 0},
			{obs(3, 10, at(3)), 3, "within 3 intervals", 0},
			{obs(3, 10, at(4)), 3, "within 3 intervals", 0},
			{obs(3, 10, at(5)), 1, "down to 1", 2},
		}},
		{"stale worker reports", nil, []step{{PoolObservation{Key: pool, Demand: demand(100, at(10)), Workers: fleet(2, 100, at(1))}, 2, "stale: no worker", 0}}},
		{"stale demand", nil, []step{{PoolObservation{Key: pool, Demand: demand(100, at(1)), Workers: fleet(2, 100, at(10))}, 2, "stale: no demand", 0}}},
		{"no demand measured", nil, []step{{PoolObservation{Key: pool, Workers: fleet(2, 100, at(1))}, 2, "stale: no demand", 0}}},
		// A pool without workers gets its minimum.
		{"empty pool", nil, []step{{PoolObservation{Key: pool}, 1, "bounded to 1..8", 0}}},
		{"starting workers hold a shrink", nil, []step{{PoolObservation{Key: pool, Demand: demand(10, at(1)), Workers: fleet(3, 10, at(1)), Starting: 1}, 4, "not registered", 0}}},
		// Throughput says 1 (a 10 req/s forecast), but every worker has
		// 20,000 prompt tokens queued: the load rule adds one.
		{"load rule steps up", nil, []step{{func() PoolObservation {
			o := obs(1, 10, at(1))
			o.Workers[0].Queued = 20000
			return o
		}(), 2, "load: every worker", 0}}},
		// Two workers, one with 4,000 queued tokens: without the other
		// it would queue 8,000 and break the TTFT objective.
		{"load rule vetoes a shrink", noCooldown, []step{{func() PoolObservation {
			o := obs(2, 10, at(1))
			o.Workers[0].Queued = 4000
			return o
		}(), 2, "one worker less", 0}}},
		// A forecast the objectives cannot hold at any load (prompts whose
		// own prefill takes longer than TTFT) sizes by what a worker
		// sustains.
		// The bound: rho < 1 with 0.11rT prompt and decode tokens a
		// step, T = 20/(1-0.01r): r < 1000/12.2 = 82.0, 2 workers.
		{"objective unreachable", func(c *Config) { c.TTFTMs = 10 }, []step{{obs(1, 100, at(1)), 2, "no load holds the objectives", 0}}},
		// Rates of 100 and 120 req/s by turns: a noise of 20.97 req/s
		// (the median difference, 20, over 0.6745*sqrt(2)), the window
		// predictor's mean of 3 at 106.7 or 113.3 req/s with an error of
		// the noise over sqrt(3). The 95th percentile is the mean plus
		// 1.645*20.97/sqrt(3) = 19.9: 126.6 or 133.2 req/s, 4 workers
		// of 40, where the forecast alone would say 3.
		// A trend falling to no requests: the forecast is 0 req/s and
		// its error (noise 20.97 by the median difference, times
		// sqrt(1/3 + 30^2/200) for the line read 30 s past the last of 3
		// samples 10 s apart: 46.1) gives 75.8 req/s at the 95th
		// percentile, of requests of the samples' mean size: 2 workers
		// of 40 (not the maximum: a forecast of no requests has no
		// requests' size of its own).
		{"trend falls to nothing", trendLead, []step{
			{obs(2, 40, at(1)), 2, "", 0},
			{obs(2, 20, at(2)), 2, "", 0},
			{obs(2, 0, at(3)), 2, "0 req/s forecast (75.8 at the 95th percentile), 40 req/s per worker", 0},
		}},
		{"sized for the quantile", func(c *Config) { c.Window = 3 }, []step{
			{obs(4, 100, at(1)), 4, "", 0},
			{obs(4, 120, at(2)), 4, "", 0},
			{obs(4, 100, at(3)), 4, "107 req/s forecast (127 at the 95th percentile)", 0},
			{obs(4, 120, at(4)), 4, "113 req/s forecast (133 at the 95th percentile)", 0},
			{obs(4, 100, at(5)), 4, "107 req/s forecast (127 at the 95th percentile)", 0},
		}},
		// Trend rising 20 req/s an interval, a lead of 2 intervals:
		// workers started now serve from 2 intervals on and the next
		// decision's from 3, so the pool grows for the line at +3
		// intervals, read no further than the samples span: 20 (one
		// sample), 40+20 (span 1), 60+2*20 (span 2), then 80+3*20 = 140
		// req/s, 4 workers of 40 (the line at the lead, 120, says 3).
		{"grows for the end of the lead", func(c *Config) { trendLead(c); forecastOnly(c) }, []step{
			{obs(1, 20, at(1)), 1, "", 0},
			{obs(1, 40, at(2)), 2, "60 req/s forecast", 0},
			{obs(2, 60, at(3)), 3, "100 req/s forecast", 0},
			{obs(3, 80, at(4)), 4, "140 req/s forecast", 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			p, err := New(cfg, 41)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				now := s.o.Demand.At
				for _, w := range s.o.Workers {
					if w.Reported.After(now) {
						now = w.Reported
					}
				}
				d := p.Decide(now.Add(time.Second), []PoolObservation{s.o})
				if d.ID != uint64(42+i) || len(d.Pools) != 1 {
					t.Fatalf("step %d: decision %d with %d pools, want id %d and 1", i, d.ID, len(d.Pools), 42+i)
				}
				pd := d.Pools[0]
				if pd.Target != s.target || !strings.Contains(pd.Reason, s.reason) || len(pd.Drain) != s.drainCount {
					t.Fatalf("step %d: target %d (drain %v), reason %q; want %d (%d to drain), reason with %q", i, pd.Target, pd.Drain, pd.Reason, s.target, s.drainCount, s.reason)
				}
				if _, err := d.Encode(); err != nil {
					t.Fatalf("step %d: encode: %v", i, err)
				}
			}
		})
	}
}

// forecastOnly sizes for the forecast, without a margin for its spread.
func forecastOnly(c *Config) { c.Quantile = 0.5 }

// noCooldown lets a pool shrink at any decision.
func noCooldown(c *Config) { c.Cooldown = 0 }

// trendLead is the trend predictor over 4 samples with a lead of 2
// intervals.
func trendLead(c *Config) {
	c.Predictor, c.Window, c.Lead = "trend", 4, 2*c.Interval
}

func TestDecideReadsTheKVFootprint(t *testing.T) {
	// Workers with a KV cache report the blocks in use and the requests
	// running: the capacity is computed with the blocks a running request
	// holds, the blocks in use over the requests running of the fresh
	// workers, over the predictor's samples (3 here), not with a whole
	// prompt a request, which would leave out the prefixes they share.
	// Here they hold 60 blocks a request, 60.5 at its end, more than
	// 100+10 tokens' 11: the cache holds 16, and its Erlang C binds.
	c := testConfig()
	c.Window = 3
	p, err := New(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	eng := Engine{Model: simple, KVBlocks: 1000, BlockSize: 10}
	type report struct {
		usage   float64
		running int
	}
	var used, running float64
	for i, reports := range [][]report{
		{{0.6, 10}, {0.36, 6}},
		{{0.72, 12}, {0.0, 0}},
		{{0.6, 10}, {0.48, 8}},
	} {
		at := t0.Add(time.Duration(i+1) * 10 * time.Second)
		o := PoolObservation{Key: pool, Demand: demand(50, at)}
		for j, r := range reports {
			o.Workers = append(o.Workers, Worker{ID: uint64(j + 1), Engine: eng, Reported: at, Running: r.running, Usage: r.usage})
			used += r.usage * 1000
			running += float64(r.running)
		}
		// A stale worker's report is not counted.
		o.Workers = append(o.Workers, Worker{ID: 9, Engine: eng, Reported: at.Add(-time.Hour), Running: 50, Usage: 1})
		pd := p.Decide(at, []PoolObservation{o}).Pools[0]
		want := eng
		want.Footprint = used / running
		capRPS, _ := want.Capacity(Agg, 100, 0, 10, c.Objectives)
		if whole, _ := eng.Capacity(Agg, 100, 0, 10, c.Objectives); near(capRPS, whole) {
			t.Fatalf("decision %d: the capacity at %v blocks a request is the whole prompts' (%v req/s): the test checks nothing", i+1, want.Footprint, whole)
		}
		if !near(pd.Inputs.FootprintBlocks, want.Footprint) || !near(pd.Inputs.CapacityRPS, capRPS) {
			t.Fatalf("decision %d: footprint %v blocks, capacity %v req/s; want %v, %v", i+1, pd.Inputs.FootprintBlocks, pd.Inputs.CapacityRPS, want.Footprint, capRPS)
		}
	}
	// Workers with no KV cache reported, or nothing running: no
	// footprint, a whole prompt a request.
	p, _ = New(c, 0)
	at := t0.Add(10 * time.Second)
	pd := p.Decide(at, []PoolObservation{{Key: pool, Demand: demand(50, at), Workers: []Worker{{ID: 1, Engine: eng, Reported: at}}}}).Pools[0]
	if capRPS, _ := eng.Capacity(Agg, 100, 0, 10, c.Objectives); pd.Inputs.FootprintBlocks != 0 || !near(pd.Inputs.CapacityRPS, capRPS) {
		t.Fatalf("nothing running: footprint %v, capacity %v; want 0, %v", pd.Inputs.FootprintBlocks, pd.Inputs.CapacityRPS, capRPS)
	}
}

func TestRestore(t *testing.T) {
	// A planner observes 5 workers at 100 req/s for 3 intervals (3 would
	// do, but a shrink needs 4 intervals observed) and stops. One started
	// in its place restores those decisions, as the registry kept them
	// (encoded, out of order, with a stale one and a decision of its
	// future among them), and shrinks at the fourth interval as the first
	// would have; one started without them holds, having observed one.
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }
	first, _ := New(DefaultConfig(), 0)
	var history []Decision
	for i := 1; i <= 3; i++ {
		d := first.Decide(at(i), []PoolObservation{obs(5, 100, at(i))})
		b, err := d.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeDecision(b)
		if err != nil {
			t.Fatal(err)
		}
		history = append([]Decision{back}, history...)
	}
	stale := Decision{ID: 0, At: at(0), Pools: []PoolDecision{{PoolKey: pool, Current: 5, Target: 5, Reason: "stale: no demand measured within 30s",
		Inputs: Inputs{Observed: Demand{RequestsPerSec: 1000}, Workers: 5}}}}
	later := Decision{ID: 9, At: at(9), Pools: []PoolDecision{{PoolKey: pool, Current: 5, Target: 5, Reason: "throughput",
		Inputs: Inputs{Observed: Demand{RequestsPerSec: 1000}, Workers: 5}}}}
	history = append(history, stale, later)
	want := first.Decide(at(4), []PoolObservation{obs(5, 100, at(4))})

	restored, _ := New(DefaultConfig(), 3)
	if n := restored.Restore(at(4), history); n != 3 {
		t.Fatalf("restored %d samples, want 3", n)
	}
	got := restored.Decide(at(4), []PoolObservation{obs(5, 100, at(4))})
	if got.ID != 4 || want.Pools[0].Target >= 5 || got.Pools[0].Target != want.Pools[0].Target || got.Pools[0].Reason != want.Pools[0].Reason || !reflect.DeepEqual(got.Pools[0].Inputs, want.Pools[0].Inputs) {
		t.Fatalf("restored planner: target %d, %q, %+v\nwant %d, %q, %+v", got.Pools[0].Target, got.Pools[0].Reason, got.Pools[0].Inputs, want.Pools[0].Target, want.Pools[0].Reason, want.Pools[0].Inputs)
	}
	fresh, _ := New(DefaultConfig(), 3)
	if d := fresh.Decide(at(4), []PoolObservation{obs(5, 100, at(4))}); d.Pools[0].Target != 5 || !strings.Contains(d.Pools[0].Reason, "1 intervals observed") {
		t.Fatalf("a planner that restored nothing: %+v, want a hold with 1 interval observed", d.Pools[0])
	}
	// A restored change holds the pool for the cooldown.
	changed := history[0]
	changed.Pools = slices.Clone(changed.Pools)
	changed.Pools[0].Target = 6
	cooled, _ := New(DefaultConfig(), 3)
	cooled.Restore(at(4), append([]Decision{changed}, history[1:]...))
	if d := cooled.Decide(at(4), []PoolObservation{obs(5, 100, at(4))}); d.Pools[0].Target != 5 || !strings.Contains(d.Pools[0].Reason, "within 3 intervals") {
		t.Fatalf("after a restored change at decision 3: %+v, want a hold within the cooldown", d.Pools[0])
	}
}

func TestBudget(t *testing.T) {
	// Pools wanting 5 and 3 workers (200 and 120 req/s) with a budget of
	// 6: each keeps its minimum 1, and the 4 left go to the one missing
	// the larger share of its target: A 0.8, A 0.6, then B 0.67 > A 0.4,
	// then A 0.4 > B 0.33: A 4, B 2.
	cfg := testConfig()
	cfg.GPUBudget = 6
	p, _ := New(cfg, 0)
	a, b := obs(1, 200, t0), obs(1, 120, t0)
	a.Key, b.Key = PoolKey{"a", Agg}, PoolKey{"b", Agg}
	d := p.Decide(t0, []PoolObservation{b, a})
	got := []int{d.Pools[0].Target, d.Pools[1].Target}
	if d.Pools[0].Model != "a" || !slices.Equal(got, []int{4, 2}) || !strings.Contains(d.Pools[1].Reason, "GPU budget of 6") {
		t.Fatalf("targets %v of %v %v, want a 4, b 2", got, d.Pools[0].Reason, d.Pools[1].Reason)
	}
	// Two GPUs a worker: 3 workers in all; A 2 (0.8 then 0.6 > 0.67? no:
	// after A's first, B 0.67 > A 0.6), so A 2, B 1... with mins 1 and 1
	// using 4 GPUs, 2 left for one worker: A (0.8). A 2, B 1.
	cfg.GPUsPerWorker = 2
	p, _ = New(cfg, 0)
	d = p.Decide(t0, []PoolObservation{a, b})
	if got := []int{d.Pools[0].Target, d.Pools[1].Target}; !slices.Equal(got, []int{2, 1}) {
		t.Fatalf("2 GPUs a worker: targets %v, want 2, 1", got)
	}
}

func TestDrainOrder(t *testing.T) {
	ws := []Worker{
		{ID: 1, Reported: t0, Running: 3},
		{ID: 2, Reported: t0, Running: 0, Usage: 0.5},
		{ID: 3, Reported: t0, Running: 0, Usage: 0.1, Pinned: true},
		{ID: 4, Reported: t0.Add(-time.Hour)},
		{ID: 5, Reported: t0, Running: 0, Usage: 0.1},
		{ID: 6, Reported: t0, Waiting: 1},
	}
	for _, tc := range []struct {
		n    int
		want []uint64
	}{
		{1, []uint64{5}}, {2, []uint64{5, 2}}, {3, []uint64{5, 2, 6}}, {10, []uint64{5, 2, 6, 1}}, {0, nil},
	} {
		if got := drainOrder(PoolObservation{Workers: ws}, tc.n, t0, time.Minute); !slices.Equal(got, tc.want) {
			t.Errorf("drain %d = %v, want %v (never pinned 3 nor stale 4)", tc.n, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"ttft 0", func(c *Config) { c.TTFTMs = 0 }, false},
		{"itl inf", func(c *Config) { c.ITLMs = math.Inf(1) }, false},
		{"interval 0", func(c *Config) { c.Interval = 0 }, false},
		{"min past max", func(c *Config) { c.MinReplicas = 9 }, false},
		{"min at max", func(c *Config) { c.MinReplicas = 8 }, true},
		{"max 0", func(c *Config) { c.MinReplicas, c.MaxReplicas = 0, 0 }, false},
		{"hysteresis 1", func(c *Config) { c.Hysteresis = 1 }, false},
		{"hysteresis just under 1", func(c *Config) { c.Hysteresis = 0.99 }, true},
		{"window 0", func(c *Config) { c.Window = 0 }, false},
		{"unknown predictor", func(c *Config) { c.Predictor = "arima" }, false},
		{"trend", func(c *Config) { c.Predictor = "trend" }, true},
		{"negative budget", func(c *Config) { c.GPUBudget = -1 }, false},
		{"quantile 0.5", func(c *Config) { c.Quantile = 0.5 }, true},
		{"quantile under 0.5", func(c *Config) { c.Quantile = 0.49 }, false},
		{"quantile 1", func(c *Config) { c.Quantile = 1 }, false},
		{"quantile NaN", func(c *Config) { c.Quantile = math.NaN() }, false},
		{"max age 0", func(c *Config) { c.MaxAge = 0 }, false},
	} {
		c := testConfig()
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// needed is the workers a demand needs at the simple engine's capacity.
func needed(rps float64) int { return int(math.Ceil(rps/40 - 1e-9)) }

// run drives a planner through a demand curve, one decision an interval,
// applying each decision at once: the workers share the demand at their
// steady state. It returns the pool's size after each decision.
func run(t *testing.T, cfg Config, curve func(i int) float64, n int) []int {
	t.Helper()
	p, err := New(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	size, sizes := cfg.MinReplicas, make([]int, 0, n)
	for i := range n {
		at := t0.Add(time.Duration(i) * cfg.Interval)
		rps := curve(i)
		d := p.Decide(at, []PoolObservation{{Key: pool, Demand: demand(rps, at), Workers: fleet(size, rps, at)}})
		pd := d.Pools[0]
		if pd.Target < cfg.MinReplicas || pd.Target > cfg.MaxReplicas {
			t.Fatalf("interval %d: target %d outside %d..%d", i, pd.Target, cfg.MinReplicas, cfg.MaxReplicas)
		}
		if pd.Target < size && len(pd.Drain) != size-pd.Target {
			t.Fatalf("interval %d: %d to drain for %d -> %d", i, len(pd.Drain), size, pd.Target)
		}
		size = pd.Target
		sizes = append(sizes, size)
	}
	return sizes
}

// flaps counts a change followed by one the other way within 3 intervals.
func flaps(sizes []int) int {
	n := 0
	for i := 1; i < len(sizes); i++ {
		d := sizes[i] - sizes[i-1]
		for j := i + 1; j < min(i+4, len(sizes)); j++ {
			if e := sizes[j] - sizes[j-1]; d != 0 && e != 0 && (d > 0) != (e > 0) {
				n++
			}
		}
	}
	return n
}

func TestDemandCurves(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]float64, 400)
	for i := range noise {
		noise[i] = 1 + 0.2*(rng.Float64()-0.5) // +-10%
	}
	for _, pred := range []string{"window", "trend"} {
		for _, tc := range []struct {
			name  string
			curve func(i int) float64
			n     int
			check func(t *testing.T, sizes []int, curve func(int) float64)
		}{
			{"step up then down", func(i int) float64 {
				if i >= 20 && i < 60 {
					return 200
				}
				return 20
			}, 100, func(t *testing.T, sizes []int, curve func(int) float64) {
				// Up within the window of the step; down after it
				// within the window, the cooldown and one interval,
				// to what the demand needs.
				if sizes[19] != 1 || sizes[20+3] < needed(200) || sizes[59] < needed(200) {
					t.Errorf("step up: sizes %v", sizes[15:30])
				}
				// The pool keeps room for the step's rise while the rise
				// memory holds the rates before it, then shrinks within
				// 8 intervals: the window's mean leaves the step behind
				// over its 3, and the bounds it was sized for over the
				// last 4 (the cooldown and one) fit the smaller pool.
				mem := DefaultConfig().riseMemory()
				if sizes[60+8] < needed(200) || sizes[20+mem+8] != needed(20) || sizes[99] != needed(20) {
					t.Errorf("step down: sizes %v", sizes[55:])
				}
				// The room is kept at the workers' capacity, not with
				// the hysteresis free on top: when the oldest level in
				// the memory is the step's first, (20+20+200)/3 = 80,
				// the pool keeps room for 20 + (200-80) = 140 req/s: 4
				// workers of 40 req/s (5 at 80% of them).
				if at := 20 + mem - 3; sizes[at] != needed(140) {
					t.Errorf("room for the rise: %d workers at %d, want %d: sizes %v", sizes[at], at, needed(140), sizes[55:])
				}
			}},
			{"ramp", func(i int) float64 { return 10 + 3*float64(i) }, 100, func(t *testing.T, sizes []int, curve func(int) float64) {
				// Never shrinks on a rising demand; never more than one
				// worker short of it (a window lags half its length).
				for i := 1; i < len(sizes); i++ {
					if sizes[i] < sizes[i-1] {
						t.Fatalf("shrank on a ramp at %d: %v", i, sizes)
					}
					if sizes[i] < min(needed(curve(i)), 8)-1 {
						t.Fatalf("interval %d: %d workers for %v req/s (%d needed)", i, sizes[i], curve(i), needed(curve(i)))
					}
				}
			}},
			{"diurnal", func(i int) float64 { return 160 + 140*math.Sin(2*math.Pi*float64(i)/200) }, 400, func(t *testing.T, sizes []int, curve func(int) float64) {
				short, used, peak := 0, 0, 0
				for i, s := range sizes {
					if s < needed(curve(i)) {
						short++
					}
					used += s
					peak = max(peak, needed(curve(i)))
				}
				// Short at most 1 interval in 20 (the lag at the
				// rises), and well under a fleet sized to the peak.
				if short > len(sizes)/20 || used > peak*len(sizes)*3/4 {
					t.Errorf("diurnal: short %d of %d intervals, %d worker-intervals (peak fleet %d)", short, len(sizes), used, peak*len(sizes))
				}
				if f := flaps(sizes); f != 0 {
					t.Errorf("diurnal: %d flaps: %v", f, sizes)
				}
			}},
			{"steady with noise", func(i int) float64 { return 150 * noise[i] }, 400, func(t *testing.T, sizes []int, curve func(int) float64) {
				if f := flaps(sizes[5:]); f != 0 {
					t.Errorf("noise: %d flaps: %v", f, sizes)
				}
				changes := 0
				for i := 6; i < len(sizes); i++ {
					if sizes[i] != sizes[i-1] {
						changes++
					}
				}
				if changes > 4 {
					t.Errorf("noise: %d changes after the start: %v", changes, sizes)
				}
			}},
		} {
			t.Run(pred+"/"+tc.name, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Predictor, cfg.ITLMs = pred, itlAt40 // needed's 40 req/s a worker
				sizes := run(t, cfg, tc.curve, tc.n)
				tc.check(t, sizes, tc.curve)
			})
		}
	}
}

func TestDecideIsDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Predictor = "trend"
	curve := func(i int) float64 { return 100 + 90*math.Sin(float64(i)/7) }
	a, b := run(t, cfg, curve, 200), run(t, cfg, curve, 200)
	if !slices.Equal(a, b) {
		t.Fatal("two runs of the same observations decided differently")
	}
}

// TestNoFlapsOnSteadyRates drives both predictors, with a start-up lead of
// 6 intervals (the trend then reads its line 7 intervals ahead), through
// steady rates with noise of several sizes and seeds: no pool is scaled one
// way and back within 3 intervals.
func TestNoFlapsOnSteadyRates(t *testing.T) {
	for _, pred := range []string{"window", "trend"} {
		for _, tc := range []struct {
			rate, noise float64 // req/s; noise: the uniform share either side
			seed        uint64
		}{
			{150, 0.1, 1}, {150, 0.2, 2}, {150, 0.3, 3}, {60, 0.2, 4}, {60, 0.3, 5}, {300, 0.2, 6},
		} {
			t.Run(fmt.Sprintf("%s/%.0f+-%.0f%%/seed%d", pred, tc.rate, 100*tc.noise, tc.seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(tc.seed, 7))
				noise := make([]float64, 400)
				for i := range noise {
					noise[i] = 1 + 2*tc.noise*(rng.Float64()-0.5)
				}
				cfg := DefaultConfig()
				cfg.Predictor, cfg.Lead = pred, 6*cfg.Interval
				sizes := run(t, cfg, func(i int) float64 { return tc.rate * noise[i] }, len(noise))
				if f := flaps(sizes); f != 0 {
					t.Errorf("%d flaps: %v", f, sizes)
				}
			})
		}
	}
}

// TestBias checks the forecast's correction by its recent misses, a
// lead's worth of them, when they all agree: none on noise nor for a
// burst, the lag of a window's mean on a ramp, a trend's line run on
// below the level past a trough.
func TestBias(t *testing.T) {
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }
	lead := func(pred string, window int) func(*Config) {
		return func(c *Config) { c.Predictor, c.Window, c.Lead = pred, window, 2*c.Interval }
	}
	z := normalQuantile(0.95)
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		rates []float64
		// check looks at the decision on each rate.
		check func(i int, pd PoolDecision) error
	}{
		// Rates alternating 100 and 120: the mean of 3 misses the sample
		// 3 intervals on by 13.3 either way, and the last 3 misses'
		// mean is 4.4 at most; a sample's noise (20/(0.6745*sqrt 2),
		// 21 req/s) at the quantile over sqrt 3 is 20: no bias.
		{"noise alone", lead("window", 3), []float64{100, 120, 100, 120, 100, 120, 100, 120, 100, 120}, func(i int, pd PoolDecision) error {
			if pd.Inputs.BiasRPS != 0 {
				return fmt.Errorf("bias %v, want 0", pd.Inputs.BiasRPS)
			}
			return nil
		}},
		// A ramp of 10 req/s an interval: the mean of the last 3 rates
		// (the rate less 10) forecasts a sample 3 intervals on (the rate
		// plus 30): every miss is 40 once the ramp has run that long.
		// The bias looks at the last 6 (the agreement of fewer is
		// likelier than 1 in 20 by chance). The differences of 10 read
		// as a noise of 10/(0.6745*sqrt 2), so the bias is 40 less that
		// at the quantile over sqrt 6.
		{"a window lags a ramp", lead("window", 3), []float64{100, 100, 100, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200}, func(i int, pd PoolDecision) error {
			want := 40 - z*10/(0.6744897501960817*math.Sqrt2)/math.Sqrt(6)
			if i == 13 && (!near(pd.Inputs.BiasRPS, want) || !strings.Contains(pd.Reason, fmt.Sprintf("%+.3g for its recent misses", want))) {
				return fmt.Errorf("bias %v (%q), want %v", pd.Inputs.BiasRPS, pd.Reason, want)
			}
			return nil
		}},
		// A burst of two intervals at twice the rate: the misses of the
		// forecasts made before it are 100 while it runs, but the last
		// six include ones made on the level, so the bias never raises
		// the forecast; the forecasts
		// made in the burst miss the level after it, below.
		{"a burst shorter than a lead", lead("window", 3), []float64{100, 100, 100, 100, 100, 100, 200, 200, 100, 100, 100, 100, 100, 100}, func(i int, pd PoolDecision) error {
			if pd.Inputs.BiasRPS > 0 {
				return fmt.Errorf("bias %v, want none above 0", pd.Inputs.BiasRPS)
			}
			return nil
		}},
		// Falling 10 req/s an interval from 300 to 100 and staying, with
		// a lead of 6 intervals (the trend fits 14 samples, the bias
		// looks at 7 misses): the line runs on below 100 long after the
		// fall ends (it reads 32 req/s three intervals on), and its
		// forecasts miss the level. The bias takes none until 7 misses
		// of forecasts made on full windows are in, and then carries
		// them: forecast and bias reach the level before the line does.
		{"a trend runs past a trough", func(c *Config) { c.Predictor, c.Window, c.Lead = "trend", 4, 6*c.Interval }, trough(), func(i int, pd PoolDecision) error {
			f, b := pd.Inputs.Forecast.RequestsPerSec, pd.Inputs.BiasRPS
			switch {
			case i >= 20 && i <= 27 && !(f < 100 && b == 0):
				return fmt.Errorf("forecast %v, bias %v: want the line below 100 and no bias yet", f, b)
			case i == 31 && !(f < 100 && f+b >= 100):
				return fmt.Errorf("forecast %v, bias %v: want the line below 100 and them at it", f, b)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.cfg(&cfg)
			p, err := New(cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 5
			for i, r := range tc.rates {
				pd := p.Decide(at(i+1), []PoolObservation{obs(n, r, at(i+1))}).Pools[0]
				if err := tc.check(i, pd); err != nil {
					t.Fatalf("rate %d (%v): %v", i, r, err)
				}
				n = pd.Target
			}
		})
	}
}

// trough is a rate falling 10 req/s an interval from 300 to 110, then 100
// for 20 intervals.
func trough() []float64 {
	var rates []float64
	for r := 300.0; r > 100; r -= 10 {
		rates = append(rates, r)
	}
	for range 20 {
		rates = append(rates, 100)
	}
	return rates
}

func TestRiseOf(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rates        []float64
		window, span int
		levels       []float64
		rise         float64
	}{
		{"too few for a level", []float64{5, 6}, 3, 2, nil, 0},
		// Levels 2, 3, 4, 3: the largest rise within 2 of a level is 2
		// (from 2 to 4).
		{"means of 3", []float64{1, 2, 3, 4, 5, 0}, 3, 2, []float64{2, 3, 4, 3}, 2},
		// Within 1 only: 1.
		{"a shorter span", []float64{1, 2, 3, 4, 5, 0}, 3, 1, []float64{2, 3, 4, 3}, 1},
		// A burst of one interval, 10 over a level of 10: the rise is the
		// burst's, once the memory has the rates before it.
		{"a burst", []float64{10, 10, 20, 10, 10}, 1, 3, []float64{10, 10, 20, 10, 10}, 10},
		// Only falls: no rise.
		{"falling", []float64{9, 7, 5, 3}, 1, 3, []float64{9, 7, 5, 3}, 0},
		// The last levels rise against the first: a rise still under
		// way counts as far as it went.
		{"a rise under way", []float64{1, 1, 1, 4}, 1, 5, []float64{1, 1, 1, 4}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			levels := levelsOf(tc.rates, tc.window)
			if len(levels) != len(tc.levels) {
				t.Fatalf("levels %v, want %v", levels, tc.levels)
			}
			for i := range levels {
				if !near(levels[i], tc.levels[i]) {
					t.Fatalf("levels %v, want %v", levels, tc.levels)
				}
			}
			if got := riseOf(levels, tc.span); !near(got, tc.rise) {
				t.Fatalf("rise %v, want %v", got, tc.rise)
			}
		})
	}
}

func TestRiseMemory(t *testing.T) {
	for _, tc := range []struct {
		quantile   float64
		lead       time.Duration
		span, want int
	}{
		// The largest of 59 rises is at or past their 95th percentile
		// with probability 1-0.95^59 = 0.952; 58 would give 0.949. The
		// span: a 60 s lead and an interval, 7 intervals; the window's 3
		// rates make a level.
		{0.95, 60 * time.Second, 7, 59 + 7 + 2},
		// The largest of 1 is at or past the median half the time: the
		// cooldown and one (4) are longer.
		{0.5, 0, 1, 4 + 1 + 2},
		// 1 - 0.99^459 = 0.990.
		{0.99, 5 * time.Second, 2, 459 + 2 + 2},
	} {
		c := DefaultConfig()
		c.Quantile, c.Lead = tc.quantile, tc.lead
		if got := c.riseSpan(); got != tc.span {
			t.Errorf("quantile %v, lead %v: span %d, want %d", tc.quantile, tc.lead, got, tc.span)
		}
		if got := c.riseMemory(); got != tc.want {
			t.Errorf("quantile %v, lead %v: memory %d, want %d", tc.quantile, tc.lead, got, tc.want)
		}
	}
}

// TestDecideJudgedByWindows: judged by windows, a pool is sized with the
// capacity that holds the share of windows the planner aims at, for the
// requests a window of the rate it sizes for holds and their dispersion
// from the rates' noise.
func TestDecideJudgedByWindows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rates []float64
	}{
		{"steady rate", []float64{50, 50, 50, 50, 50}},
		{"noisy rate", []float64{40, 60, 45, 58, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			c.JudgedWindow = 30 * time.Second
			p, err := New(c, 0)
			if err != nil {
				t.Fatal(err)
			}
			pr, _ := NewPredictor(c.Predictor, c.Window, c.Quantile)
			var pd PoolDecision
			for i, r := range tc.rates {
				at := t0.Add(time.Duration(i+1) * c.Interval)
				pr.Observe(demand(r, at))
				pd = p.Decide(at, []PoolObservation{obs(2, r, at)}).Pools[0]
			}
			level := pd.Inputs.Forecast.RequestsPerSec + pd.Inputs.BiasRPS
			j := JudgedBy(level, pr.Spread(c.Interval).Noise, c.Interval, c.JudgedWindow, c.Quantile)
			e := Engine{Model: simple}
			want, _ := e.CapacityJudged(Agg, 100, 0, 10, c.Objectives, j)
			steady, _ := e.Capacity(Agg, 100, 0, 10, c.Objectives)
			if !near(pd.Inputs.CapacityRPS, want) || !near(pd.Inputs.Dispersion, j.Dispersion) || !(want < steady) {
				t.Fatalf("capacity %v req/s, dispersion %v; want %v (below the steady state's %v), %v", pd.Inputs.CapacityRPS, pd.Inputs.Dispersion, want, steady, j.Dispersion)
			}
			// The pool grows for the forecast, its error in quadrature
			// with the window's noise.
			j.LevelError = pd.Inputs.SpreadRPS / level
			atLevel, _ := e.CapacityJudged(Agg, 100, 0, 10, c.Objectives, j)
			if n := int(math.Ceil(level / atLevel)); pd.Target != n || atLevel > want {
				t.Fatalf("target %d, want %d: %v req/s at %v req/s a worker (at most %v)", pd.Target, n, level, atLevel, want)
			}
			if !strings.Contains(pd.Reason, "in 95% of 30s windows") {
				t.Fatalf("reason %q does not say the windows", pd.Reason)
			}
			t.Logf("%s", pd.Reason)
		})
	}
}

// TestDecideClearsABacklog: requests the workers hold past what they
// clear within the TTFT objective (waiting for room, or queued prompt
// tokens past a step's budget) are added to the rate the pool is sized
// for, to be cleared within a judged window, with what the backlog grows
// by until started workers serve.
func TestDecideClearsABacklog(t *testing.T) {
	c := testConfig()
	c.JudgedWindow = 30 * time.Second
	c.Quantile = 0.5 // the forecast alone, judged over the steady state: the capacity is 40
	steady, _ := Engine{Model: simple}.Capacity(Agg, 100, 0, 10, c.Objectives)
	within := steady * c.TTFTMs / 1000 // requests a worker clears within the objective
	for _, tc := range []struct {
		name             string
		lead             time.Duration
		rate             float64
		waiting, queued  int // on each of the 2 workers
		wantBacklog      float64
		wantTargetAtMost int
	}{
		{"none", 0, 60, 0, 0, 0, 2},
		{"a queue cleared within the objective", 0, 60, int(within), 0, 0, 2},
		// 120 waiting on each: 2*(120-within) to clear in 30 s.
		{"waiting for room", 0, 60, 120, 0, 2 * (120 - within), 0},
		// Queued prompt tokens past a step's 1,000: 100 tokens a prompt.
		// (The load rule would add one worker; this adds more.)
		{"queued prompts", 0, 60, 0, 1000 + 100000, 2 * (1000 - within), 0},
		// Until started workers serve, 20 s here, the arrivals past the
		// 2 workers' 40 req/s each join it: 100-80 req/s for 20 s.
		{"growing until started workers serve", 20 * time.Second, 100, 120, 0, 2*(120-within) + 20*20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.Lead = tc.lead
			p, err := New(c, 0)
			if err != nil {
				t.Fatal(err)
			}
			at := t0.Add(c.Interval)
			o := obs(2, tc.rate, at)
			for i := range o.Workers {
				o.Workers[i].Waiting, o.Workers[i].Queued = tc.waiting, tc.queued
			}
			pd := p.Decide(at, []PoolObservation{o}).Pools[0]
			if !near(pd.Inputs.BacklogRequests, tc.wantBacklog) || !near(pd.Inputs.DrainRPS, tc.wantBacklog/30) {
				t.Fatalf("backlog %v requests, drain %v req/s; want %v, %v", pd.Inputs.BacklogRequests, pd.Inputs.DrainRPS, tc.wantBacklog, tc.wantBacklog/30)
			}
			want := int(math.Ceil((tc.rate + tc.wantBacklog/30) / steady))
			if tc.wantTargetAtMost > 0 {
				want = tc.wantTargetAtMost
			}
			if pd.Target != want {
				t.Fatalf("target %d, want %d (%s)", pd.Target, want, pd.Reason)
			}
			if tc.wantBacklog > 0 && !strings.Contains(pd.Reason, "to clear a backlog") {
				t.Fatalf("reason %q does not say the backlog", pd.Reason)
			}
		})
	}
}

// TestBacklogGrowsUntilWorkersServe: until the workers started now serve,
// a backlog grows by the arrivals the serving workers cannot take, the
// workers started earlier serving from when they come.
func TestBacklogGrowsUntilWorkersServe(t *testing.T) {
	c := testConfig()
	c.JudgedWindow, c.Lead = 30*time.Second, 20*time.Second
	e := Engine{Model: simple}
	bound := 40.0 // the most a worker takes, requests per second
	// Two workers, each with 100 requests waiting: 2*(100-20) past what
	// they clear within the 500 ms objective.
	fresh := []Worker{{ID: 1, Engine: e, Waiting: 100}, {ID: 2, Engine: e, Waiting: 100}}
	for _, tc := range []struct {
		name     string
		forecast float64
		coming   []time.Duration
		want     float64
	}{
		{"kept up with", 70, nil, 160},
		{"none coming", 100, nil, 160 + 20*20},
		// One serves in 5 s: 20 req/s short for 5 s, then 120 of 100.
		{"one coming", 100, []time.Duration{5 * time.Second}, 160 + 20*5},
		{"two coming, the later first", 150, []time.Duration{15 * time.Second, 5 * time.Second}, 160 + 70*5 + 30*10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, drain := backlog(fresh, tc.coming, c, e, 100, 0, tc.forecast, bound)
			if !near(got, tc.want) || !near(drain, tc.want/30) {
				t.Fatalf("backlog %v, drain %v req/s; want %v, %v", got, drain, tc.want, tc.want/30)
			}
		})
	}
}

// TestDecideReadsComputedPrompts: the requests' computed prompt sizes the
// workers count, over the samples, size the pool: its capacity is
// CapacityJudged's with their shares (which prices each request's own
// prefill by its size: TestCapacityJudgedPricesPromptSizes), and the
// decision records the shares it used.
func TestDecideReadsComputedPrompts(t *testing.T) {
	c := testConfig()
	c.JudgedWindow = 30 * time.Second
	for _, tc := range []struct {
		name string
		far  float64 // share of requests of a prompt far past the objective
	}{
		{"none far past", 0},
		{"three in a hundred far past", 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(c, 0)
			if err != nil {
				t.Fatal(err)
			}
			pr, _ := NewPredictor(c.Predictor, c.Window, c.Quantile)
			var pd PoolDecision
			for i := range 5 {
				at := t0.Add(time.Duration(i+1) * c.Interval)
				o := obs(2, 50, at)
				o.Demand.ComputedPromptRequestsPerSec[wire.ComputedPromptBucket(100)] = 50 * (1 - tc.far)
				o.Demand.ComputedPromptRequestsPerSec[wire.ComputedPromptBuckets-1] = 50 * tc.far
				pr.Observe(o.Demand)
				pd = p.Decide(at, []PoolObservation{o}).Pools[0]
			}
			shares := make([]float64, wire.ComputedPromptBuckets)
			shares[wire.ComputedPromptBucket(100)], shares[wire.ComputedPromptBuckets-1] = 1-tc.far, tc.far
			if !reflect.DeepEqual(pd.Inputs.ComputedPrompts, shares) {
				t.Fatalf("computed prompts %v, want %v", pd.Inputs.ComputedPrompts, shares)
			}
			level := pd.Inputs.Forecast.RequestsPerSec + pd.Inputs.BiasRPS
			j := JudgedBy(level, pr.Spread(c.Interval).Noise, c.Interval, c.JudgedWindow, c.Quantile)
			e := Engine{Model: simple}
			j.Computed = shares
			want, _ := e.CapacityJudged(Agg, 100, 0, 10, c.Objectives, j)
			if !near(pd.Inputs.CapacityRPS, want) {
				t.Fatalf("capacity %v req/s, want %v", pd.Inputs.CapacityRPS, want)
			}
		})
	}
}
