package replay

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestGenerateRoundTrips checks that each preset's trace parses back as
// written, is deterministic, keeps arrivals in order and shares blocks only
// as prefixes.
func TestGenerateRoundTrips(t *testing.T) {
	for _, name := range presetNames() {
		t.Run(name, func(t *testing.T) {
			g := Presets[name]
			g.Requests = 500
			a, err := Generate(g)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Generate(g)
			if len(a) != g.Requests || !slices.EqualFunc(a, b, func(x, y Request) bool {
				return x.Arrival == y.Arrival && x.InputLength == y.InputLength && slices.Equal(x.HashIDs, y.HashIDs)
			}) {
				t.Fatalf("got %d requests, want %d, equal for equal seeds", len(a), g.Requests)
			}
			var buf bytes.Buffer
			if err := WriteTrace(&buf, a); err != nil {
				t.Fatal(err)
			}
			back, err := ParseTrace(&buf, g.BlockSize)
			if err != nil {
				t.Fatal(err)
			}
			// Where each id first appeared: its position there.
			pos := map[uint64]int{}
			for i, r := range back {
				if r.InputLength != a[i].InputLength || r.OutputLength != a[i].OutputLength || !slices.Equal(r.HashIDs, a[i].HashIDs) || r.Session != a[i].Session || r.Session == 0 {
					t.Fatalf("request %d changed in the round trip", i)
				}
				if i > 0 && r.Arrival < back[i-1].Arrival {
					t.Fatalf("request %d arrives before request %d", i, i-1)
				}
				if r.InputLength > g.MaxInput {
					t.Fatalf("request %d has %d tokens, over the cap %d", i, r.InputLength, g.MaxInput)
				}
				for j, id := range r.HashIDs {
					if p, ok := pos[id]; ok && p != j {
						t.Fatalf("request %d has id %d at block %d, first seen at block %d", i, id, j, p)
					} else if !ok {
						pos[id] = j
					}
				}
			}
		})
	}
}

// TestGeneratePresetsDiffer checks the knobs do what they say: the
// sessions preset reuses far more than low-reuse, which answers longer.
func TestGeneratePresetsDiffer(t *testing.T) {
	stats := map[string][2]float64{}
	for _, name := range []string{"low-reuse", "sessions"} {
		g := Presets[name]
		g.Requests = 1500
		reqs, err := Generate(g)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint64]bool{}
		hit, total, out := 0, 0, 0
		for _, r := range reqs {
			for _, id := range r.HashIDs {
				if seen[id] {
					hit++
				}
				seen[id] = true
			}
			total += len(r.HashIDs)
			out += r.OutputLength
		}
		stats[name] = [2]float64{float64(hit) / float64(total), float64(out) / float64(len(reqs))}
	}
	if lo, se := stats["low-reuse"], stats["sessions"]; lo[0] >= se[0] || lo[1] <= se[1] {
		t.Fatalf("low-reuse (reuse %.2f, mean answer %.0f) vs sessions (reuse %.2f, answer %.0f): want less reuse and longer answers",
			lo[0], lo[1], se[0], se[1])
	}
}

func TestGenCommandFlags(t *testing.T) {
	var out bytes.Buffer
	if err := GenCommand([]string{"--preset", "sessions", "--requests", "7", "--turns", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 7 {
		t.Fatalf("wrote %d lines, want 7", n)
	}
	for _, args := range [][]string{{"--preset", "nope"}, {"--rate", "0"}, {"--user-min", "0"}, {"--turns", "0.5"}} {
		if err := GenCommand(args, &out); err == nil {
			t.Errorf("GenCommand(%q) accepted bad knobs", args)
		}
	}
}
