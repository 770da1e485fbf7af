package core

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// DefaultQueueTTFTThreshold is --queue-ttft-threshold's default: the
// fleet's time to first token objective when nobody sets one, the
// planner's --ttft-slo default (500 ms). The router has no objective of
// its own, so an operator who sets the planner's objective sets this one
// to the same value: a request predicted past the objective on every
// worker is better held in the frontend's queue, where it can be
// reordered, than in an engine's, where it cannot.
//
// Why the objective itself and not less: a request released from the
// frontend's queue has its first token at the prediction it was released
// on (at most the threshold) plus the time it waited for that room. A
// request of a tenant or band the flood crowds waits for none: the
// frontend keeps the last room the router counts (RouteResponse.room)
// from the flood while such a tenant is active, and the request takes it
// on arrival. Without that, the wait for the next room is up to the time
// between two rooms, about a prompt's prefill over the number of workers
// (~0.4 s for 2 workers at 0.8 s a prompt), and the threshold would have
// to be the objective less that wait, which on a small fleet of long
// prompts is less than a prompt's own prefill: nothing would ever fit.
// What remains between the prediction and the first token (transport,
// where in a decode step the request arrives, which the prediction counts
// as half of one) is not a constant of the threshold: the router measures
// it on its own decisions (see lateMsLocked) and adds it to predictions.
const DefaultQueueTTFTThreshold = 500

// MaxRoom caps the room a decision or the watch counts
// (RouteResponse.room): a frontend needs the count near saturation, to
// bound what it lets through before the next decision and to keep the
// last room, and takes MaxRoom for "plenty". It bounds the predictions a
// decision makes for it to MaxRoom plus one per full worker.
const MaxRoom = 16

// limits are the core's saturation limits (see scheduler.Limits).
func (c *Core) limits() scheduler.Limits { return c.saturation }

// limitsOf are the limits for decision d: the core's, with its model's
// first tokens' lateness.
func (c *Core) limitsOf(d *decision) scheduler.Limits {
	l := c.saturation
	l.LateMs = d.lateMs
	return l
}

// targetModel is the model a target names ("" for an endpoint).
func targetModel(t *routerv1.Target) string {
	if m, ok := t.GetKind().(*routerv1.Target_Model); ok {
		return m.Model
	}
	return ""
}

// expectFirstToken tells the load record when a routed request's first
// token is predicted on the worker that computes its prompt (computes, an
// index of d.scored), so that its MarkPrefillComplete says how late it
// came (noteLate), and so that the requests it joins there are expected
// with it (Load.Expect). Only with a TTFT limit; the request's own
// lateness is kept only when it was predicted within the limit (the
// lateness corrects predictions at the threshold, and a request routed
// far past it, with no frontend queue in front or in a flood, is a queue
// whose error says nothing of one released at the threshold) and with a
// model the worker reported (reported; see Core.reported).
func (c *Core) expectFirstToken(d *decision, id string, computes int, reported bool) {
	l := c.limits()
	model := targetModel(d.q.target)
	if !(l.TTFTMs > 0) || model == "" {
		return
	}
	cand := &d.scored[computes]
	ms := cand.RequestFirstTokenMs(&d.req)
	c.load.Expect(id, model, d.now.Add(time.Duration(ms*float64(time.Millisecond))), ms <= l.TTFTMs && reported)
}

// leaveEarliest is where d's request goes, best being the mode's choice:
// a backlog's request (RouteRequest.backlog) goes to the candidate it
// fits on within the limits where a request like it is predicted latest
// (scheduler.Limits.LatestFit), so that the slots predicted earliest stay
// for the tenants it crowds; a request let go into room held back for it
// (RouteRequest.within_limit) goes to best if it fits there within the
// limits, else to the cheapest candidate where it does
// (scheduler.Limits.CheapestFit); any other request, one that fits
// nowhere, one of a session (bound to its worker) and a disaggregated
// model's (its legs are priced in pairs) go to best. c.mu is held.
func (c *Core) leaveEarliest(d *decision, best int) int {
	if !d.q.backlog && !d.q.withinLimit || d.q.session != "" || d.pools != nil || d.sparse {
		return best
	}
	if !d.q.backlog {
		chosen := c.limitsOf(d).CheapestFit(d.scored, d.req, best)
		d.keptWithin = chosen != best
		return chosen
	}
	// The room it was let go on is counted in the model's typical
	// requests (SaturationNext).
	chosen := c.limitsOf(d).LatestFit(d.scored, d.req, d.typical, best)
	d.leftEarliest = chosen != best
	return chosen
}

