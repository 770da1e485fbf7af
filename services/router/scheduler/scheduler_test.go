package scheduler

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

func w(i uint64) index.WorkerID { return index.WorkerID{Instance: i} }

// linear is a timing model with round numbers: a prompt token costs 1 ms,
// a decode step 10 ms, and a step holds 1000 tokens.
var linear = timingmodel.Model{PrefillPerToken: 1, DecodeBase: 10, MaxBatchedTokens: 1000}

// req is 10 blocks of 10 tokens.
var req = Request{Blocks: 10, Tokens: 100, BlockSize: 10}

func TestSelectCosts(t *testing.T) {
	tests := []struct {
		name  string
		cands []Candidate
		p     Params
		// rate is the requests per ms expected at each worker.
		rate  float64
		want  index.WorkerID
		costs []float64
	}{
		{
			name:  "cache hit wins at equal load",
			cands: []Candidate{{Worker: w(1)}, {Worker: w(2), Overlap: 8}},
			p:     Params{OverlapWeight: 1},
			want:  w(2), costs: []float64{100, 20},
		},
		{
			name: "a decode batch costs its steps, not its blocks",
			// w1 computes the last 10 tokens with one decode step (10 ms)
			// beside them, and its 5 decoding requests wait 10 ms each
			// for those tokens; its 5,000 decode blocks cost nothing.
			cands: []Candidate{{Worker: w(1), Overlap: 9, Decoding: 5, DecodeBlocks: 5000}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 1},
			want:  w(1), costs: []float64{10 + 10 + 5*10, 100},
		},
		{
			name:  "a queue outweighs a hit",
			cands: []Candidate{{Worker: w(1), Overlap: 8, QueuedTokens: 500}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 1},
			want:  w(2), costs: []float64{520, 100},
		},
		{
			name:  "a low weight favours spreading decode",
			cands: []Candidate{{Worker: w(1), Overlap: 8, Decoding: 1}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 0.1},
			want:  w(2), costs: []float64{2 + 10 + 1*2, 10},
		},
		{
			// w1 caches 8 of 10 blocks, but its 10 decoding requests
			// each wait for the 20 tokens it computes: 20 + 10 + 10*20.
			name:  "many decoding requests wait out a short prefill",
			cands: []Candidate{{Worker: w(1), Overlap: 8, Decoding: 10}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 1},
			want:  w(2), costs: []float64{230, 100},
		},
		{
			name:  "a fully cached prompt still computes its last block",
			cands: []Candidate{{Worker: w(1), Overlap: 20}},
			p:     Params{OverlapWeight: 1},
			want:  w(1), costs: []float64{10},
		},
		{
			name:  "idle cluster: a short queue outweighs a hit, for the request's own TTFT",
			cands: []Candidate{{Worker: w(1), Overlap: 8, QueuedTokens: 100}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 1},
			want:  w(2), costs: []float64{120, 100},
		},
		{
			// 1/64 request per ms: w1 does 20 ms of work behind 100,
			// 20*(100+10)/64 for those who come after; w2 recomputes the
			// prefix, 100 ms of work they wait for, 100*(0+50)/64.
			name:  "busy cluster: recomputing a cached prefix costs those who queue behind it",
			cands: []Candidate{{Worker: w(1), Overlap: 8, QueuedTokens: 100}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 1}, rate: 1.0 / 64,
			want: w(1), costs: []float64{154.375, 178.125},
		},
		{
			name:  "busy cluster, no cache anywhere: the shorter queue",
			cands: []Candidate{{Worker: w(1), QueuedTokens: 100}, {Worker: w(2)}},
			p:     Params{OverlapWeight: 1}, rate: 1.0 / 64,
			want: w(2), costs: []float64{200 + 100*150/64.0, 100 + 100*50/64.0},
		},
		{
			name:  "equal costs: the longer prefix stays",
			cands: []Candidate{{Worker: w(1), Timing: timingmodel.Model{MaxBatchedTokens: 1}}, {Worker: w(2), Overlap: 5, Timing: timingmodel.Model{MaxBatchedTokens: 1}}},
			p:     Params{OverlapWeight: 1},
			want:  w(2), costs: []float64{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.cands {
				if tt.cands[i].Timing == (timingmodel.Model{}) {
					tt.cands[i].Timing = linear
				}
			}
			r := req
			r.Rate = tt.rate
			for seed := range uint64(8) {
				i, err := Select(tt.cands, r, tt.p, rand.New(rand.NewPCG(seed, 2)))
				if err != nil {
					t.Fatal(err)
				}
				if tt.cands[i].Worker != tt.want {
					t.Fatalf("chose %v, want %v", tt.cands[i].Worker, tt.want)
				}
			}
			for j, c := range tt.cands {
				if c.Cost != tt.costs[j] {
					t.Fatalf("cost of %v = %v, want %v", c.Worker, c.Cost, tt.costs[j])
				}
			}
		})
	}
}

func TestSelectTiesAreRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	counts := map[index.WorkerID]int{}
	for range 3000 {
		cands := []Candidate{{Worker: w(1), Timing: linear}, {Worker: w(2), Timing: linear}, {Worker: w(3), Timing: linear}, {Worker: w(4), Decoding: 1, Timing: linear}}
		i, _ := Select(cands, req, Params{OverlapWeight: 1}, rng)
		counts[cands[i].Worker]++
	}
	if counts[w(4)] != 0 {
		t.Fatalf("the costlier worker was chosen %d times", counts[w(4)])
	}
	for _, id := range []index.WorkerID{w(1), w(2), w(3)} {
		if counts[id] < 800 || counts[id] > 1200 {
			t.Fatalf("tie-break is not uniform: %v", counts)
		}
	}
}

func TestSelectTemperature(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	counts := [2]int{}
	for range 4000 {
		cands := []Candidate{{Worker: w(1), Overlap: 8, Timing: linear}, {Worker: w(2), Timing: linear}}
		i, _ := Select(cands, req, Params{OverlapWeight: 1, Temperature: 0.5}, rng)
		counts[i]++
	}
	// exp(0) : exp(-1/0.5): the cheap worker about 88% of the time.
	if counts[0] < 3300 || counts[0] > 3750 || counts[1] == 0 {
		t.Fatalf("softmax split = %v, want about 3523:477", counts)
	}
}

