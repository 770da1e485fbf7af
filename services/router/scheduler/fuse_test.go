package scheduler

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestComposeMatchesTerms: a composed policy, whose Prefill, Decode and
// QueueWait run in one pass, costs every candidate to the bit as its terms
// run one pass each do, and chooses the same, for random candidates,
// requests (with and without a rate and sharers) and weights.
func TestComposeMatchesTerms(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	models := []timingmodel.Model{timingmodel.Default(), linear, {PrefillPerToken: 0.5, PrefillPerBatch: 3, DecodeBase: 7, MaxBatchedTokens: 64}}
	compositions := map[string][]Term{
		"kv":         {Prefill{}, Decode{}, QueueWait{}, Seed{}},
		"disagg":     {Prefill{}, Decode{}, KVTransfer{LatencyMs: 1, MsPerBlock: 0.3}, QueueWait{}, Seed{}},
		"no wait":    {Prefill{}, Decode{}},
		"after seed": {Seed{}, Prefill{}, Decode{}, QueueWait{}},
	}
	for name, terms := range compositions {
		composed := Compose(Lowest{}, terms...)
		literal := Policy{Terms: terms, Picker: Lowest{}}
		for round := range 2000 {
			n := 1 + rng.IntN(12)
			a := make([]Candidate, n)
			for i := range a {
				a[i] = Candidate{Worker: w(uint64(i + 1)), Overlap: rng.IntN(40), QueuedTokens: rng.IntN(3000) - 100,
					Decoding: rng.IntN(80), Usage: rng.Float64(), Timing: models[rng.IntN(len(models))]}
				if rng.IntN(2) == 0 {
					a[i].steps, a[i].prepared = a[i].Timing.Steps(a[i].Decoding, a[i].Usage), true
				}
			}
			b := append([]Candidate(nil), a...)
			r := Request{Blocks: 32, Tokens: 32*16 + rng.IntN(16), BlockSize: 16}
			if round%3 != 0 {
				r.Rate = rng.Float64() / 50
			}
			if round%4 == 1 {
				r.Shared = Shared{Blocks: rng.IntN(32), Rate: rng.Float64() / 100, HomeBusy: rng.Float64() * 0.9, SeedBusy: rng.Float64() * 0.9}
			}
			p := Params{OverlapWeight: rng.Float64() * 2, Temperature: float64(rng.IntN(2)) * rng.Float64()}
			seed := rng.Uint64()
			ia, _ := composed.Select(a, r, p, rand.New(rand.NewPCG(seed, 1)))
			ib, _ := literal.Select(b, r, p, rand.New(rand.NewPCG(seed, 1)))
			for i := range a {
				if math.Float64bits(a[i].Cost) != math.Float64bits(b[i].Cost) {
					t.Fatalf("%s, round %d: candidate %d costs %v composed, %v term by term", name, round, i, a[i].Cost, b[i].Cost)
				}
			}
			if ia != ib {
				t.Fatalf("%s, round %d: composed chose %d, term by term %d", name, round, ia, ib)
			}
		}
	}
}
