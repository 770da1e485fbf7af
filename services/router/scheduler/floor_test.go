package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// floorWorld is a load record over n workers on a virtual clock, with
// timing models, changed at random.
type floorWorld struct {
	at      time.Time
	load    *Load
	workers []index.WorkerID
	models  []*timingmodel.Model
	rng     *rand.Rand
	next    int
	live    []string
}

func newFloorWorld(seed uint64, n int, models bool) *floorWorld {
	fw := &floorWorld{at: time.Unix(1_700_000_000, 0), rng: rand.New(rand.NewPCG(seed, 7))}
	fw.load = NewLoadClock(func() time.Time { return fw.at })
	for i := range n {
		fw.workers = append(fw.workers, w(uint64(i+1)))
		m := timingmodel.Default()
		if models && i%3 == 0 {
			m = m.Scaled(0.5 + fw.rng.Float64()*2)
		}
		fw.models = append(fw.models, &m)
	}
	return fw
}

// step makes one random change: a request routed, prefilled or freed, a
// report, or time passing (past a report's freshness now and then).
func (fw *floorWorld) step() {
	r := fw.rng
	wk := fw.workers[r.IntN(len(fw.workers))]
	switch r.IntN(6) {
	case 0, 1:
		id := fmt.Sprint("r", fw.next)
		fw.next++
		blocks := make([]uint64, 1+r.IntN(20))
		for i := range blocks {
			blocks[i] = r.Uint64N(200)
		}
		fw.load.Add(id, wk, r.IntN(len(blocks)+1), blocks)
		fw.live = append(fw.live, id)
	case 2:
		if len(fw.live) > 0 {
			fw.load.PrefillDone(fw.live[r.IntN(len(fw.live))])
		}
	case 3:
		if len(fw.live) > 0 {
			k := r.IntN(len(fw.live))
			fw.load.Free(fw.live[k])
			fw.live = slices.Delete(fw.live, k, k+1)
		}
	case 4:
		var reqs []ReportedRequest
		for j := range r.IntN(6) {
			reqs = append(reqs, ReportedRequest{ID: fmt.Sprint("o", wk.Instance, "-", j), PrefillTokens: r.IntN(2) * r.IntN(4000), DecodeBlocks: r.IntN(300)})
		}
		if r.IntN(4) == 0 {
			reqs = nil
		}
		fw.load.Report(wk, reqs, r.IntN(3000), 2000, 16)
	case 5:
		d := time.Duration(r.IntN(300)) * time.Millisecond
		if r.IntN(10) == 0 {
			d = ReportTTL - floorSlack/2 + time.Duration(r.IntN(3000))*time.Millisecond
		}
		fw.at = fw.at.Add(d)
	}
}

// TestFloorBoundsHold checks, over random load records and requests, that
// every worker's cost under KV is at least CostBound's at its floor's
// bounds, and that Below finds exactly the workers a scan finds.
func TestFloorBoundsHold(t *testing.T) {
	tests := []struct {
		name   string
		models bool
		rate   float64
		shared Shared
		weight float64
	}{
		{name: "one model, no rate", weight: 1},
		{name: "published models, a rate", models: true, rate: 0.01, weight: 1},
		{name: "a hot prefix's credit", rate: 0.02, shared: Shared{Blocks: 4, Rate: 0.05, HomeBusy: 0.6, SeedBusy: 0.3}, weight: 1},
		{name: "weight below 1", models: true, rate: 0.005, weight: 0.4},
		{name: "weight above 1", rate: 0.005, weight: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw := newFloorWorld(11, 40, tt.models)
			f := NewFloor(fw.workers, fw.models, 16)
			checked := 0
			for round := range 300 {
				for range 1 + fw.rng.IntN(6) {
					fw.step()
				}
				fw.load.Sync(f, 1)
				if !f.Valid() {
					t.Fatal("floor of models with coefficients at least zero is not valid")
				}
				cands := make([]Candidate, len(fw.workers))
				for i := range cands {
					cands[i] = Candidate{Worker: fw.workers[i], Timing: *fw.models[i]}
					if fw.rng.IntN(4) == 0 {
						cands[i].Overlap = fw.rng.IntN(8)
					}
					if fw.rng.IntN(5) == 0 {
						cands[i].AdapterMs = 50
					}
				}
				// A home, so that the credit has a backlog.
				cands[0].Overlap = max(cands[0].Overlap, tt.shared.Blocks)
				tokens := 16 * (1 + fw.rng.IntN(120))
				rq := Request{Blocks: tokens / 16, Tokens: tokens, BlockSize: 16, Rate: tt.rate, Shared: tt.shared}
				p := Params{OverlapWeight: tt.weight}
				fw.load.FillAll(cands, 16)
				KV.Price(cands, rq, p)
				credit := MaxSeedCredit(cands, rq)
				for i := range cands {
					pa, pd, base, ok := CostBound(rq, p, f.PerToken(), credit, cands[i].Overlap)
					if !ok {
						t.Fatal("no bound at a weight above 0")
					}
					ahead, dec := f.Bounds(i)
					if b := pa*ahead + pd*dec + base; b > cands[i].Cost+1e-9*math.Abs(cands[i].Cost) {
						t.Fatalf("round %d: worker %d (%+v) costs %v, under its bound %v", round, i, cands[i], cands[i].Cost, b)
					}
					checked++
				}
				// Below against a scan, at a limit among the costs.
				pa, pd, base, _ := CostBound(rq, p, f.PerToken(), credit, 0)
				limit := cands[fw.rng.IntN(len(cands))].Cost - base
				var scan []int
				for i := range cands {
					if ahead, dec := f.Bounds(i); pa*ahead+pd*dec <= limit {
						scan = append(scan, i)
					}
				}
				if got := f.Below(nil, pa, pd, limit); !slices.Equal(got, scan) {
					t.Fatalf("round %d: Below found %v, a scan %v", round, got, scan)
				}
			}
			if checked == 0 {
				t.Fatal("nothing checked")
			}
		})
	}
}