// noteLate records how late (negative: early) a request of model got its
// first token against its prediction, for a live model.
func (c *Core) noteLate(model string, late time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.late[model]
	if l == nil {
		if _, live := c.models[model]; !live {
			return
		}
		l = new(scheduler.Lateness)
		c.late[model] = l
	}
	l.Add(float64(late) / float64(time.Millisecond))
}

// Lateness is how much later than predicted model's first tokens come,
// in ms, as saturation counts it (see lateMsLocked), and how many first
// tokens that is of (0: none yet, no correction).
func (c *Core) Lateness(model string) (ms float64, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.late[model]; l != nil {
		return l.Quantile(scheduler.LateQuantile), l.Len()
	}
	return 0, 0
}

// lateMsLocked is how much later than predicted a model's first tokens
// come, in ms: the scheduler.LateQuantile quantile of its last
// scheduler.LateWindow (0 before any). Saturation adds it to the
// predictions on a worker with prompts queued (scheduler.Limits.LateMs),
// so that a request the frontend releases at the threshold gets its
// first token within the threshold as often as the objective asks,
// whatever the transport and the engines' step alignment cost on this
// fleet: learnt from the fleet's own first tokens, not a constant. c.mu
// must be held.
func (c *Core) lateMsLocked(model string) float64 {
	if l := c.late[model]; l != nil {
		return l.Quantile(scheduler.LateQuantile)
	}
	return 0
}

// saturated says whether, once d's request is on the worker that
// computes its prompt (chosen, -1 for none), one more typical request of
// its model (d.typical, cached nowhere: what SaturationNext counts; the
// first decisions of a model, before it has one, count one like d's)
// saturates its fleet: every candidate is full under the core's limits
// (for a disaggregated model every pool's: a decode worker computes a
// prompt that stays local). It sets d.room to how many more typical
// requests fit (0 with the limits off: not counted): the decision's word
// and the watch's are in one unit, so that a frontend hearing both, in
// whichever order, lets as many go on either. c.mu need not be held, but
// must be for a decision that priced only some candidates (see
// roomSparse).
func (c *Core) saturated(d *decision, req scheduler.Request, chosen int) bool {
	d.room = 0
	l := c.limitsOf(d)
	if l.Off() || len(d.scored) == 0 {
		return false
	}
	typical := typicalRequest(d.typical, d.blockSize)
	if d.sparse {
		d.room = c.roomSparse(d, req, typical, chosen, l)
	} else {
		d.room = l.RoomOfEach(len(d.scored), func(i int) (*scheduler.Candidate, bool) { return &d.scored[i], i == chosen }, req, typical, MaxRoom)
	}
	return d.room == 0
}

// typicalRequest is a model's typical request of tokens prompt tokens
// (typicalTokensLocked), cached nowhere, in blocks of bs tokens; zero
// for none.
func typicalRequest(tokens, bs int) scheduler.Request {
	if tokens <= 0 || bs <= 0 {
		return scheduler.Request{}
	}
	return scheduler.Request{Blocks: tokens / bs, Tokens: tokens, BlockSize: bs}
}

// typicalTokensLocked is the prompt tokens of model's typical request
// (noteTypicalLocked), at least a block of bs; 0 before the model's first
// decision. c.mu must be held.
func (c *Core) typicalTokensLocked(model string, bs int) int {
	t, ok := c.typical[model]
	if !ok {
		return 0
	}
	return max(int(math.Round(t)), bs)
}

// Saturation says whether a model's fleet is saturated for a typical
// request of the model (the prompt tokens its recent decisions had to
// compute, on average, a partial last block with them; one block before
// the first), cached nowhere, from
// the load record as it is: what WatchSaturation streams. A smaller
// nominal request (one block) would say there is room while every real
// request is refused it, and a frontend would let one more in at every
// such change. It records nothing. A model without a live worker is not
// saturated (the frontend answers its requests with no_instance, not a
// queue).
func (c *Core) Saturation(model string) bool {
	sat, _ := c.SaturationRoom(model)
	return sat
}

