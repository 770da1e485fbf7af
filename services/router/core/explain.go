package core

import (
	"cmp"
	"fmt"
	"slices"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Explain decides for a request as Route would and says why, recording
// nothing: no load, no predicted blocks, no round-robin turn. In random mode,
// and at a temperature above 0, the pick is one draw of what Route would do.
func (c *Core) Explain(r *routerv1.ExplainRouteRequest) (*routerv1.ExplainRouteResponse, error) {
	if c.comp.named && r.GetInstanceId() == 0 {
		return nil, fmt.Errorf("%w: direct mode needs instance_id", ErrInvalid)
	}
	if r.GetSessionId() != "" {
		if err := ValidSessionID(r.SessionId); err != nil {
			return nil, err
		}
	}
	d, err := c.evaluate(query{target: r.Target, tokens: r.TokenIds, hashes: r.BlockHashes, weight: r.OverlapWeight,
		temperature: r.Temperature, exclude: r.ExcludeInstanceIds, direct: r.InstanceId, dryRun: true, salt: r.CacheSalt, lora: r.LoraName})
	if err != nil {
		return nil, err
	}
	defer d.release()
	reason := ""
	if d.pools != nil {
		// The worker that decodes is chosen among its pool: the reason
		// compares it with those.
		cands, scored := d.cands, d.scored
		d.cands, d.scored = cands[:d.pools.serve], scored[:d.pools.serve]
		reason = c.reason(d)
		d.cands, d.scored = cands, scored
	} else {
		reason = c.reason(d)
	}
	// The mode's reason is for its own pick, which the session rule may
	// then override.
	var session *routerv1.SessionBinding
	if ch, ok := c.applySession(d, r.GetSessionId(), len(r.TokenIds), false); ok {
		session = c.sessions.describe(r.GetSessionId(), d, ch)
	}
	out := &routerv1.ExplainRouteResponse{
		Mode:          c.ModeName(),
		BlockSize:     uint32(d.blockSize),
		RequestBlocks: uint32(len(d.hashes)),
		InstanceId:    d.cands[d.chosen].in.InstanceId,
		DpRank:        d.scored[d.chosen].Worker.DPRank,
		Reason:        reason,
		OverlapWeight: d.params.OverlapWeight,
		Temperature:   d.params.Temperature,
		Session:       session,
	}
	if session != nil {
		out.Reason = sessionReason(session) + out.Reason
	}
	scored := candidatesOf(d.scored)
	serve := len(d.cands)
	if d.pools != nil {
		serve = d.pools.serve
		out.Disaggregation = d.disagg
		out.Reason = c.pairReason(d, out.Reason)
	}
	if d.prefill >= 0 {
		out.PrefillInstanceId = d.cands[d.prefill].in.InstanceId
		out.PrefillDpRank = d.scored[d.prefill].Worker.DPRank
	}
	for i, cd := range d.cands {
		e := &routerv1.ExplainedCandidate{
			Candidate: scored[i],
			Transport: cd.in.Transport,
			Endpoint:  &routerv1.Endpoint{Namespace: cd.in.Namespace, Component: cd.in.Component, Endpoint: cd.in.Endpoint},
		}
		if i < serve {
			out.Candidates = append(out.Candidates, e)
		} else {
			out.PrefillCandidates = append(out.PrefillCandidates, e)
		}
	}
	// Each pool is in instance id (then rank) order; the decode and
	// aggregated workers together are too.
	slices.SortFunc(out.Candidates, func(a, b *routerv1.ExplainedCandidate) int {
		return cmp.Or(cmp.Compare(a.Candidate.InstanceId, b.Candidate.InstanceId), cmp.Compare(a.Candidate.DpRank, b.Candidate.DpRank))
	})
	return out, nil
}

// pairReason says why a disaggregated model's decision d ran its prefill
// where it did; whole is the reason of the worker chosen to decode.
func (c *Core) pairReason(d *decision, whole string) string {
	pl, n := d.pools, len(d.cands)
	switch {
	case d.prefill >= 0:
		p, w := &d.scored[d.prefill], &d.scored[d.chosen]
		why := fmt.Sprintf("predicted %.4g against %.4g with the prefill on the decode or aggregated worker", d.remoteCost, d.localCost)
		if c.pairing.always {
			why = "--disaggregation always"
		}
		return fmt.Sprintf("remote prefill (%s): prefill on %s at cost %.4g (it caches %d of %d blocks; %d prefill blocks queued), "+
			"then decode on %s at cost %.4g (its load, the last block, and %d blocks moved to it); among %d prefill and %d decode workers",
			why, workerName(p.Worker), p.Cost, p.Overlap, len(d.hashes), p.PrefillBlocks,
			workerName(w.Worker), w.Cost, len(d.hashes)-min(w.Overlap, len(d.hashes)), n-pl.serve, pl.serve-pl.agg)
	case d.priced >= 0:
		return fmt.Sprintf("local prefill: predicted %.4g on %s against %.4g for the best pair (prefill on %s, decode on %s); %s",
			d.localCost, workerName(d.scored[d.chosen].Worker), d.remoteCost, workerName(d.scored[d.pairPrefill].Worker),
			workerName(d.scored[d.priced].Worker), whole)
	case !c.pairing.pairs:
		return "local prefill: --disaggregation off; " + whole
	case c.comp.named:
		return "local prefill: direct mode names one worker; " + whole
	case n == pl.serve:
		return "local prefill: no live prefill worker; " + whole
	}
	return "local prefill: no live decode worker to pair with; " + whole
}

// reason says in words why d chose its worker: its mode's chooser's
// reason.
func (c *Core) reason(d *decision) string { return c.comp.choose.why(c, d) }

// tiesAndRunnerUp counts the candidates other than chosen with its cost and
// finds the cheapest of the rest (-1 when there is none).
func tiesAndRunnerUp(s []scheduler.Candidate, chosen int) (ties, next int) {
	next = -1
	for i, c := range s {
		switch {
		case i == chosen:
		case c.Cost == s[chosen].Cost:
			ties++
		case next < 0 || c.Cost < s[next].Cost:
			next = i
		}
	}
	return ties, next
}