// TestFloorSyncEqualsRebuild checks that a floor kept up to date change
// by change has the bounds of one built at once from the same record,
// including across a change log that overflowed (the floor then rebuilds)
// and a change of the models' version.
func TestFloorSyncEqualsRebuild(t *testing.T) {
	tests := []struct {
		name          string
		rounds, steps int
		// bump changes a model, and the models' version, from halfway.
		bump bool
	}{
		{name: "a few changes between syncs", rounds: 20, steps: 5},
		{name: "more changes than the log keeps", rounds: 2, steps: maxChanges + 100},
		{name: "the models change", rounds: 20, steps: 50, bump: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw := newFloorWorld(3, 30, true)
			kept := NewFloor(fw.workers, fw.models, 16)
			ver := uint64(1)
			for round := range tt.rounds {
				for range tt.steps {
					fw.step()
				}
				if tt.bump && round >= tt.rounds/2 {
					ver++
					*fw.models[1] = fw.models[1].Scaled(1.5)
				}
				fw.load.Sync(kept, ver)
				fresh := NewFloor(fw.workers, fw.models, 16)
				fw.load.Sync(fresh, ver)
				for i := range fw.workers {
					ka, kd := kept.Bounds(i)
					fa, fd := fresh.Bounds(i)
					if ka != fa || kd != fd {
						t.Fatalf("round %d: worker %d kept (%v, %v), built (%v, %v)", round, i, ka, kd, fa, fd)
					}
				}
				if kept.Min() != fresh.Min() || kept.PerToken() != fresh.PerToken() {
					t.Fatalf("round %d: kept min %d per token %v, built %d %v", round, kept.Min(), kept.PerToken(), fresh.Min(), fresh.PerToken())
				}
			}
		})
	}
}

// TestFloorRefusesNegativeModels checks that a model with a coefficient
// below zero (a queue that could cost less the longer it is) makes the
// floor invalid, and that a weight of 0 has no bound.
func TestFloorRefusesNegativeModels(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *timingmodel.Model)
	}{
		{name: "quadratic", edit: func(m *timingmodel.Model) { m.PrefillQuadratic = -1e-9 }},
		{name: "per token", edit: func(m *timingmodel.Model) { m.PrefillPerToken = -1 }},
		{name: "per batch", edit: func(m *timingmodel.Model) { m.PrefillPerBatch = -1 }},
		{name: "decode floor", edit: func(m *timingmodel.Model) { m.DecodeMin = -1 }},
		{name: "adapter load", edit: func(m *timingmodel.Model) { m.LoraLoadMs = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw := newFloorWorld(5, 4, false)
			tt.edit(fw.models[2])
			f := NewFloor(fw.workers, fw.models, 16)
			fw.load.Sync(f, 1)
			if f.Valid() {
				t.Fatal("valid with a negative coefficient")
			}
		})
	}
	if _, _, _, ok := CostBound(req, Params{OverlapWeight: 0}, 0.01, 0, 0); ok {
		t.Fatal("a bound at weight 0")
	}
}
