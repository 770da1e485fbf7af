package replay

import (
	"testing"
)

// TestSessionModes replays a generated multi-turn trace (the sessions
// preset, its turns named by session id) in kv and the session modes:
// every turn completes; in the session modes every turn is counted once
// by the session rule, later turns go to their bound worker, and none
// moves off a worker that could serve it but by load; kv counts nothing.
func TestSessionModes(t *testing.T) {
	g := Presets["sessions"]
	g.Requests = 120
	if testing.Short() {
		g.Requests = 60
	}
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[uint64]bool{}
	for _, r := range trace {
		sessions[r.Session] = true
	}
	cfg := smallConfig()
	modes := []string{"kv", "kv-sessions", "kv-sessions-hard", "kv-3-replicas-sessions"}
	results, err := RunAll(trace, cfg, modes, []float64{cfg.RateScale}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Completed != len(trace) || r.Rejected != 0 {
			t.Errorf("%s: %d completed, %d rejected; want all %d", r.Mode, r.Completed, r.Rejected, len(trace))
		}
		s := r.Sessions
		if r.LaterTurns != len(trace)-len(sessions) {
			t.Errorf("%s: %d later turns, want %d", r.Mode, r.LaterTurns, len(trace)-len(sessions))
		}
		if r.Mode == "kv" {
			if s != (SessionCounts{}) {
				t.Errorf("kv counted sessions: %+v", s)
			}
			t.Logf("kv: hit rate %.3f, TTFT p90 %v, %d of %d later turns away", r.HitRate, r.TTFT[1], r.TurnsAway, r.LaterTurns)
			continue
		}
		if total := s.New + s.Hit + s.MovedLoad + s.MovedUnavailable; total != uint64(len(trace)) || s.New < uint64(len(sessions)) ||
			s.Hit == 0 || s.MovedUnavailable != 0 || (r.Mode == "kv-sessions-hard" && s.MovedLoad != 0) {
			t.Errorf("%s: session outcomes %+v over %d turns of %d sessions", r.Mode, s, len(trace), len(sessions))
		}
		// A later turn leaves its previous worker only when the rule
		// moved it or bound it anew (a binding a replica had not heard).
		if moved := s.MovedLoad + s.MovedUnavailable + s.New - uint64(len(sessions)); uint64(r.TurnsAway) > moved {
			t.Errorf("%s: %d turns away from their previous worker, the session rule moved or rebound %d", r.Mode, r.TurnsAway, moved)
		}
		t.Logf("%s: hit rate %.3f, TTFT p90 %v, sessions %+v, %d of %d later turns away", r.Mode, r.HitRate, r.TTFT[1], s, r.TurnsAway, r.LaterTurns)
	}
}