// SaturationRoom is Saturation and how many more typical requests the
// model's fleet has room for, up to MaxRoom (0 when saturated, and when
// the limits are off: not counted).
func (c *Core) SaturationRoom(model string) (saturated bool, room int) {
	w := c.SaturationNext(model)
	return w.Saturated, w.Room
}

// SaturationWord is what SaturationNext says of a model's fleet.
type SaturationWord struct {
	// Saturated and Room are SaturationRoom's.
	Saturated bool
	Room      int
	// Capacity is how many typical requests the fleet would have room
	// for with no prompt queued on any worker, up to MaxRoom
	// (scheduler.Limits.Capacity): the most Room can be at the decode
	// load the workers have now. 0 when the limits are off: not
	// counted.
	Capacity int
	// Next is how long until the passing of time alone makes room for
	// one more typical request than Room (0: it does not).
	Next time.Duration
}

// SaturationNext is SaturationRoom, the fleet's capacity, and how long
// until the passing of time alone makes room for one more typical request
// than it counts (0: it does not; the next change of the load record,
// which Changed signals, may). Room grows with time on a worker computing the head of
// its prefill queue: a request behind the head is predicted earlier as
// the head computes on, and fits once the head is far enough along
// (scheduler.Limits.RoomNext), though nothing in the load record changed.
// A watcher of saturation recomputes at the next change or after next,
// whichever comes first: the room a head's progress makes is then heard
// of when it is made, not at the next event, which on a fleet with few
// requests in flight can be most of a prefill later.
func (c *Core) SaturationNext(model string) SaturationWord {
	if c.limits().Off() {
		return SaturationWord{}
	}
	cands, workers, bs, pl, err := c.candidates(&routerv1.Target{Kind: &routerv1.Target_Model{Model: model}}, "", nil)
	if err != nil {
		return SaturationWord{}
	}
	scored := make([]scheduler.Candidate, len(cands))
	c.mu.Lock()
	for i, w := range workers {
		scored[i] = scheduler.Candidate{Worker: w, Timing: *cands[i].timing}
	}
	ver := c.timingVer
	tokens := max(int(math.Round(c.typical[model])), bs)
	late := c.lateMsLocked(model)
	c.mu.Unlock()
	if len(scored) == 0 {
		return SaturationWord{}
	}
	req := scheduler.Request{Blocks: tokens / bs, Tokens: tokens, BlockSize: bs}
	if pl == nil {
		c.load.FillAllVersion(scored, bs, ver)
	} else {
		c.load.FillAllVersion(scored[:pl.serve], bs, ver)
		c.legs.load.FillAllVersion(scored[pl.serve:], bs, ver)
	}
	l := c.limits()
	l.LateMs = late
	room, nextMs := l.RoomNext(scored, req, -1, MaxRoom)
	w := SaturationWord{Saturated: room == 0, Room: room, Capacity: l.Capacity(scored, req, MaxRoom)}
	if !math.IsInf(nextMs, 1) {
		w.Next = max(timingmodel.Duration(nextMs), time.Nanosecond)
	}
	return w
}

// typicalWeight is the weight of each decision in a model's typical
// request: an average over about its last 20 decisions.
const typicalWeight = 0.05

// noteTypicalLocked counts a decision's prompt tokens to compute in its
// model's typical request.
func (c *Core) noteTypicalLocked(model string, tokens int) {
	t, ok := c.typical[model]
	if !ok {
		c.typical[model] = float64(tokens)
		return
	}
	c.typical[model] = t + typicalWeight*(float64(tokens)-t)
}

// Models are the models live model cards name, in name order.
func (c *Core) Models() []string {
	c.mu.Lock()
	out := make([]string, 0, len(c.models))
	for m := range c.models {
		out = append(out, m)
	}
	c.mu.Unlock()
	slices.Sort(out)
	return out
}

// Changed returns a channel closed at the next change of the load record
// or the worker set: a routed, completed or freed request (this core's or
// a replica's), a load report, a registry change. A watcher of saturation
// recomputes then, instead of polling.
func (c *Core) Changed() <-chan struct{} {
	for {
		if p := c.changed.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if c.changed.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// notify closes the channel Changed gave, if anyone asked for one: one
// atomic load on the request path when nobody watches.
func (c *Core) notify() {
	if c.changed.Load() == nil {
		return
	}
	if p := c.changed.Swap(nil); p != nil {
		close(*p)
	}
}

// changeSignal is the channel Changed hands out (see notify).
type changeSignal = atomic.Pointer[chan struct{}]
