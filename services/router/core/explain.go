package core

import (
	"fmt"
	"strings"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Explain decides for a request as Route would and says why, recording
// nothing: no load, no predicted blocks, no round-robin turn. In random mode,
// and at a temperature above 0, the pick is one draw of what Route would do.
func (c *Core) Explain(r *routerv1.ExplainRouteRequest) (*routerv1.ExplainRouteResponse, error) {
	if c.mode == ModeDirect && r.GetInstanceId() == 0 {
		return nil, fmt.Errorf("%w: direct mode needs instance_id", ErrInvalid)
	}
	d, err := c.evaluate(query{target: r.Target, tokens: r.TokenIds, hashes: r.BlockHashes, weight: r.OverlapWeight,
		temperature: r.Temperature, exclude: r.ExcludeInstanceIds, direct: r.InstanceId, dryRun: true})
	if err != nil {
		return nil, err
	}
	defer d.release()
	out := &routerv1.ExplainRouteResponse{
		Mode:          c.ModeName(),
		BlockSize:     uint32(d.blockSize),
		RequestBlocks: uint32(len(d.hashes)),
		InstanceId:    d.cands[d.chosen].in.InstanceId,
		Reason:        c.reason(d),
		OverlapWeight: d.params.OverlapWeight,
		Temperature:   d.params.Temperature,
	}
	scored := candidatesOf(d.scored)
	for i, cd := range d.cands {
		out.Candidates = append(out.Candidates, &routerv1.ExplainedCandidate{
			Candidate: scored[i],
			Transport: cd.in.Transport,
			Endpoint:  &routerv1.Endpoint{Namespace: cd.in.Namespace, Component: cd.in.Component, Endpoint: cd.in.Endpoint},
		})
	}
	return out, nil
}

// reason says in words why d chose its worker.
func (c *Core) reason(d *decision) string {
	ch := d.scored[d.chosen]
	n := len(d.scored)
	cached := fmt.Sprintf("it caches %d of the request's %d blocks", ch.Overlap, len(d.hashes))
	switch c.mode {
	case ModeRoundRobin:
		return fmt.Sprintf("round-robin: the endpoint's next turn among %d workers (costs shown for comparison only)", n)
	case ModeRandom:
		return fmt.Sprintf("random: a uniform draw among %d workers (costs shown for comparison only)", n)
	case ModeDirect:
		return fmt.Sprintf("direct: the request named instance %x; %s", ch.Worker.Instance, cached)
	case ModeLeastLoaded:
		return fmt.Sprintf("least-loaded: fewest queued blocks (%d prefill + %d decode) among %d workers; %s",
			ch.PrefillBlocks, ch.DecodeBlocks, n, cached)
	}
	prefix := "kv"
	if c.approximate {
		prefix = "kv (approximate: caches predicted from past decisions)"
	}
	if d.params.Temperature > 0 {
		best := ch.Cost
		for _, s := range d.scored {
			best = min(best, s.Cost)
		}
		return fmt.Sprintf("%s: sampled by softmax over costs at temperature %g; cost %.4g against the lowest %.4g; %s",
			prefix, d.params.Temperature, ch.Cost, best, cached)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: lowest cost %.4g; %s, with %d prefill and %d decode blocks queued", prefix, ch.Cost, cached, ch.PrefillBlocks, ch.DecodeBlocks)
	ties, next := tiesAndRunnerUp(d.scored, d.chosen)
	switch {
	case ties > 0:
		fmt.Fprintf(&b, "; tied with %d other worker(s), broken at random", ties)
	case next >= 0:
		fmt.Fprintf(&b, "; next best %x at cost %.4g", d.scored[next].Worker.Instance, d.scored[next].Cost)
	}
	return b.String()
}

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