func TestSelectNoCandidates(t *testing.T) {
	if _, err := Select(nil, req, Params{}, rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadLifecycle(t *testing.T) {
	l := NewLoad()
	check := func(step string, id index.WorkerID, prefill, decode, reqs int) {
		t.Helper()
		p, d, r := l.Of(id)
		if p != prefill || d != decode || r != reqs {
			t.Fatalf("%s: load of %v = (%d, %d, %d), want (%d, %d, %d)", step, id, p, d, r, prefill, decode, reqs)
		}
	}
	// a and b share their first two blocks (a system prompt).
	l.Add("a", w(1), 3, []uint64{1, 2, 3})
	l.Add("b", w(1), 2, []uint64{1, 2, 4, 5})
	check("after two adds", w(1), 5, 0, 2)
	l.PrefillDone("a")
	l.PrefillDone("a")
	check("after a's prefill", w(1), 2, 3, 2)
	l.PrefillDone("b")
	check("after b's prefill", w(1), 0, 5, 2)
	l.Free("a")
	l.Free("a")
	l.Free("never")
	check("after a's free", w(1), 0, 4, 1)
	l.Add("b", w(2), 2, []uint64{1, 2, 4, 5}) // b migrated
	check("b left w1", w(1), 0, 0, 0)
	check("b on w2", w(2), 2, 0, 1)
	l.RemoveWorker(w(2))
	check("w2 removed", w(2), 0, 0, 0)
	l.PrefillDone("b")
	check("late prefill of a removed request", w(2), 0, 0, 0)
}

func TestLoadExpire(t *testing.T) {
	l := NewLoad()
	l.Add("old", w(1), 2, []uint64{1})
	l.Add("retried", w(1), 2, []uint64{2})
	cutoff := time.Now()
	time.Sleep(time.Millisecond) // the clock must move past cutoff
	l.Add("retried", w(2), 2, []uint64{2})
	l.Add("new", w(1), 2, []uint64{3})
	if n := l.Expire(cutoff); n != 1 {
		t.Fatalf("Expire dropped %d requests, want 1 (the old one; the retry is newer)", n)
	}
	if _, _, r := l.Of(w(1)); r != 1 {
		t.Fatalf("worker 1 keeps %d requests, want 1", r)
	}
	if _, _, r := l.Of(w(2)); r != 1 {
		t.Fatalf("worker 2 keeps %d requests, want the retried one", r)
	}
}

// TestLoadReportMerge checks that a worker's report adds only what the
// router does not know: its own requests keep the router's record, freed
// ones are ignored however late the report, and others count while the
// report is fresh.
func TestLoadReportMerge(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLoadClock(func() time.Time { return now })
	l.Add("mine", w(1), 3, []uint64{1, 2, 3})
	l.PrefillDone("mine")
	l.Add("done", w(1), 3, []uint64{1, 2, 4})
	l.PrefillDone("done")
	l.Free("done")
	// The report was taken before "done" finished.
	l.Report(w(1), []ReportedRequest{
		{ID: "mine", DecodeBlocks: 3}, {ID: "done", DecodeBlocks: 3},
		{ID: "other", PrefillTokens: 500}, {ID: "other-decoding", DecodeBlocks: 7},
	}, 0, 100, 16)
	c := Candidate{Worker: w(1)}
	l.Fill(&c, 16)
	// The foreign prompt's attention is that of an uncached one; it
	// takes its 32 blocks (500 tokens) when admitted.
	want := Candidate{Worker: w(1), DecodeBlocks: 3, QueuedTokens: 500, QueuedAttn: 500 * 500, Decoding: 2, Usage: 0.1,
		KV: KVSpace{Total: 100, Held: 3 + 7, Holders: 2, Queued: 32, Waiting: 1}}
	if c != want {
		t.Fatalf("filled %+v, want %+v", c, want)
	}
	now = now.Add(ReportTTL - time.Nanosecond)
	if l.Fill(&c, 16); c != want {
		t.Fatalf("a nanosecond before the report goes stale: %+v, want %+v", c, want)
	}
	now = now.Add(time.Nanosecond)
	l.Fill(&c, 16)
	want = Candidate{Worker: w(1), DecodeBlocks: 3, Decoding: 1, Usage: 0.03, KV: KVSpace{Total: 100, Held: 3, Holders: 1}}
	if c != want {
		t.Fatalf("after the report went stale: %+v, want %+v", c, want)
	}
	// Aggregate-only reports count only prompt tokens beyond the router's.
	l.Add("queued", w(2), 2, []uint64{9})
	l.Report(w(2), nil, 100, 0, 16)
	c = Candidate{Worker: w(2)}
	l.Fill(&c, 16)
	if c.QueuedTokens != 100 || c.Decoding != 0 {
		t.Fatalf("aggregate report: %+v, want 100 queued tokens (32 ours + 68 others)", c)
	}
}

// TestHeadProgress checks that the head of a worker's prefill queue counts
// what it has had time to compute since it became the head, at the pace of
// the worker's timing model, and never all of it before its first token.
func TestHeadProgress(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at     time.Duration // since t0
		do     func(l *Load)
		decode int // decoding requests, for the pace
		want   int // queued tokens filled in
	}
	decoding := func(l *Load) { l.Add("d", w(1), 0, []uint64{7}); l.PrefillDone("d") }
	tests := []struct {
		name  string
		steps []step
	}{
		{"a long prompt is half done after half its time", []step{
			{at: 0, want: 3000},
			{at: 1500 * time.Millisecond, want: 1500},
		}},
		{"its last block stays until its first token", []step{
			{at: time.Hour, want: 10},
		}},
		{"only the head progresses; the next starts at the head's first token", []step{
			{at: 0, do: func(l *Load) { l.Add("b", w(1), 100, nil) }, want: 4000},
			{at: 500 * time.Millisecond, want: 3500},
			// a decodes now: b's chunks are 990 tokens per 1000 ms step.
			{at: 3200 * time.Millisecond, do: func(l *Load) { l.PrefillDone("a") }, decode: 1, want: 1000},
			{at: 3500 * time.Millisecond, decode: 1, want: 703},
		}},
		{"a head freed before its first token hands over at once", []step{
			{at: 0, do: func(l *Load) { l.Add("b", w(1), 100, nil) }, want: 4000},
			{at: 200 * time.Millisecond, do: func(l *Load) { l.Free("a") }, want: 1000},
		}},
		{"decoding requests slow it: smaller chunks and a decode step each", []step{
			// 999 tokens per 999+10 ms step.
			{at: 0, do: decoding, decode: 1, want: 3000},
			{at: 1009 * time.Millisecond, decode: 1, want: 2001},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			l := NewLoadClock(func() time.Time { return now })
			l.Add("a", w(1), 300, []uint64{1, 2, 3})
			for i, s := range tt.steps {
				now = t0.Add(s.at)
				if s.do != nil {
					s.do(l)
				}
				c := Candidate{Worker: w(1), Timing: linear}
				l.Fill(&c, 10)
				if c.QueuedTokens != s.want || c.Decoding != s.decode {
					t.Fatalf("step %d: %d queued tokens, %d decoding; want %d, %d", i, c.QueuedTokens, c.Decoding, s.want, s.decode)
				}
			}
		})
	}
}

// TestFillAllMatchesFill checks FillAll's records by position against Fill
// (a map lookup each) while workers get records, lose them and come back,
// and candidate lists change, as FillAll's cache must follow all of that.
func TestFillAllMatchesFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	now := time.Unix(1000, 0)
	l := NewLoadClock(func() time.Time { return now })
	lists := [][]index.WorkerID{{w(1), w(2), w(3), w(4)}, {w(1), w(2), w(3), w(4)}, {w(2), w(3), w(5)}, {w(4), w(3), w(2), w(1)}}
	next := 0
	for i := range 2_000 {
		now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		wk := w(uint64(1 + rng.IntN(5)))
		switch rng.IntN(6) {
		case 0, 1:
			l.Add(string(rune('a'+next%26))+string(rune('a'+next/26%26)), wk, 1+rng.IntN(40), []uint64{uint64(rng.IntN(8))})
			next++
		case 2:
			l.PrefillDone(string(rune('a'+rng.IntN(26))) + string(rune('a'+rng.IntN(26))))
		case 3:
			l.Free(string(rune('a'+rng.IntN(26))) + string(rune('a'+rng.IntN(26))))
		case 4:
			l.Report(wk, []ReportedRequest{{ID: "foreign", PrefillTokens: rng.IntN(100), DecodeBlocks: rng.IntN(9)}}, 0, 100, 10)
		case 5:
			if rng.IntN(4) == 0 {
				l.RemoveWorker(wk)
			}
		}
		ids := lists[rng.IntN(len(lists))]
		got := make([]Candidate, len(ids))
		for j, id := range ids {
			got[j] = Candidate{Worker: id, Overlap: j, Timing: linear}
		}
		l.FillAll(got, 10)
		for j, id := range ids {
			want := Candidate{Worker: id, Overlap: j, Timing: linear}
			l.Fill(&want, 10)
			// FillAll also prepares the step costs (Fill leaves them to
			// Cost): those of the load it filled.
			if g := got[j]; !g.prepared || g.steps != g.Timing.Steps(g.Decoding, g.Usage) {
				t.Fatalf("step %d, candidate %d: FillAll prepared %v, steps %+v, want those of %+v", i, j, g.prepared, g.steps, g)
			}
			got[j].steps, got[j].prepared = timingmodel.Steps{}, false
			if got[j] != want {
				t.Fatalf("step %d, candidate %d: FillAll %+v, Fill %+v", i, j, got[j], want)
			}
		}
	}
}

