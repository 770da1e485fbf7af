package replay

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// The peers' table tests: a handful of decisions each, worked out by hand
// from the peer's formula (peers.go). Block size 4; a prompt of 16 tokens
// is 4 full blocks.
const peerBS = 4

// peerPrompt is a prompt of n tokens, the same for every test (so cached
// prefixes are prefixes of it).
func peerPrompt(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i + 1)
	}
	return t
}

func peerHashes(tokens []uint32) []uint64 {
	var out []uint64
	for _, b := range kvhash.Hashes(tokens, peerBS, nil) {
		out = append(out, b.Sequence)
	}
	return out
}

// cache stores the first cached[i] blocks of tokens on worker i+1 (a
// negative count stores nothing).
func cache(b *peerBase, tokens []uint32, cached []int) {
	h := peerHashes(tokens)
	for i, n := range cached {
		if n > 0 {
			b.idx.Store(index.WorkerID{Instance: uint64(i + 1)}, h[:n])
		}
	}
}

func route(t *testing.T, r router, id string, tokens []uint32) *routerv1.RouteResponse {
	t.Helper()
	resp, err := r.Route(&routerv1.RouteRequest{RequestId: id, TokenIds: tokens})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestDynamoDecisions(t *testing.T) {
	prompt := peerPrompt(16)
	h := peerHashes(prompt)
	other := peerHashes(peerPrompt(40))[4:] // 6 blocks no prompt shares
	tests := []struct {
		name    string
		cached  []int
		prefill []int      // active prefill tokens
		active  [][]uint64 // active blocks
		want    []uint64   // acceptable choices
		cost    []float64  // the costs, by worker
	}{
		// ISL 16 = 4 blocks. w1: 16/4 - 0 + (0 active + 4 new) = 8;
		// w2: 16/4 - 3 + (0 + 4) = 5.
		{name: "overlap wins when idle", cached: []int{0, 3}, want: []uint64{2}, cost: []float64{8, 5}},
		// w2 has 20 prefill tokens queued: (20+16)/4 - 3 + 4 = 10 > w1's 8.
		{name: "queued prefill outweighs the overlap", cached: []int{0, 3}, prefill: []int{0, 20}, want: []uint64{1}, cost: []float64{8, 10}},
		// w2 holds all 4 blocks (prefill 0) but 6 other blocks are active
		// there: 0 + 6 + 4 = 10 > w1's 8.
		{name: "active blocks outweigh a full hit", cached: []int{0, 4}, active: [][]uint64{nil, other}, want: []uint64{1}, cost: []float64{8, 10}},
		// The prompt's 4 blocks are active on w2 (a request with the same
		// prompt decodes there): 0 + 4 active + 0 new = 4 < w1's 8.
		{name: "shared active blocks count once", cached: []int{0, 4}, active: [][]uint64{nil, h}, want: []uint64{2}, cost: []float64{8, 4}},
		// Credit clamps at zero: w2 caches all 4 blocks and has 4 prefill
		// tokens queued: max(0, (4+16)/4 - 4) = 1, + 4 new = 5; w1: 8.
		{name: "queued tokens behind a full hit", cached: []int{0, 4}, prefill: []int{0, 4}, want: []uint64{2}, cost: []float64{8, 5}},
		// Nothing cached, nothing active: 8 and 8, a tie: either.
		{name: "ties at random", cached: []int{0, 0}, want: []uint64{1, 2}, cost: []float64{8, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDynamo(newPeerBase(2, peerBS, 7))
			cache(d.peerBase, prompt, tt.cached)
			copy(d.prefill, tt.prefill)
			for i, a := range tt.active {
				for _, x := range a {
					d.blocks[i][x]++
				}
			}
			resp := route(t, d, "r", prompt)
			if !containsID(tt.want, resp.InstanceId) {
				t.Errorf("chose %d, want one of %v", resp.InstanceId, tt.want)
			}
			for i, c := range resp.Candidates {
				if c.Cost != tt.cost[i] {
					t.Errorf("worker %d cost %v, want %v", i+1, c.Cost, tt.cost[i])
				}
			}
		})
	}
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestDynamoTracksActiveSequences follows one request through Dynamo's
// record: routed, it adds its uncached tokens and its blocks; its first
// token removes the tokens; its end frees the blocks.
func TestDynamoTracksActiveSequences(t *testing.T) {
	prompt := peerPrompt(16)
	d := newDynamo(newPeerBase(2, peerBS, 7))
	cache(d.peerBase, prompt, []int{0, 3})
	resp := route(t, d, "a", prompt) // w2 (cost 5 against 8, as above)
	if resp.InstanceId != 2 {
		t.Fatalf("chose %d, want 2", resp.InstanceId)
	}
	// 16 tokens - 3 cached blocks x 4 = 4 tokens to prefill; 4 blocks.
	if d.prefill[1] != 4 || len(d.blocks[1]) != 4 || d.active[1] != 1 {
		t.Fatalf("after route: prefill %d, blocks %d, active %d; want 4, 4, 1", d.prefill[1], len(d.blocks[1]), d.active[1])
	}
	// A second identical request: w1 8; w2 (4+16)/4 - 3 = 2, + 4 active + 0
	// new = 6: w2 again, sharing the blocks.
	if resp := route(t, d, "b", prompt); resp.InstanceId != 2 || resp.Candidates[1].Cost != 6 {
		t.Fatalf("second request: chose %d at cost %v, want 2 at 6", resp.InstanceId, resp.Candidates[1].Cost)
	}
	if len(d.blocks[1]) != 4 || d.prefill[1] != 8 {
		t.Fatalf("shared blocks: %d blocks, %d prefill tokens; want 4, 8", len(d.blocks[1]), d.prefill[1])
	}
	d.PrefillDone("a")
	if d.prefill[1] != 4 {
		t.Fatalf("after a's first token: prefill %d, want 4", d.prefill[1])
	}
	d.Free("a")
	if len(d.blocks[1]) != 4 || d.active[1] != 1 {
		t.Fatalf("after a's end: %d blocks, %d active; want 4 (b holds them), 1", len(d.blocks[1]), d.active[1])
	}
	d.Free("b") // never had its first token: its tokens go too
	if len(d.blocks[1]) != 0 || d.active[1] != 0 || d.prefill[1] != 0 {
		t.Fatalf("after b's end: %d blocks, %d active, %d prefill; want 0, 0, 0", len(d.blocks[1]), d.active[1], d.prefill[1])
	}
}

func TestLLMDDecisions(t *testing.T) {
	prompt := peerPrompt(16)
	tests := []struct {
		name    string
		cached  []int
		waiting []int
		usage   []float64 // KV blocks used of 100
		want    []uint64
		score   []float64
	}{
		// Prefix min-max over the pods holding the first block (w1 4, w2
		// 2): w1 1, w2 0, w3 0 (holds none). Queues equal: 1 each. Usage 0.
		// w1 3x1 + 2x1 + 2x1 = 7; w2 and w3 0 + 2 + 2 = 4.
		{name: "longest prefix", cached: []int{4, 2, 0}, want: []uint64{1}, score: []float64{7, 4, 4}},
		// w1 waits 4, others 0: queue w1 (4-4)/4 = 0, others 1. Usage w1
		// 0.5, others 0.1: w1 3 + 0 + 2x0.5 = 4; w2, w3 0 + 2 + 2x0.9 = 3.8.
		{name: "prefix outweighs a queue", cached: []int{4, 2, 0}, waiting: []int{4, 0, 0}, usage: []float64{50, 10, 10}, want: []uint64{1}, score: []float64{4, 3.8, 3.8}},
		// As above with w1 at 75% usage: w1 3 + 0 + 0.5 = 3.5 < 3.8; w2 and
		// w3 tie: either.
		{name: "queue and usage outweigh the prefix", cached: []int{4, 2, 0}, waiting: []int{4, 0, 0}, usage: []float64{75, 10, 10}, want: []uint64{2, 3}, score: []float64{3.5, 3.8, 3.8}},
		// One pod holds only the first block: min = max, so its prefix
		// score is 1, the same as a full hit: w3 3 + 2 + 2 = 7.
		{name: "one block is a full score alone", cached: []int{0, 0, 1}, want: []uint64{3}, score: []float64{4, 4, 7}},
		// Two pods hold the same 2 blocks: both 1; w1 and w2 7, w3 4.
		{name: "equal prefixes tie", cached: []int{2, 2, 0}, want: []uint64{1, 2}, score: []float64{7, 7, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLLMD(newPeerBase(3, peerBS, 7))
			cache(l.peerBase, prompt, tt.cached)
			for i := range 3 {
				m := simengine.Metrics{KVBlocksTotal: 100}
				if tt.waiting != nil {
					m.Waiting = tt.waiting[i]
				}
				if tt.usage != nil {
					m.KVBlocksUsed = int(tt.usage[i])
				}
				l.Scrape(uint64(i+1), m)
			}
			resp := route(t, l, "r", prompt)
			if !containsID(tt.want, resp.InstanceId) {
				t.Errorf("chose %d, want one of %v", resp.InstanceId, tt.want)
			}
			for i, c := range resp.Candidates {
				if d := c.Cost - tt.score[i]; d > 1e-9 || d < -1e-9 {
					t.Errorf("worker %d score %v, want %v", i+1, c.Cost, tt.score[i])
				}
			}
		})
	}
}

func TestSGLangDecisions(t *testing.T) {
	tests := []struct {
		name   string
		tokens int // prompt length (block size 4)
		cached []int
		load   []int
		want   uint64
	}{
		// Balanced; w2 matches 2 of 4 blocks = 0.5 > 0.3: w2.
		{name: "match above the threshold", tokens: 16, cached: []int{0, 2, 0}, want: 2},
		// w2 matches 1 of 4 = 0.25 <= 0.3: the least loaded, w3 (1).
		{name: "match below the threshold", tokens: 16, cached: []int{0, 1, 0}, load: []int{3, 2, 1}, want: 3},
		// 3 of 10 blocks = 0.3, not above: the least loaded, w1 (0).
		{name: "match at the threshold", tokens: 40, cached: []int{0, 3, 0}, load: []int{0, 1, 1}, want: 1},
		// Loads 100, 30, 50: 100 - 30 = 70 > 64 and 100 > 1.5 x 30 = 45:
		// imbalanced, the least loaded w2, though w1 holds the whole prompt.
		{name: "imbalanced takes the shortest queue", tokens: 16, cached: []int{4, 0, 0}, load: []int{100, 30, 50}, want: 2},
		// Loads 200, 135, 150: 65 > 64 but 200 <= 1.5 x 135 = 202.5:
		// balanced, so the full match w1.
		{name: "relative threshold not passed", tokens: 16, cached: []int{4, 0, 0}, load: []int{200, 135, 150}, want: 1},
		// Loads 64, 0, 0: 64 is not above 64: balanced; nothing cached:
		// the least loaded, the first of the equals, w2.
		{name: "absolute threshold not passed", tokens: 16, load: []int{64, 0, 0}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSGLang(newPeerBase(3, peerBS, 7))
			prompt := peerPrompt(tt.tokens)
			cache(s.peerBase, prompt, tt.cached)
			copy(s.load, tt.load)
			if resp := route(t, s, "r", prompt); resp.InstanceId != tt.want {
				t.Errorf("chose %d, want %d", resp.InstanceId, tt.want)
			}
		})
	}
}

// TestSGLangCountsInFlight: a request counts on its worker from its
// routing to its end.
func TestSGLangCountsInFlight(t *testing.T) {
	s := newSGLang(newPeerBase(2, peerBS, 7))
	prompt := peerPrompt(16)
	// Nothing cached: least loaded, first among equals: w1, then w2.
	for i, want := range []uint64{1, 2, 1} {
		if resp := route(t, s, string(rune('a'+i)), prompt); resp.InstanceId != want {
			t.Fatalf("request %d chose %d, want %d", i, resp.InstanceId, want)
		}
	}
	s.Free("a")
	s.Free("c")
	if s.load[0] != 0 || s.load[1] != 1 {
		t.Fatalf("loads %v after two ends, want [0 1]", s.load)
	}
}

// TestPeersOnTheShippedTrace replays the start of the shipped trace with
// each peer: every request completes, each peer's choices follow the KV
// events (its hit rate above round-robin's) and runs repeat exactly.
func TestPeersOnTheShippedTrace(t *testing.T) {
	trace, err := SyntheticTrace()
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:150]
	cfg := smallConfig()
	rr, err := Run(trace, cfg, "round-robin")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range peerModes {
		t.Run(mode, func(t *testing.T) {
			a, err := Run(trace, cfg, mode)
			if err != nil {
				t.Fatal(err)
			}
			if a.Completed != len(trace) || a.Rejected != 0 {
				t.Errorf("%d completed, %d rejected; want all %d", a.Completed, a.Rejected, len(trace))
			}
			if a.HitRate <= rr.HitRate {
				t.Errorf("hit rate %.3f, round-robin %.3f: want above", a.HitRate, rr.HitRate)
			}
			b, err := Run(trace, cfg, mode)
			if err != nil {
				t.Fatal(err)
			}
			a.Wall, b.Wall = 0, 0
			if a != b {
				t.Errorf("two runs differ:\n%+v\n%+v", a, b)
			}
		})
	}
}

