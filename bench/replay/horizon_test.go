package replay

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// TestHorizonBound checks the finite-horizon bound against numbers worked
// out by hand (SLO 100 ms; works in ms of least prefill time).
func TestHorizonBound(t *testing.T) {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	req := func(at, work float64) horizonRequest { return horizonRequest{arrival: ms(at), work: work} }
	tests := []struct {
		name    string
		reqs    []horizonRequest
		workers int
		q       float64
		mayMiss int
		forced  int
		rate    float64
	}{
		// 120 ms of prefill by the second deadline, 100/s + 100 ms
		// after the first arrival: s <= 100/20.
		{name: "two in a row on one engine", reqs: []horizonRequest{req(0, 60), req(100, 60)}, workers: 1, q: 1, rate: 5},
		{name: "in any order", reqs: []horizonRequest{req(100, 60), req(0, 60)}, workers: 1, q: 1, rate: 5},
		// Two engines, one each: nothing binds.
		{name: "one engine each", reqs: []horizonRequest{req(0, 60), req(100, 60)}, workers: 2, q: 1, rate: math.Inf(1)},
		// All at once: 3 x 90 ms on two engines by 100 ms, at any rate.
		{name: "all at once, none may miss", reqs: []horizonRequest{req(0, 90), req(0, 90), req(0, 90)}, workers: 2, q: 1, rate: 0},
		// floor(0.5 x 2) + 1 = 2 must meet it: the third misses, on an
		// engine of its own or behind one of the others.
		{name: "all at once, one may miss", reqs: []horizonRequest{req(0, 90), req(0, 90), req(0, 90)}, workers: 2, q: 0.5, mayMiss: 1, rate: math.Inf(1)},
		// floor(0.75 x 3) + 1 = 3 of 4 must: 270 ms > 200 whichever.
		{name: "all at once, three of four", reqs: []horizonRequest{req(0, 90), req(0, 90), req(0, 90), req(0, 90)}, workers: 2, q: 0.75, mayMiss: 1, rate: 0},
		// 150 ms alone is over the SLO: it misses at any rate, and it is
		// the one that may.
		// the one that may. It is routed before or after the one that
		// arrives with it; either way the other two are on time only if
		// its prefill is done before the last one's first token (FIFO):
		// all 270 ms by 100/s + 100, s <= 100/170.
		{name: "forced miss", reqs: []horizonRequest{req(0, 150), req(0, 60), req(100, 60)}, workers: 1, q: 0.5, mayMiss: 1, forced: 1, rate: 100.0 / 170},
		{name: "more forced than may miss", reqs: []horizonRequest{req(0, 150), req(0, 150), req(0, 150)}, workers: 2, q: 0.5, mayMiss: 1, forced: 3, rate: 0},
		// X (100 ms) then four of 60 ms at 0, 50, 100, 150; 2 engines, 1
		// may miss. Dropping X for free would leave 240 ms by 150/s +
		// 100 on 2 engines: s <= 7.5. But the engine X goes to serves no
		// later request before X's prefill is done (FIFO), so a free X
		// costs that engine from X's arrival on. Over the whole window:
		// none free 2 x 150 / (340 - 200) = 2.14; X free 150 / (240 -
		// 200) = 3.75; a 60 ms one free from arrival g on, (150 + g) /
		// (280 - 200): at most 300/80 = 3.75 (g = 150). Shorter windows
		// do not bind below that (X..Y3: none free 200/80 = 2.5, X free
		// 180 ms <= 200).
		{name: "a free miss costs its engine", reqs: []horizonRequest{req(0, 100), req(0, 60), req(50, 60), req(100, 60), req(150, 60)},
			workers: 2, q: 0.75, mayMiss: 1, rate: 3.75},
		{name: "no requests", workers: 2, q: 0.9, rate: math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := horizonBound(tt.reqs, tt.workers, 100*time.Millisecond, tt.q)
			near := h.Rate == tt.rate || math.Abs(h.Rate-tt.rate) <= 1e-9*tt.rate
			if !near || h.MayMiss != tt.mayMiss || h.Forced != tt.forced {
				t.Fatalf("rate %v, may miss %d, forced %d; want %v, %d, %d", h.Rate, h.MayMiss, h.Forced, tt.rate, tt.mayMiss, tt.forced)
			}
		})
	}
}

