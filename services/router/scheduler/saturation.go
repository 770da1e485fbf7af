package scheduler

import (
	"math"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// Limits say when a worker is full: one more request would get its first
// token later than TTFTMs, or the prompt tokens queued for prefill there
// are more than PrefillTokens. A zero limit is off; both off, no worker is
// ever full.
type Limits struct {
	// TTFTMs is the predicted time to first token, in ms, past which a
	// worker is full (--queue-ttft-threshold).
	TTFTMs float64
	// LateMs is how much later than predicted a first token comes, in ms
	// (a quantile of Lateness; negative: earlier): a worker with prompts
	// queued for prefill is full for a request whose prediction plus
	// LateMs is past TTFTMs. A worker with none (idle, or only decoding)
	// is full only past TTFTMs itself: the request's prompt goes in its
	// next step whatever else comes, and held back in a queue it could
	// only start later; so however late first tokens come, a worker whose
	// prompts are done takes a request that fits, and a fleet that learnt
	// a lateness near the threshold still serves a request per worker as
	// each one's prompts are done, rather than none until one drains.
	LateMs float64
	// PrefillTokens is the outstanding prefill, in prompt tokens, past
	// which a worker is full (--queue-prefill-budget).
	PrefillTokens int
}

// Off says whether both limits are off.
func (l Limits) Off() bool { return !(l.TTFTMs > 0) && l.PrefillTokens <= 0 }

// Full says whether c is full for req under l: req's predicted time to
// first token there (FirstTokenMs, plus l.LateMs when prompts are queued
// there) past
// l.TTFTMs, or c's queued prefill past l.PrefillTokens. c must have been
// filled (Load.FillAll).
func (l Limits) Full(c *Candidate, req Request) bool { return l.full(c, req, 0, 0) }

// full is Full with queued more prompt tokens queued on c, whose
// attention is queuedAttn.
func (l Limits) full(c *Candidate, req Request, queued int, queuedAttn float64) bool {
	return l.fullNew(c, queued, queuedAttn, req.NewTokens(c.Overlap), req.Attention(c.Overlap))
}

// fullNew is full for a request of newTokens prompt tokens to compute,
// their attention newAttn.
func (l Limits) fullNew(c *Candidate, queued int, queuedAttn float64, newTokens int, newAttn float64) bool {
	if l.PrefillTokens > 0 && c.QueuedTokens+queued > l.PrefillTokens {
		return true
	}
	if !(l.TTFTMs > 0) {
		return false
	}
	ms := c.firstTokenMs(queued, queuedAttn, newTokens, newAttn)
	if c.QueuedTokens+queued > 0 {
		ms += l.LateMs
	}
	return ms > l.TTFTMs
}

// FirstTokenMs predicts, in ms, the time to first token its client sees
// of a request of newTokens uncached prompt tokens arriving at c now, with
// queued more prompt tokens queued there before it (routed after c was
// filled), unweighted (the model as the worker published it): the time
// left of the head's computation (HeadMs), then one span of the rest of
// the queue and the request's own tokens, then the request's own overhead
// outside the engine's steps (timingmodel.Model.FirstTokenMs): the TTFT
// limit is an objective on what clients see. An engine does not add a request to a step it
// has begun: whatever else waits goes in the steps after it, with the
// request. Counting the head's tokens left as a span of their own would
// charge them a step's fixed cost (the prefill batch cost, a decode step)
// already paid, and a span of them with the rest would have the request
// share the head's step; either way, a worker near its head's first token
// or one that has just begun it would be predicted wrong by about a
// step's fixed cost, and a fleet held at the threshold would run that far
// from it. With no head in progress while requests decode, the worker is
// in a decode step, which the request waits out: half of one, on average.
// The queued and new tokens are uncached prompts of their own (their
// attention their squares); RequestFirstTokenMs is that of a request with
// its cached prefix on c. c must have been filled (Load.FillAll).
func (c *Candidate) FirstTokenMs(queued, newTokens int) float64 {
	q, n := float64(max(queued, 0)), float64(max(newTokens, 0))
	return c.firstTokenMs(queued, q*q, newTokens, n*n)
}

// RequestFirstTokenMs is FirstTokenMs of req on c, its prompt's attention
// over the prefix c caches of it, with nothing more queued.
func (c *Candidate) RequestFirstTokenMs(req *Request) float64 {
	return c.firstTokenMs(0, 0, req.NewTokens(c.Overlap), req.Attention(c.Overlap))
}

// RequestEngineFirstTokenMs is RequestFirstTokenMs without the request's
// overhead outside the engine's steps: when the engine computes req's
// first token, which is what the engine's own state (a slot's adapter, its
// decoding requests) follows.
func (c *Candidate) RequestEngineFirstTokenMs(req *Request) float64 {
	var buf timingmodel.Steps
	return c.engineFirstTokenMs(c.stepsOf(&buf), 0, 0, req.NewTokens(c.Overlap), req.Attention(c.Overlap))
}

// firstTokenMs is FirstTokenMs with the attention of the queued and new
// tokens given.
func (c *Candidate) firstTokenMs(queued int, queuedAttn float64, newTokens int, newAttn float64) float64 {
	var buf timingmodel.Steps
	s := c.stepsOf(&buf)
	return c.engineFirstTokenMs(s, queued, queuedAttn, newTokens, newAttn) + s.RequestMs()
}

// engineFirstTokenMs is firstTokenMs at c's steps s without the request's
// own overhead: the engine's time to the request's first token.
func (c *Candidate) engineFirstTokenMs(s *timingmodel.Steps, queued int, queuedAttn float64, newTokens int, newAttn float64) float64 {
	waiting := c.QueuedTokens - c.HeadTokens + queued
	all, _ := s.SpanPair(waiting, newTokens)
	all.Attn = c.QueuedAttn - c.HeadAttn + queuedAttn + newAttn
	if all.Tokens <= 0 {
		all.Attn = 0
	}
	ms := c.HeadMs + s.PrefillMs(all, 1)
	if d, ok := s.DecodeMs(all); ok {
		ms += d
	}
	if c.HeadMs == 0 {
		if d, ok := s.DecodeMs(timingmodel.Span{Tokens: 1}); ok {
			ms += d / 2
		}
	}
	return ms
}

// Saturated says whether every candidate is full for one more request like
// req once req itself is on cands[chosen] (its prompt tokens cands[chosen]
// does not cache queued there; chosen -1: req is not routed among them);
// false for no candidates, and when l is off. It stops at the first
// worker with room, which at low load is the first or second: below
// saturation it costs a prediction or two.
func (l Limits) Saturated(cands []Candidate, req Request, chosen int) bool {
	return len(cands) > 0 && !l.Off() && l.Room(cands, req, chosen, 1) == 0
}

// Room counts how many more requests like req fit on cands before every
// one is full, up to most, once req itself is on cands[chosen] (as
// Saturated): on each candidate in turn, each one more queued there,
// while it is not full with them. 0 is saturated; when l is off there is
// no limit and Room is most. Its cost is a prediction per request counted
// and one per full candidate: at most most plus len(cands).
func (l Limits) Room(cands []Candidate, req Request, chosen int, most int) int {
	return l.RoomEach(len(cands), func(i int) (*Candidate, bool) { return &cands[i], i == chosen }, req, most)
}

// RoomEach is Room over n candidates that at gives one by one, in order,
// each with whether it is the chosen one: a caller that has not filled
// every candidate fills each when asked, and Room stops asking at the
// first most requests counted.
func (l Limits) RoomEach(n int, at func(i int) (c *Candidate, chosen bool), req Request, most int) int {
	return l.RoomOfEach(n, at, req, Request{}, most)
}

// RoomOfEach is RoomEach counting requests like typical, a prompt cached
// nowhere, once req is on the chosen candidate (typical zero: like req).
// A route decision counts its room so, in the model's typical requests,
// the unit its saturation watch counts in (Core.SaturationNext): a queue
// that hears both, whichever last, then lets as many go on either.
func (l Limits) RoomOfEach(n int, at func(i int) (c *Candidate, chosen bool), req, typical Request, most int) int {
	if l.Off() {
		return most
	}
	room := 0
	for i := range n {
		c, isChosen := at(i)
		if room, _, _ = l.fillOf(c, req, typical, isChosen, room, most); room >= most {
			break
		}
	}
	return room
}

// fill counts onto room, up to most, the requests like req that fit on c
// before it is full (req itself queued there first when chosen), and
// returns the new count with the prompt tokens and attention then queued
// on c: the work one more request would find there.
func (l Limits) fill(c *Candidate, req Request, chosen bool, room, most int) (int, int, float64) {
	return l.fillOf(c, req, Request{}, chosen, room, most)
}

// fillOf is fill counting requests like typical, cached nowhere (zero:
// like req, with req's overlap on c), req itself queued on c first when
// chosen.
func (l Limits) fillOf(c *Candidate, req, typical Request, chosen bool, room, most int) (int, int, float64) {
	newTokens, newAttn := req.NewTokens(c.Overlap), req.Attention(c.Overlap)
	queued, queuedAttn := 0, 0.0
	if chosen {
		queued, queuedAttn = newTokens, newAttn
	}
	if typical.Tokens > 0 {
		newTokens, newAttn = typical.NewTokens(0), typical.Attention(0)
	}
	for room < most && !l.fullNew(c, queued, queuedAttn, newTokens, newAttn) {
		room++
		queued += max(newTokens, 1)
		queuedAttn += newAttn
	}
	return room, queued, queuedAttn
}

// Capacity is how many requests like req (with their overlap on each
// candidate) cands hold within l, up to most, with no prompt queued on
// any: the room they count once every prompt queued now is computed, the
// decode batches as they are (a step's cost grows with them). It is the
// most room a saturated fleet can count at its present decode load: an
// admission queue keeping rooms free for requests to come keeps fewer
// than it, or nothing would go to the tenant it keeps them from. most
// when l is off.
func (l Limits) Capacity(cands []Candidate, req Request, most int) int {
	if l.Off() {
		return most
	}
	room := 0
	for i := range cands {
		c := cands[i]
		c.QueuedTokens, c.QueuedAttn, c.HeadTokens, c.HeadMs, c.HeadAttn = 0, 0, 0, 0, 0
		if room, _, _ = l.fill(&c, req, false, room, most); room >= most {
			break
		}
	}
	return room
}

// RoomNext is Room, and how long, in ms, until the passing of time alone
// makes room for one more request like req than it counts: the soonest
// that a candidate's head, computing on, takes the first request that
// does not fit there now within the limits (see fitsInMs). +Inf when time
// alone makes none: no candidate is full but for a head in progress, or
// the room counted is most. A head's progress changes nothing in the load
// record, so whoever follows the room (WatchSaturation) learns of the room
// it makes from this, not from a change; the other changes (a first token,
// a request's end, a load report) are the load record's.
func (l Limits) RoomNext(cands []Candidate, req Request, chosen int, most int) (room int, nextMs float64) {
	nextMs = math.Inf(1)
	if l.Off() {
		return most, nextMs
	}
	for i := range cands {
		c := &cands[i]
		var queued int
		var queuedAttn float64
		if room, queued, queuedAttn = l.fill(c, req, i == chosen, room, most); room >= most {
			return room, math.Inf(1)
		}
		nextMs = min(nextMs, l.fitsInMs(c, req, queued, queuedAttn))
	}
	return room, nextMs
}

// fitsInMs is how long, in ms, until c, full for req with queued more
// prompt tokens queued there (their attention queuedAttn), is not, by its
// head's progress alone: 0
// when it is not full now, +Inf when the head's computation ends first
// (its first token is a change of the load record, which recomputes) or
// none is in progress. While the head computes, its time left (HeadMs)
// falls as fast as the clock runs and its tokens left (HeadTokens, less
// the block it keeps until its first token) at its pace, both of them
// linearly, and the prediction of a request behind it falls with the
// head's time left (FirstTokenMs: what waits behind the head, its tokens
// and their attention, does not change): past the TTFT limit by x ms, the
// request fits x ms later,
// and past the prefill budget by n tokens, once the head computed n more.
// The head's progress is counted in whole tokens: a token's time is added
// so that the fit is not a rounding short of it.
func (l Limits) fitsInMs(c *Candidate, req Request, queued int, queuedAttn float64) float64 {
	if !l.full(c, req, queued, queuedAttn) {
		return 0
	}
	left := c.HeadTokens - req.BlockSize
	if !(c.HeadMs > 0) || left <= 0 {
		return math.Inf(1)
	}
	perToken := c.HeadMs / float64(left)
	var wait float64
	if l.PrefillTokens > 0 {
		if over := c.QueuedTokens + queued - l.PrefillTokens; over > 0 {
			if over > left {
				return math.Inf(1)
			}
			wait = float64(over) * perToken
		}
	}
	if l.TTFTMs > 0 {
		ms := c.firstTokenMs(queued, queuedAttn, req.NewTokens(c.Overlap), req.Attention(c.Overlap)) + l.LateMs
		// At the head's end (HeadMs 0) the prediction is of a worker
		// with no head in progress, which waits out half a decode step:
		// the fit must come before it.
		if over := ms - l.TTFTMs; over > 0 {
			if over >= c.HeadMs {
				return math.Inf(1)
			}
			wait = max(wait, over)
		}
	}
	return wait + perToken
}

// LatestFit is the candidate to place req on when it is one of a
// backlog that should leave the earliest slots to others: of the
// candidates with a slot within l for req or for a typical request (a
// prompt of typical tokens cached nowhere; typical 0: one of req's
// tokens), the one where a typical request is predicted latest as the
// TTFT limit counts it (with LateMs where prompts are queued). What a
// slot is worth to the others is how soon their requests, which share
// none of req's cache, would get a first token there; req takes the one
// worth least. A slot where only a typical request fits counts too: the
// room an admission queue releases a backlog's request on is counted in
// typical requests (Core.SaturationNext), one for req and the rest kept
// for others, and at a slot on the margin, where a typical request just
// fits, a request a few tokens longer does not; placed on an earlier slot
// instead, it would take the one kept for the others and leave no room
// where the count said there was. On the margin's slot it gets its first
// token past the limit by what its extra tokens add. chosen (the
// caller's own pick, an index of cands) wins ties, and is returned when
// no slot fits either or l has no TTFT limit (nothing to rank the slots
// by). cands must have been filled.
func (l Limits) LatestFit(cands []Candidate, req Request, typical int, chosen int) int {
	if !(l.TTFTMs > 0) {
		return chosen
	}
	if typical <= 0 {
		typical = max(req.Tokens, 1)
	}
	latest, latestMs := chosen, math.Inf(-1)
	for i := range cands {
		c := &cands[i]
		if l.Full(c, req) && l.fullNew(c, 0, 0, typical, float64(typical)*float64(typical)) {
			continue
		}
		ms := c.FirstTokenMs(0, typical)
		if c.QueuedTokens > 0 {
			ms += l.LateMs
		}
		if ms > latestMs || ms == latestMs && i == chosen {
			latest, latestMs = i, ms
		}
	}
	return latest
}

// CheapestFit is the candidate to place req on when it must keep within
// l's TTFT limit if it can (a request let go into room an admission queue
// held back for it): chosen (the caller's pick, an index of cands) when
// req fits there; otherwise, of the candidates where it fits (Full is
// false), the one of the lowest Cost (ties: the first); chosen when it
// fits nowhere or l has no TTFT limit. The cost weighs the request's own
// first token against what it costs the others (their wait behind it,
// their decode steps), and may find a worker past the limit cheapest; but
// the room a saturated fleet counts, and a queue let this request go on,
// is a slot within the limit, and the limit is the request's objective.
// cands must have been filled and priced.
func (l Limits) CheapestFit(cands []Candidate, req Request, chosen int) int {
	if !(l.TTFTMs > 0) || chosen < 0 || chosen >= len(cands) || !l.Full(&cands[chosen], req) {
		return chosen
	}
	best := chosen
	for i := range cands {
		if l.Full(&cands[i], req) {
			continue
		}
		if best == chosen || cands[i].Cost < cands[best].Cost {
			best = i
		}
	}
	return best
}