// TestPeerGoals checks the peer table's verdicts on reports made by hand.
func TestPeerGoals(t *testing.T) {
	const ms = time.Millisecond
	res := func(mode string, rate, hit float64, p90 time.Duration) Result {
		return Result{Mode: mode, RateScale: rate, HitRate: hit, TTFT: [3]time.Duration{p90 / 2, p90, 2 * p90}}
	}
	// Goodputs (SLO 2 s): kv [kvPass, kvFail), dynamo [dynPass, 12), the
	// others lower. At x6: kv hit 0.60, TTFT p90 500 ms; dynamo 0.62, 450
	// ms; llm-d 0.55, 700 ms; sglang 0.50, 800 ms; round-robin 0.2, 1.9 s.
	// kv gave up 1.5 points of hit rate on 5 requests sent away from
	// their home; dynamo none.
	kv6 := res("kv", 6, 0.60, 500*ms)
	kv6.SentAway, kv6.GaveUp = 5, 0.015
	report := func(name string, kvPass, kvFail, dynPass float64, chain time.Duration) *Report {
		return &Report{Trace: name, SLO: 2 * time.Second, ChainFloors: map[float64][3]time.Duration{6: {0, chain, 0}},
			Results: []Result{
				res("round-robin", 6, 0.2, 1900*ms), res("round-robin", 9, 0.2, 3*time.Second),
				kv6, res("kv", kvPass, 0.6, time.Second), res("kv", kvFail, 0.6, 3*time.Second),
				res("dynamo", 6, 0.62, 450*ms), res("dynamo", dynPass, 0.62, time.Second), res("dynamo", 12, 0.62, 3*time.Second),
				res("llm-d", 6, 0.55, 700*ms), res("llm-d", 7, 0.55, 3*time.Second),
				res("sglang", 6, 0.50, 800*ms), res("sglang", 7, 0.50, 3*time.Second),
			}}
	}
	spread := map[string]Spread{"kv": {1, 30 * ms}, "dynamo": {3, 40 * ms}}
	tests := []struct {
		name                          string
		kvPass, kvFail, dynPass       float64
		chain                         time.Duration
		hit, ttft, good, settled, x12 bool
		chainOK, reached              bool
		// goods is the goodput ranges over the seeds (none: each mode's
		// seed agrees with its sweep).
		goods map[string][2]float64
		row   string
	}{
		// Hit: 60 >= 62 - max(1, 3) = 59. TTFT: 500 > 450 + max(30, 40) =
		// 490. Goodput 9 >= dynamo's 6 (the best peer): 1.5x. Chain 400
		// ms: 500 / 400 = 1.25 <= 1.5 (the best, dynamo, 450 / 400 = 1.12).
		{name: "a", kvPass: 9, kvFail: 12, dynPass: 6, chain: 400 * ms, hit: true, ttft: false, good: true, settled: true, x12: true, chainOK: true, reached: true,
			row: "| a | 0.600 / 0.620 / 0.550 / 0.500 / 0.200 | 0.97x (dynamo) | 1.00, 3.00 | ok | 500.0 / 450.0 / 700.0 / 800.0 / 1900.0 | 1.11x (dynamo) | 30.0, 40.0 | FAIL | x9 (<x12) / x6 (<x12) / x6 (<x7) / x6 (<x7) / x6 (<x9) | 1.50x (dynamo; 0.75x-2.00x) | x9, x6 | ok | ok ? | 400.0 | 1.25x | 1.12x | ok |"},
		// Goodput: kv [6, 9), dynamo 8: below, but kv's bracket reaches
		// past 8: not settled; 6 / 8 = 0.75x. Chain 300 ms: kv 1.67x,
		// dynamo 450 / 300 = 1.5x reaches it: FAIL.
		{name: "b", kvPass: 6, kvFail: 9, dynPass: 8, chain: 300 * ms, hit: true, good: false, settled: false, chainOK: false, reached: true,
			row: "| x6 (<x9) / x8 (<x12) / x6 (<x7) / x6 (<x7) / x6 (<x9) | 0.75x (dynamo; 0.50x-1.12x) | x6, x8 | FAIL ? | FAIL | 300.0 | 1.67x | 1.50x | FAIL |"},
		// Chain 200 ms: the best, dynamo, is at 2.25x: none reach it.
		// kv [6, 7), dynamo 8: kv's bracket ends below 8: settled.
		{name: "c", kvPass: 6, kvFail: 7, dynPass: 8, chain: 200 * ms, hit: true, good: false, settled: true, chainOK: false, reached: false,
			row: "| 0.75x (dynamo; 0.50x-0.88x) | x6, x8 | FAIL | FAIL | 200.0 | 2.50x | 2.25x | none |"},
		// The same, but dynamo's goodput is x6 with another seed: kv's 6
		// >= 8 - max(0, 2): within the spread.
		{name: "d", kvPass: 6, kvFail: 7, dynPass: 8, chain: 200 * ms, hit: true, good: true, settled: true, chainOK: false, reached: false,
			goods: map[string][2]float64{"dynamo": {6, 8}},
			row:   "| 0.75x (dynamo; 0.50x-0.88x) | x6, x6-x8 | ok | FAIL | 200.0 | 2.50x | 2.25x | none |"},
		// kv's own range reaches as far: kv x6-x8 with its seeds, dynamo
		// x8 with each: 6 >= 8 - 2. kv x6-x7 would not: 6 < 8 - 1, and
		// kv's bracket [6, 7) ends below 7: settled.
		{name: "e", kvPass: 6, kvFail: 7, dynPass: 8, chain: 200 * ms, hit: true, good: true, settled: true, chainOK: false, reached: false,
			goods: map[string][2]float64{"kv": {6, 8}},
			row:   "| 0.75x (dynamo; 0.50x-0.88x) | x6-x8, x8 | ok | FAIL | 200.0 | 2.50x | 2.25x | none |"},
		{name: "f", kvPass: 6, kvFail: 7, dynPass: 8, chain: 200 * ms, hit: true, good: false, settled: true, chainOK: false, reached: false,
			goods: map[string][2]float64{"kv": {6, 7}},
			row:   "| 0.75x (dynamo; 0.50x-0.88x) | x6-x7, x8 | FAIL | FAIL | 200.0 | 2.50x | 2.25x | none |"},
	}
	var rows []GoalRow
	for _, tt := range tests {
		g := Goals(report(tt.name, tt.kvPass, tt.kvFail, tt.dynPass, tt.chain), 6)
		g.SetSpread(spread)
		g.SetGoodputSpread(tt.goods)
		if g.PeerHitOK() != tt.hit || g.PeerTTFTOK() != tt.ttft || g.PeerGoodputOK() != tt.good || g.PeerGoodputSettled() != tt.settled ||
			(g.PeerGoodputRatio() >= goalPeerGoodput) != tt.x12 || g.ChainOK() != tt.chainOK || g.ChainReached() != tt.reached {
			t.Errorf("%s: hit %v ttft %v goodput %v settled %v ratio %.2f chain %v reached %v", tt.name, g.PeerHitOK(), g.PeerTTFTOK(),
				g.PeerGoodputOK(), g.PeerGoodputSettled(), g.PeerGoodputRatio(), g.ChainOK(), g.ChainReached())
		}
		rows = append(rows, g)
	}
	var out strings.Builder
	if err := WriteGoals(&out, rows, 6, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		if !strings.Contains(out.String(), tt.row) {
			t.Errorf("peer table lacks %q:\n%s", tt.row, out.String())
		}
	}
	for _, want := range []string{
		"peer goals met on 6 traces: hit >= best peer 6, ttft p90 <= best peer 0, goodput >= best peer 3, goodput >= 1.2x best peer 0 (goal: at least 3, FAIL; 1 more undecided by the goodput brackets)",
		"kv TTFT p90 <= 1.5x chain floor: 1 of the 2 traces where some policy reaches it",
		"no policy within 1.5x of the chain floor on 4 traces: c, d, e, f",
		"| a | 250.0 / 500.0 / 1000.0 | 225.0 / 450.0 / 900.0 |",
		"\na: kv's hit rate is 2.00 points below dynamo's; kv sent 5 requests away from the worker it saw caching most of their prompt, giving up 1.50 points (dynamo: 0 requests, 0.00 points)\nb: ",
		// a's 1.2x is not settled (1.50x, 0.75x-2.00x): it says what
		// bounds both goodputs; c's fails.
		"\na: kv's goodput is x9 (<x12), 1.2x dynamo's x6 is x7.2; missed above the goodput: kv at x12: TTFT p90 3000.0 ms; dynamo at x12: TTFT p90 3000.0 ms\n",
		"\nc: kv's goodput is x6 (<x7), 1.2x dynamo's x8 is x9.6; missed above the goodput: kv at x7: TTFT p90 3000.0 ms; dynamo at x12: TTFT p90 3000.0 ms\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("peer table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestMissed: what a result missed of the objectives, each part where it
// is over its objective.
func TestMissed(t *testing.T) {
	const ms = time.Millisecond
	o := Objectives{TTFT: 2 * time.Second, ITL: 50 * ms}
	r := func(rejected int, ttft, itl time.Duration) Result {
		return Result{Rejected: rejected, TTFT: [3]time.Duration{0, ttft, 0}, ITL: [3]time.Duration{0, itl, 0}}
	}
	tests := []struct {
		name string
		o    Objectives
		x    Result
		want string
	}{
		{"met", o, r(0, 2*time.Second, 50*ms), ""},
		{"TTFT", o, r(0, 2100*ms, 40*ms), "TTFT p90 2100.0 ms"},
		{"ITL", o, r(0, time.Second, 61800*time.Microsecond), "ITL p90 61.8 ms"},
		{"both and rejected", o, r(3, 3*time.Second, 70*ms), "3 rejected and TTFT p90 3000.0 ms and ITL p90 70.0 ms"},
		{"no ITL objective", Objectives{TTFT: 2 * time.Second}, r(0, time.Second, time.Second), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.missed(tt.x); got != tt.want {
				t.Fatalf("missed = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPeerGoodputRange checks the range kv's goodput over the best peer's
// can take within the brackets, and the 1.2x verdict it decides, on
// brackets made by hand.
func TestPeerGoodputRange(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name        string
		kv          [2]float64
		peers       [][2]float64
		lo, hi      float64
		ok, settled bool
	}{
		// kv in [40.5, 43), the best peer in [33.8, 40.5): the rates met
		// give 1.198, but the true ratio is anywhere in (1.00, 1.27).
		{name: "the rates met are 1.198x apart, the brackets do not decide", kv: [2]float64{40.5, 43}, peers: [][2]float64{{16.5, 18}, {33.8, 40.5}, {30.4, 33.8}},
			lo: 1, hi: 43 / 33.8, ok: false, settled: false},
		// 9 / 7 = 1.29 >= 1.2 whatever the goodputs within the brackets.
		{name: "kv's lowest over the peers' highest is 1.2x or more", kv: [2]float64{9, 12}, peers: [][2]float64{{6, 7}, {5, 6}, {4, 5}},
			lo: 9.0 / 7, hi: 2, ok: true, settled: true},
		// 12 / 10 = 1.2: the true ratio is below it.
		{name: "kv's highest over the best peer's lowest is at most 1.2x", kv: [2]float64{9, 12}, peers: [][2]float64{{4, 5}, {10, 12}, {4, 5}},
			lo: 0.75, hi: 1.2, ok: false, settled: true},
		// The best peer's range is another peer's top: a peer with a
		// lower Pass can still be the best.
		{name: "the peers' highest miss decides the low end", kv: [2]float64{9, 12}, peers: [][2]float64{{6, 7}, {5, 8}, {4, 5}},
			lo: 9.0 / 8, hi: 2, ok: true, settled: false},
		{name: "a peer that met the top rate: no low end", kv: [2]float64{9, 12}, peers: [][2]float64{{6, inf}},
			lo: 0, hi: 2, ok: true, settled: false},
		{name: "kv met the top rate: no high end", kv: [2]float64{9, inf}, peers: [][2]float64{{6, 7}},
			lo: 9.0 / 7, hi: inf, ok: true, settled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := GoalRow{Peers: []Figures{{Mode: "kv", Ran: true, Pass: tt.kv[0], Fail: tt.kv[1]}}}
			for i, p := range tt.peers {
				g.Peers = append(g.Peers, Figures{Mode: PeerModes[i], Ran: true, Pass: p[0], Fail: p[1]})
			}
			// Round-robin is not a peer: its goodput never counts.
			g.Peers = append(g.Peers, Figures{Mode: "round-robin", Ran: true, Pass: 100, Fail: inf})
			lo, hi := g.PeerGoodputRange()
			ok, settled := g.PeerGoodputX12()
			if math.Abs(lo-tt.lo) > 1e-12 || !(math.Abs(hi-tt.hi) <= 1e-12 || hi == tt.hi) || ok != tt.ok || settled != tt.settled {
				t.Fatalf("range (%v, %v) ok %v settled %v; want (%v, %v) %v %v", lo, hi, ok, settled, tt.lo, tt.hi, tt.ok, tt.settled)
			}
		})
	}
}

// TestSettlePeerRatio starts from brackets that do not decide kv >= 1.2x
// the best peer (kv in [4, 8), llm-d in [4, 5), dynamo in [2, 3); the
// misses are made up, the rest are real runs of 60 requests) and checks
// that the first round runs kv and llm-d at their brackets' middles and
// not dynamo (its bracket ends below the best peer's Pass), at most two
// runs a round, and that it stops only once the brackets decide or the
// rounds are spent.
func TestSettlePeerRatio(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:60]
	slo := Objectives{TTFT: 300 * time.Millisecond}
	res := func(mode string, rate float64, p90 time.Duration) Result {
		return Result{Mode: mode, RateScale: rate, TTFT: [3]time.Duration{0, p90, 0}}
	}
	start := []Result{res("kv", 4, time.Millisecond), res("kv", 8, time.Hour),
		res("llm-d", 4, time.Millisecond), res("llm-d", 5, time.Hour),
		res("dynamo", 2, time.Millisecond), res("dynamo", 3, time.Hour)}
	for _, rounds := range []int{0, 1, 3} {
		got, err := SettlePeerRatio(trace, smallConfig(), start, slo, 1.2, rounds, 1)
		if err != nil {
			t.Fatal(err)
		}
		more := got[len(start):]
		if len(more) > 2*rounds || (rounds > 0 && len(more) < 2) {
			t.Fatalf("%d rounds ran %d", rounds, len(more))
		}
		if rounds > 0 && (more[0].Mode != "kv" || more[0].RateScale != 6 || more[1].Mode != "llm-d" || more[1].RateScale != 4.5) {
			t.Fatalf("first round ran %s x%g and %s x%g, want kv x6 and llm-d x4.5", more[0].Mode, more[0].RateScale, more[1].Mode, more[1].RateScale)
		}
		for _, x := range more {
			if x.Mode == "dynamo" {
				t.Fatalf("ran dynamo at x%g: its bracket ends below llm-d's goodput", x.RateScale)
			}
		}
		kv, kvFail := bracket(got, "kv", slo)
		var peers [][2]float64
		for _, m := range []string{"dynamo", "llm-d"} {
			p, f := bracket(got, m, slo)
			peers = append(peers, [2]float64{p, f})
		}
		lo, hi := peerRatioRange(kv, kvFail, peers)
		if len(more) < 2*rounds && lo < 1.2 && hi > 1.2 {
			t.Fatalf("stopped after %d runs unsettled: kv [%g, %g), peers %v", len(more), kv, kvFail, peers)
		}
		t.Logf("%d rounds: %d runs, kv [%g, %g), dynamo and llm-d %v: ratio in (%.3f, %.3f)", rounds, len(more), kv, kvFail, peers, lo, hi)
	}
}

// TestRunGoodputSpread measures goodput again with other seeds over the
// rate scales a sweep ran. The sweep's rows are made by hand, so that the
// real runs with the other seeds must climb past the sweep's goodput
// (every real run meets an SLO of an hour) or fall below it (none meets
// one of a nanosecond); the range holds the sweep's goodput and theirs.
func TestRunGoodputSpread(t *testing.T) {
	trace, err := BuiltinTrace("sessions")
	if err != nil {
		t.Fatal(err)
	}
	trace = trace[:120]
	cfg := smallConfig()
	row := func(rate float64, p90 time.Duration) Result {
		return Result{Mode: "kv", RateScale: rate, TTFT: [3]time.Duration{0, p90, p90}}
	}
	tests := []struct {
		name    string
		results []Result
		slo     Objectives
		seeds   int
		want    map[string][2]float64
	}{
		{"one seed runs nothing", []Result{row(2, 0)}, Objectives{TTFT: time.Hour}, 1, map[string][2]float64{}},
		{"climbs past the sweep's goodput", []Result{row(2, 0), row(4, 2*time.Hour), row(8, 2*time.Hour)},
			Objectives{TTFT: time.Hour}, 2, map[string][2]float64{"kv": {2, 8}}},
		{"falls below it", []Result{row(2, 0), row(4, 0), row(8, 0)},
			Objectives{TTFT: time.Nanosecond}, 3, map[string][2]float64{"kv": {0, 8}}},
		{"agrees with it", []Result{row(2, 0), row(4, 0)},
			Objectives{TTFT: time.Hour, ITL: time.Hour}, 2, map[string][2]float64{"kv": {4, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RunGoodputSpread(trace, cfg, tt.results, []string{"kv", "dynamo"}, tt.slo, tt.seeds, 2)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("goodput ranges %v, want %v", got, tt.want)
			}
		})
	}
}