// TestHorizonWindowsHoldOnEngines checks the inequality the horizon bound
// rests on against real engines: generated traces, routed round-robin and
// three of four to one engine, arrive in virtual time at a rate
// scale up to the bound, where requests queue; then for every window of requests
// the engines' steps inside [first arrival, last arrival + SLO] took at
// least the least prefill time of the own tokens of the window's requests
// that met the SLO. And no run meets the SLO's p90 above the bound.
func TestHorizonWindowsHoldOnEngines(t *testing.T) {
	const slo = 500 * time.Millisecond
	for _, preset := range []string{"low-reuse", "sessions"} {
		g := Presets[preset]
		g.Requests, g.Seed = 80, 11
		trace, err := Generate(g)
		if err != nil {
			t.Fatal(err)
		}
		cfg := smallConfig()
		cfg.Workers = 2
		b := ComputeBounds(trace, cfg)
		h := horizonBound(b.requests, cfg.Workers, slo, 0.9)
		for _, policy := range []string{"round-robin", "skewed"} {
			// From light load to the bound, where requests queue.
			for _, share := range []float64{0.05, 0.25, 1.5} {
				rate := share * h.Rate
				t.Run(preset+"/"+policy+"/x"+strconv.FormatFloat(rate, 'g', 3, 64), func(t *testing.T) {
					run := runOnEngines(t, trace, cfg, rate, policy)
					checkWindows(t, b, run, cfg.Workers, slo)
					checkFirstTokensInOrder(t, run)
					met := 0
					for _, f := range run.ttft {
						if f <= slo {
							met++
						}
					}
					if p90 := run.p90(); p90 <= slo && rate > h.Rate {
						t.Fatalf("TTFT p90 %v within %v at x%g, above the horizon bound x%g", p90, slo, rate, h.Rate)
					}
					t.Logf("p90 %v, %d of %d within the SLO, horizon x%.3g", run.p90(), met, len(trace), h.Rate)
				})
			}
		}
	}
}

// engineRun is what runOnEngines saw: each request's arrival and TTFT (in
// trace order), and every step's start, end and engine.
type engineRun struct {
	arrival, ttft []time.Duration
	steps         []engineStep
	// routed lists each engine's requests in the order they were added.
	routed [][]int
}

type engineStep struct{ start, end time.Duration }

func (r engineRun) p90() time.Duration {
	d := slices.Clone(r.ttft)
	return percentiles(d)[1]
}

// runOnEngines plays trace at a rate scale on real engines in virtual time,
// each request to an engine chosen by policy when it arrives.
func runOnEngines(t *testing.T, trace []Request, cfg Config, rate float64, policy string) engineRun {
	t.Helper()
	engines := make([]*simengine.Engine, cfg.Workers)
	free := make([]time.Duration, cfg.Workers) // when each engine's step ends
	for i := range engines {
		var err error
		if engines[i], err = simengine.New(cfg.Engine); err != nil {
			t.Fatal(err)
		}
	}
	order := make([]int, len(trace))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(trace[a].Arrival - trace[b].Arrival) })
	run := engineRun{arrival: make([]time.Duration, len(trace)), ttft: make([]time.Duration, len(trace)), routed: make([][]int, cfg.Workers)}
	first := make([]bool, len(trace))
	var tokens []uint32
	next := 0
	// step runs engine e's next step from its free time on.
	step := func(e int) {
		res := engines[e].Step()
		start := free[e]
		free[e] += res.Duration
		run.steps = append(run.steps, engineStep{start, free[e]})
		for _, o := range res.Outputs {
			n, _ := strconv.Atoi(o.RequestID)
			if len(o.Tokens) > 0 && !first[n] {
				first[n] = true
				run.ttft[n] = free[e] - run.arrival[n]
			}
		}
	}
	for k := 0; k < 1e7; k++ {
		// The next event: an arrival, or the earliest busy engine's step.
		e := -1
		for i, en := range engines {
			if !en.Idle() && (e < 0 || free[i] < free[e]) {
				e = i
			}
		}
		if next < len(order) {
			n := order[next]
			at := time.Duration(float64(trace[n].Arrival) / rate)
			if e < 0 || at <= free[e] {
				tokens = Tokens(trace[n], cfg.TraceBlockSize, tokens)
				w := next % len(engines)
				if policy == "skewed" && next%4 != 0 {
					w = 0 // three of four to the first engine
				}
				run.arrival[n] = at
				if engines[w].Idle() {
					free[w] = at
				}
				if err := engines[w].Add(simengine.Request{ID: strconv.Itoa(n), Prompt: slices.Clone(tokens), MaxTokens: trace[n].OutputLength, Seed: uint64(n + 1)}); err != nil {
					t.Fatal(err)
				}
				run.routed[w] = append(run.routed[w], n)
				next++
				continue
			}
		}
		if e < 0 {
			return run
		}
		step(e)
	}
	t.Fatal("the engines never went idle")
	return run
}

