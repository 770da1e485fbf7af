package core

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// TestEveryModeIsAComposition checks that the modes the flags offer are
// modes.go's, in the help texts' order, each complete, and that every
// --disaggregation setting has its entry.
func TestEveryModeIsAComposition(t *testing.T) {
	if want := []Mode{ModeKV, ModeRoundRobin, ModeRandom, ModeLeastLoaded, ModeDirect}; !slices.Equal(Modes, want) {
		t.Fatalf("Modes = %v, want %v", Modes, want)
	}
	for _, l := range modes {
		if l.comp.cost == nil || l.comp.choose == nil {
			t.Errorf("mode %q: cost %v, choose %v: both are needed", l.mode, l.comp.cost, l.comp.choose)
		}
	}
	for _, d := range Disaggregations {
		if _, ok := pairings[d]; !ok {
			t.Errorf("--disaggregation %q is not listed in pairings", d)
		}
	}
	if pairingOf("") != pairings[DisaggAuto] {
		t.Error("the zero Disaggregation does not read as auto")
	}
	if len(pairings) != len(Disaggregations) {
		t.Errorf("%d pairings listed, %d offered", len(pairings), len(Disaggregations))
	}
}

// TestChoosers drives each chooser of modes.go alone over a prepared
// decision of three workers whose costs are set: which it picks, whether
// a dry run (ExplainRoute) leaves the core as it was, and the reason it
// gives.
func TestChoosers(t *testing.T) {
	// Worker 2 is the cheapest; worker 3 caches the most and has the
	// least load.
	decisionOf := func(q query) *decision {
		d := &decision{q: q, hashes: make([]uint64, 8), req: scheduler.Request{Blocks: 8, Tokens: 128, BlockSize: 16}}
		for i, cost := range []float64{30, 10, 20} {
			id := uint64(i + 1)
			d.cands = append(d.cands, candidate{in: &registryv1.Instance{Namespace: "ns", Component: "c", Endpoint: "e", InstanceId: id}})
			d.scored = append(d.scored, scheduler.Candidate{Worker: index.WorkerID{Instance: id}, Cost: cost, Overlap: 2 * i,
				QueuedTokens: 300 - 100*i, PrefillBlocks: 3 - i, Timing: timingmodel.Default()})
		}
		return d
	}
	tests := []struct {
		name    string
		choose  chooser
		q       query
		temp    float64
		rounds  int // decisions made in a row on one core
		want    []uint64
		wantErr error
		reason  string
	}{
		{name: "by cost takes the policy's choice", choose: byCost{}, rounds: 2, want: []uint64{2, 2}, reason: "kv: lowest cost 10"},
		{name: "by cost with spread, no peers", choose: byCost{spread: true}, rounds: 1, want: []uint64{2}, reason: "next best 3 at cost 20"},
		{name: "by cost, sampled", choose: byCost{spread: true}, temp: 1, rounds: 1, want: []uint64{2}, reason: "sampled by softmax"},
		{name: "blind: least queued prefill, caches hidden", choose: blind{policy: &scheduler.LeastLoaded}, rounds: 1, want: []uint64{3}, reason: "least-loaded: fewest queued blocks (1 prefill"},
		{name: "round-robin takes turns", choose: roundRobin{}, rounds: 4, want: []uint64{1, 2, 3, 1}, reason: "round-robin: the endpoint's next turn among 3"},
		{name: "round-robin, a dry run takes no turn", choose: roundRobin{}, q: query{dryRun: true}, rounds: 3, want: []uint64{1, 1, 1}},
		{name: "a picker of scheduler", choose: pick{picker: firstPicker{}, what: "first"}, rounds: 1, want: []uint64{1}, reason: "first among 3 workers"},
		{name: "direct: the named instance", choose: direct{}, q: query{direct: 3}, rounds: 1, want: []uint64{3}, reason: "direct: the request named instance 3; it caches 4 of the request's 8 blocks"},
		{name: "direct: an instance not serving", choose: direct{}, q: query{direct: 9, target: modelTarget()}, rounds: 1, wantErr: ErrNoWorker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{Mode: ModeKV, Seed: 1, OverlapWeight: 1})
			var got []uint64
			for range tt.rounds {
				d := decisionOf(tt.q)
				d.params = scheduler.Params{OverlapWeight: 1, Temperature: tt.temp}
				i, err := tt.choose.choose(c, d, 1)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("err = %v, want %v", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				d.chosen = i
				got = append(got, d.cands[i].in.InstanceId)
				if why := tt.choose.why(c, d); !strings.Contains(why, tt.reason) {
					t.Errorf("reason %q does not say %q", why, tt.reason)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("chose %v, want %v", got, tt.want)
			}
		})
	}
}

// firstPicker picks the first candidate.
type firstPicker struct{}

func (firstPicker) Pick([]scheduler.Candidate, scheduler.Params, *rand.Rand) int { return 0 }
