package core

import "testing"

// TestEveryModeIsAComposition checks that every mode the flags offer, and
// every --disaggregation setting, has its entry in modes.go, complete.
func TestEveryModeIsAComposition(t *testing.T) {
	for _, m := range Modes {
		t.Run(string(m), func(t *testing.T) {
			comp, ok := modes[m]
			if !ok {
				t.Fatalf("mode %q is not listed in modes", m)
			}
			if comp.cost == nil || comp.choose == nil {
				t.Fatalf("mode %q: cost %v, choose %v: both are needed", m, comp.cost, comp.choose)
			}
		})
	}
	for _, d := range Disaggregations {
		if _, ok := pairings[d]; !ok {
			t.Errorf("--disaggregation %q is not listed in pairings", d)
		}
	}
	if pairingOf("") != pairings[DisaggAuto] {
		t.Error("the zero Disaggregation does not read as auto")
	}
	if len(modes) != len(Modes) || len(pairings) != len(Disaggregations) {
		t.Errorf("%d modes and %d pairings listed, %d and %d offered", len(modes), len(pairings), len(Modes), len(Disaggregations))
	}
}