func TestWaitSaved(t *testing.T) {
	tests := []struct {
		name                                 string
		home, drainHome, seeded, drainSeeded float64
		want                                 float64
	}{
		{name: "no queue at home saves nothing", home: 0, drainHome: 1, seeded: 0, drainSeeded: 1, want: 0},
		{name: "an empty copy saves the home's whole backlog", home: 100, drainHome: 1, seeded: 0, drainSeeded: 1, want: 100 * 100 / 2},
		// (100² - 40²)/2: the copy's backlog is shorter all along.
		{name: "equal drains: the difference of the squares", home: 100, drainHome: 1, seeded: 40, drainSeeded: 1, want: 4200},
		{name: "a copy behind a longer queue saves nothing", home: 100, drainHome: 1, seeded: 150, drainSeeded: 1, want: 0},
		// The home drains at 0.5 and is empty at 200; the copy at 1 from
		// 120 is shorter from 40 on: the integral of 0.5t-20 over
		// [40, 120] and of 100-0.5t over [120, 200], 1600 each.
		{name: "a busier home is overtaken", home: 100, drainHome: 0.5, seeded: 120, drainSeeded: 1, want: 3200},
		// 50 - 0.75t until it is 0 at 66.7: 50*66.7/2.
		{name: "a busier copy falls behind", home: 100, drainHome: 1, seeded: 50, drainSeeded: 0.25, want: 5000.0 / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WaitSaved(tt.home, tt.drainHome, tt.seeded, tt.drainSeeded); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("WaitSaved = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSelectSeedsAHotPrefix: a worker without the request's cached prefix
// is credited with what a copy there saves the requests that share it,
// while the prefix's one home has a queue and they come often enough.
func TestSelectSeedsAHotPrefix(t *testing.T) {
	// w1 caches 8 of the 10 blocks behind 150 ms of queue: 170 ms to the
	// first token and 20 ms of work, 20*(150+10)/16 for those behind it;
	// w2 recomputes all 100 tokens, 100*50/16 for those behind it.
	home := Candidate{Worker: w(1), Overlap: 8, QueuedTokens: 150, Timing: linear}
	cold := Candidate{Worker: w(2), Timing: linear}
	const rate = 1.0 / 16
	homeCost, coldCost := 170+20*160*rate, 100+100*50*rate
	// The home's 150 ms drain at 0.5 (empty at 300), the copy's 100 at
	// 0.75 (empty at 133.3): 50 + 0.25t saved until 133.3, then the
	// home's 83.3 left, 83.3²/(2*0.5).
	saved := (50+50+0.25*400.0/3)/2*400/3 + (250.0/3)*(250.0/3)
	tests := []struct {
		name    string
		shared  Shared
		queued  int
		want    index.WorkerID
		credits bool
	}{
		{name: "no sharers: the request stays with its cache", want: w(1)},
		{name: "few sharers: the copy is not worth its recomputation", shared: Shared{Blocks: 8, Rate: 0.001, HomeBusy: 0.5, SeedBusy: 0.25}, want: w(1), credits: true},
		{name: "many sharers: a second home", shared: Shared{Blocks: 8, Rate: 0.01, HomeBusy: 0.5, SeedBusy: 0.25}, want: w(2), credits: true},
		{name: "no queue at the home: nothing to save", shared: Shared{Blocks: 8, Rate: 0.01, HomeBusy: 0.5, SeedBusy: 0.25}, queued: -1, want: w(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := home
			wantHome := homeCost
			if tt.queued < 0 {
				h.QueuedTokens = 0
				wantHome = 20 + 20*10*rate
			}
			cands := []Candidate{h, cold}
			r := req
			r.Rate, r.Shared = rate, tt.shared
			i, err := Select(cands, r, Params{OverlapWeight: 1}, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if cands[i].Worker != tt.want {
				t.Fatalf("chose %v, want %v (costs %v, %v)", cands[i].Worker, tt.want, cands[0].Cost, cands[1].Cost)
			}
			wantCold := coldCost
			if tt.credits {
				wantCold -= tt.shared.Rate * saved
			}
			if math.Abs(cands[0].Cost-wantHome) > 1e-9 || math.Abs(cands[1].Cost-wantCold) > 1e-9 {
				t.Fatalf("costs %v, %v; want %v, %v", cands[0].Cost, cands[1].Cost, wantHome, wantCold)
			}
		})
	}
}

// TestLoadFreeBeforeAdd checks that a request whose Free arrives before its
// routing (the caller gave up waiting for the decision and freed it on
// another stream, or another replica freed it) is not counted when the
// routing follows, while an id freed after it ran may be routed again, and
// the memory of an early free ends after FreedMemory.
func TestLoadFreeBeforeAdd(t *testing.T) {
	type step struct {
		op        string // "add", "free" or "wait" (FreedMemory and a second)
		wantAdded bool   // for "add": whether it was counted
	}
	cases := []struct {
		name  string
		steps []step
		reqs  int // requests on the worker at the end
	}{
		{"free then add", []step{{op: "free"}, {"add", false}}, 0},
		{"freed twice then add", []step{{op: "free"}, {op: "free"}, {"add", false}}, 0},
		{"the early free is used once", []step{{op: "free"}, {"add", false}, {"add", true}}, 1},
		{"ran, freed, routed again", []step{{"add", true}, {op: "free"}, {"add", true}}, 1},
		{"an early free is forgotten", []step{{op: "free"}, {op: "wait"}, {"add", true}}, 1},
		{"add then free", []step{{"add", true}, {op: "free"}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			l := NewLoadClock(func() time.Time { return now })
			for i, s := range tc.steps {
				switch s.op {
				case "add":
					if got := l.Add("r", w(1), 2, []uint64{1, 2}); got != s.wantAdded {
						t.Fatalf("step %d: Add counted %v, want %v", i, got, s.wantAdded)
					}
				case "free":
					l.Free("r")
				case "wait":
					now = now.Add(FreedMemory + time.Second)
					l.Free("other") // expiry runs on a free
				}
			}
			if _, _, r := l.Of(w(1)); r != tc.reqs {
				t.Fatalf("worker keeps %d requests, want %d", r, tc.reqs)
			}
		})
	}
}
