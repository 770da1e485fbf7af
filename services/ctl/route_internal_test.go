package ctl

import (
	"bytes"
	"strings"
	"testing"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// TestPrintExplanationLegs prints an aggregated and a disaggregated
// explanation: the first as one table, the second as a table per leg with
// each leg's pick marked.
func TestPrintExplanationLegs(t *testing.T) {
	cand := func(id uint64, cost float64) *routerv1.ExplainedCandidate {
		return &routerv1.ExplainedCandidate{Candidate: &routerv1.Candidate{InstanceId: id, Cost: cost, OverlapBlocks: 2},
			Transport: &commonv1.Transport{Tcp: "10.0.0.1:1"}}
	}
	rank := func(c *routerv1.ExplainedCandidate, r uint32) *routerv1.ExplainedCandidate {
		c.Candidate.DpRank = r
		return c
	}
	for _, tc := range []struct {
		name      string
		ex        *routerv1.ExplainRouteResponse
		want, not []string
		picks     int
	}{
		{
			name: "aggregated",
			ex:   &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xa, Reason: "kv: lowest cost", Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 1), cand(0xb, 2)}},
			want: []string{"CACHED BLOCKS", "10.0.0.1:1  2/4", "pick a: kv: lowest cost"},
			not:  []string{"disaggregation", "prefill workers"}, picks: 1,
		},
		{
			name: "data-parallel ranks",
			ex: &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xa, DpRank: 1, Reason: "kv: lowest cost",
				Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 2), rank(cand(0xa, 1), 1), cand(0xb, 3)}},
			want: []string{"  a    ", "  a/1  ", "pick a/1: kv: lowest cost"}, picks: 1,
		},
		{
			name: "remote prefill",
			ex: &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xa, PrefillInstanceId: 0xc, Disaggregation: "remote_prefill",
				Reason: "remote prefill", Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 1), cand(0xb, 2)},
				PrefillCandidates: []*routerv1.ExplainedCandidate{cand(0xc, 3), cand(0xd, 4)}},
			want:  []string{"disaggregation: remote_prefill", "decode and aggregated workers:", "prefill workers:", "pick prefill c, decode a: remote prefill"},
			picks: 2,
		},
		{
			name: "local prefill",
			ex: &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xb, Disaggregation: "local_prefill",
				Reason: "local prefill", Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 1), cand(0xb, 2)},
				PrefillCandidates: []*routerv1.ExplainedCandidate{cand(0xc, 3)}},
			want: []string{"disaggregation: local_prefill", "prefill workers:", "pick b: local prefill"},
			not:  []string{"pick prefill"}, picks: 1,
		},
		{
			name: "session hit",
			ex: &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xb, Reason: "session s bound to b",
				Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 1), cand(0xb, 2)},
				Session:    &routerv1.SessionBinding{SessionId: "s", InstanceId: 0xb, PreviousInstanceId: 0xb, Affinity: "soft", Outcome: "hit"}},
			want: []string{"session s: bound to b (soft affinity, never used); this request stays there", "pick b:"}, picks: 1,
		},
		{
			name: "session moves",
			ex: &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xa, Reason: "moves",
				Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 1), cand(0xb, 2)},
				Session:    &routerv1.SessionBinding{SessionId: "s", InstanceId: 0xa, PreviousInstanceId: 0xb, Affinity: "soft", Outcome: "moved_load"}},
			want: []string{"session s: bound to b (soft affinity, never used); this request would move it to a (moved_load)"}, picks: 1,
		},
		{
			name: "new session",
			ex: &routerv1.ExplainRouteResponse{Mode: "kv", RequestBlocks: 4, InstanceId: 0xa, Reason: "new",
				Candidates: []*routerv1.ExplainedCandidate{cand(0xa, 1), cand(0xb, 2)},
				Session:    &routerv1.SessionBinding{SessionId: "s", InstanceId: 0xa, Affinity: "hard", Outcome: "new"}},
			want: []string{"session s: no live binding; this request would bind it to a (hard affinity)"}, picks: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printExplanation(&b, "m", 16, tc.ex)
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if got := strings.Count(out, "<-"); got != tc.picks {
				t.Errorf("%d picks marked:\n%s", got, out)
			}
		})
	}
}