// checkWindows checks, for windows of requests in arrival order, that the
// steps inside [a_i, a_j + slo] took at least the bound's prefill work of
// the window's requests that met slo.
func checkWindows(t *testing.T, b Bounds, run engineRun, workers int, slo time.Duration) {
	t.Helper()
	n := len(run.arrival)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, c int) int { return int(run.arrival[a] - run.arrival[c]) })
	checked := 0
	for i := 0; i < n; i += 3 {
		for j := i; j < n; j += 2 {
			lo, hi := run.arrival[order[i]], run.arrival[order[j]]+slo
			var busy time.Duration
			for _, s := range run.steps {
				if s.start >= lo && s.end <= hi {
					busy += s.end - s.start
				}
			}
			need := 0.0
			for _, r := range order[i : j+1] {
				if run.ttft[r] <= slo {
					need += b.requests[r].work
				}
			}
			if got := float64(busy) / float64(time.Millisecond); got < need*(1-1e-9) {
				t.Fatalf("requests %d..%d (arrival order): steps inside [%v, %v] took %.3f ms, below the %.3f ms their on-time requests' own tokens need", i, j, lo, hi, got, need)
			}
			if busy > time.Duration(workers)*(hi-lo) {
				t.Fatalf("steps inside [%v, %v] took %v on %d engines", lo, hi, busy, workers)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no window checked")
	}
}

// checkFirstTokensInOrder checks what a free miss costs its engine in the
// horizon bound: on each engine, no request gets its first token before
// one added earlier (the first token ends a request's prefill).
func checkFirstTokensInOrder(t *testing.T, run engineRun) {
	t.Helper()
	for e, reqs := range run.routed {
		for k := 1; k < len(reqs); k++ {
			a, b := reqs[k-1], reqs[k]
			if run.arrival[b]+run.ttft[b] < run.arrival[a]+run.ttft[a] {
				t.Fatalf("engine %d: request %d (added after %d) got its first token at %v, before %d's at %v", e, b, a,
					run.arrival[b]+run.ttft[b], a, run.arrival[a]+run.ttft[a])
			}
		}
	}
}

// TestDecodeDeferral checks on real engines the two rules Horizon's doc
// gives for why decode cannot be placed inside a window, with preemptions
// (small caches) and without: a running request still in prefill is
// always the last one admitted, so a step skips no decoding request
// unless it preempts; and at no time are more than max_num_seqs requests
// of an engine past their first token and unfinished, preempted ones
// included (they are readmitted first, FIFO).
func TestDecodeDeferral(t *testing.T) {
	g := Presets["low-reuse"]
	g.Requests, g.Seed = 150, 5
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []int{1500, 16384} {
		t.Run("kv"+strconv.Itoa(kv), func(t *testing.T) {
			ec := simengine.DefaultConfig()
			ec.NumGPUBlocks, ec.MaxNumSeqs, ec.MaxNumBatchedTokens = kv, 8, 2048
			e, err := simengine.New(ec)
			if err != nil {
				t.Fatal(err)
			}
			var tokens []uint32
			first := map[string]bool{} // past the first token, unfinished
			added, preempting, decodes, most := 0, 0, 0, 0
			for k := 0; added < len(trace) || !e.Idle(); k++ {
				if k > 1e6 {
					t.Fatal("the engine never went idle")
				}
				// A request every few steps: queues build up.
				if added < len(trace) && k%5 == 0 {
					tokens = Tokens(trace[added], 512, tokens)
					// One too large for the small cache is left out.
					if err := e.Add(simengine.Request{ID: strconv.Itoa(added), Prompt: slices.Clone(tokens), MaxTokens: trace[added].OutputLength}); err != nil && !errors.Is(err, simengine.ErrRequestTooLarge) {
						t.Fatal(err)
					}
					added++
				}
				m := e.Metrics()
				var decoding []string
				for i, r := range m.Requests[:m.Running] {
					switch {
					case r.PrefillTokens == 0:
						decoding = append(decoding, r.ID)
					case i != m.Running-1:
						t.Fatalf("step %d: running request %s (%d of %d) is in prefill", k, r.ID, i+1, m.Running)
					}
				}
				res := e.Step()
				out := map[string]simengine.FinishReason{}
				for _, o := range res.Outputs {
					out[o.RequestID] = o.Finish
					first[o.RequestID] = true
					if o.Finish != simengine.FinishNone {
						delete(first, o.RequestID)
					}
				}
				most = max(most, len(first))
				if len(first) > ec.MaxNumSeqs {
					t.Fatalf("step %d: %d requests past their first token and unfinished, max_num_seqs %d", k, len(first), ec.MaxNumSeqs)
				}
				if res.Preempted > 0 {
					preempting++
					continue
				}
				for _, id := range decoding {
					if _, ok := out[id]; !ok {
						t.Fatalf("step %d (no preemption): decoding request %s made no token", k, id)
					}
					decodes++
				}
			}
			if kv == 1500 && preempting == 0 {
				t.Fatal("the small cache never preempted: the case is not exercised")
			}
			if kv == 16384 && most < ec.MaxNumSeqs {
				t.Fatalf("at most %d requests decoding at once: max_num_seqs %d never binds", most, ec.MaxNumSeqs)
			}
			t.Logf("%d decode tokens checked, %d steps preempted, %d decoding at once at most", decodes, preempting, most)
		})
	}
}
