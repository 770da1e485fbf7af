package frontendbench_test

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/bench/frontendbench"
)

// TestRunSeed: with a seed, each run of a scenario draws its arrivals and
// prompts from a seed of its own, so that runs pooled together are
// separate samples; without one, every run sends the same evenly spaced
// flows. A Poisson flow's first request comes a gap after the start, not
// at 0 with every other flow's.
func TestRunSeed(t *testing.T) {
	const rate, d = 2.0, 20 * time.Second
	tests := []struct {
		name  string
		seed  uint64
		seeds []uint64 // RunSeed of runs 0, 1, 2
		// alike: every run's arrivals and prompts are run 0's.
		alike bool
	}{
		{"evenly spaced", 0, []uint64{0, 0, 0}, true},
		{"Poisson", 52061, []uint64{52061, 52062, 52063}, false},
		{"Poisson, seed 1", 1, []uint64{1, 2, 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first []time.Duration
			var firstPrompt string
			for run, want := range tt.seeds {
				seed := frontendbench.RunSeed(tt.seed, run)
				if seed != want {
					t.Fatalf("RunSeed(%d, %d) = %d, want %d", tt.seed, run, seed, want)
				}
				at := frontendbench.Arrivals(seed, 1, rate, d)
				if again := frontendbench.Arrivals(seed, 1, rate, d); !slices.Equal(at, again) {
					t.Fatalf("run %d: arrivals not reproducible", run)
				}
				if len(at) == 0 || (at[0] == 0) != (seed == 0) || !slices.IsSorted(at) || at[len(at)-1] >= d {
					t.Fatalf("run %d: arrivals %v not sorted within [0, %v), or the first at 0 with a seed (or not at 0 without)", run, at, d)
				}
				prompt := frontendbench.OverloadPrompt(seed, 3, "B")
				if run == 0 {
					first, firstPrompt = at, prompt
					continue
				}
				if same := slices.Equal(at, first); same != tt.alike {
					t.Errorf("run %d arrivals equal to run 0's: %v, want %v", run, same, tt.alike)
				}
				if same := prompt == firstPrompt; same != tt.alike {
					t.Errorf("run %d prompt of request 3 equal to run 0's: %v, want %v", run, same, tt.alike)
				}
			}
			if tt.seed == 0 {
				for i, a := range first {
					if want := time.Duration(float64(i) * float64(time.Second) / rate); a != want {
						t.Fatalf("evenly spaced arrival %d at %v, want %v", i, a, want)
					}
				}
			}
		})
	}
}
