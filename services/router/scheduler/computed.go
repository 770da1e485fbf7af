package scheduler

import (
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// FillComputed sets each candidate's Overlap to the prefix an engine finds
// computed when it admits the request there, of the prefix the candidate
// caches or is predicted to (its Overlap, from which Reach is kept), and
// says where the request's blocks are going to be (Reach, which Seed
// reads). indexed[i] of candidate i's Overlap are in its worker's KV
// events (computed); the rest are predicted: blocks of requests routed
// there that its events have not confirmed yet. An engine looks up a
// request's cached prefix once, when it admits it, and finds only the
// blocks computed by then (a block is cached once the step that computes
// it ends); a predicted block computed later is computed again for this
// request, and its prefill is priced with it.
//
// The router's record tells when a predicted block is computed. A block
// that no request waiting for its first token computes (by the record,
// each computes its blocks past those it found cached) was computed
// already: its request is decoding or has ended, its events on their way.
// One that a waiting request computes is computed in the step that
// reaches it: the waiting requests' uncached tokens go in the order they
// were routed (the order the engine prefills them in) in steps of the
// worker's token budget less one token per decoding request, and the new
// request is admitted at the start of a step, the first one after the
// step in flight that leaves budget free; it finds the blocks whose steps
// ended before (see computedPrefixLocked). A block a decoding request
// holds is computed whatever the queue says. The request finds a leading
// run of its blocks (an engine's lookup stops at the first block it does
// not find).
//
// A candidate filled by FillAll is needed: its queued tokens, decoding
// requests, head and timing model are read. Candidates whose Overlap is
// all indexed, or whose worker's timing model is not valid (no step
// budget to count steps with), keep it; every candidate's Reach is set.
// A worker's foreign requests (from its load report) are ahead of the
// request in QueuedTokens but their blocks are not known, so they are
// taken to compute none of its blocks.
func (l *Load) FillComputed(cands []Candidate, hashes []uint64, indexed []int, blockSize int) {
	locked := false
	for i := range cands {
		c := &cands[i]
		c.Reach = c.Overlap
		if !predictsComputed(c, indexed[i], blockSize) {
			continue
		}
		if !locked {
			l.mu.Lock()
			defer l.mu.Unlock()
			locked = true
		}
		c.Overlap = computedPrefixLocked(l.workers[c.Worker], c, hashes, indexed[i], blockSize, l.now())
	}
}

// FillComputedOne is FillComputed for one candidate, the first indexed
// blocks of whose Overlap are in its worker's events.
func (l *Load) FillComputedOne(c *Candidate, hashes []uint64, indexed, blockSize int) {
	c.Reach = c.Overlap
	if !predictsComputed(c, indexed, blockSize) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c.Overlap = computedPrefixLocked(l.workers[c.Worker], c, hashes, indexed, blockSize, l.now())
}

// predictsComputed says whether FillComputed looks at c: it has
// predicted blocks, and a step budget to count its steps with.
func predictsComputed(c *Candidate, indexed, blockSize int) bool {
	return c.Overlap > indexed && blockSize > 0 && c.Timing.Valid()
}

// computing is the part of a request's predicted blocks that one waiting
// request computes: blocks [from, to) of it, its computed blocks starting
// at block start, ahead tokens into the queue; those before hitTo are
// computed before the request's admission.
type computing struct{ from, to, start, ahead, hitTo int }

// computedPrefixLocked is how many leading blocks of hashes c's worker
// (record wl) has computed when it admits the request, of the first
// c.Overlap, the first indexed of which are computed (see FillComputed).
//
// Tokens are counted from the start of the queue's head: a waiting
// request's blocks end where its tokens do, past those of the requests
// before it. The engine is in a step (it is busy while anything waits):
// the head's k-th, k its steps that fit in the time since its first
// began (see headStepAt). That step computes the queue's tokens up to
// the end of its chunk, of the requests that were waiting when it began;
// every step after it a chunk of what remains, and the new request joins
// the first step that leaves budget free. So it finds the blocks ending
// within the step in flight and the whole chunks after it.
func computedPrefixLocked(wl *workerLoad, c *Candidate, hashes []uint64, indexed, bs int, now time.Time) int {
	to := min(c.Overlap, len(hashes))
	if wl == nil || len(wl.queue) == 0 || indexed >= to {
		return c.Overlap
	}
	chunk := max(c.Timing.MaxBatchedTokens-c.Decoding, 1)
	head := wl.queue[0]
	done := 0 // tokens of the head computed, at its pace
	if c.HeadTokens > 0 {
		done = max(head.prefillBlocks*bs-c.HeadTokens, 0)
	}
	// The head's first step began when it became the head, at the end
	// of a step (the request before it had its first token) or, routed
	// to an idle engine, at once; routed to an engine busy decoding, at
	// the end of the decode step in flight, half a decode step later on
	// average. The step in flight is the head's k-th since, begun at
	// stepAt; before the first began, none of the queue is in flight.
	begun := wl.headSince
	if wl.headRouted && c.Decoding > 0 {
		begun = begun.Add(time.Duration(c.Timing.DecodeMs(c.Usage) / 2 * float64(time.Millisecond)))
	}
	k, stepAt := 0, begun
	if elapsed := float64(now.Sub(begun)) / float64(time.Millisecond); elapsed > 0 {
		var ms float64
		k, ms = headStepAt(c, wl.queue[0], bs, elapsed)
		stepAt = begun.Add(time.Duration(ms * float64(time.Millisecond)))
	}
	started := !now.Before(begun)
	// A request in the step in flight was waiting when it began.
	inFlight := func(q *request) bool { return started && !q.at.After(stepAt) }
	flight := (k + 1) * chunk // where the step in flight ends
	all := max(c.QueuedTokens, 0) + done
	var buf [8]computing
	runs := buf[:0]
	ahead := 0 // tokens of the requests before q
	joined := true
	for _, q := range wl.queue {
		if joined && !inFlight(q) {
			joined = false
			flight = min(flight, ahead)
		}
		start := len(q.blocks) - q.prefillBlocks // its first computed block
		from, end := max(start, indexed), min(len(q.blocks), to)
		if from < end && q.blocks[from] == hashes[from] {
			// Sequence hashes chain their prefix: q shares hashes up
			// to the first position they differ.
			runs = append(runs, computing{from: from, to: from + sharedRun(q.blocks[from:end], hashes[from:end]), start: start, ahead: ahead})
		}
		ahead += q.prefillBlocks * bs
	}
	if len(runs) == 0 {
		return c.Overlap
	}
	// The tokens computed before the step that admits the request.
	before := flight + max(all-flight, 0)/chunk*chunk
	for i := range runs {
		// Block j ends ahead + (j+1-start)*bs tokens in, in time when
		// that is at most before.
		r := &runs[i]
		r.hitTo = r.from
		if left := before - r.ahead; left >= 0 {
			r.hitTo = max(r.start+left/bs, r.from)
		}
	}
	for j := indexed; j < to; j++ {
		computes, hit := false, false
		for _, r := range runs {
			if j >= r.from && j < r.to {
				computes = true
				if j < r.hitTo {
					hit = true
					break
				}
			}
		}
		if computes && !hit && wl.blocks[hashes[j]] == 0 {
			return j
		}
	}
	return c.Overlap
}

// maxHeadSteps bounds the steps headStepAt counts one by one.
const maxHeadSteps = 256

// headStepAt is which step of the head's prefill is in flight elapsed ms
// after its first began (0: its first) and when that step began, in ms
// after the first: each step computes a chunk of the head's tokens (the
// worker's budget less one token per decoding request), at the timing
// model's cost of those tokens and their attention over the tokens of
// their sequence before them (its cached prefix, its earlier chunks),
// with a decode step while requests decode. Its last step may hold the
// tokens of the requests behind it too: the step in flight is the head's
// last at most.
func headStepAt(c *Candidate, head *request, bs int, elapsed float64) (k int, at float64) {
	own := head.prefillBlocks * bs
	cached := max(len(head.blocks)-head.prefillBlocks, 0) * bs
	chunk := max(c.Timing.MaxBatchedTokens-c.Decoding, 1)
	for pos := 0; pos+chunk < own && k < maxHeadSteps; pos += chunk {
		ms := c.Timing.StepAttentionMs(float64(chunk), timingmodel.Attention(cached+pos, chunk), c.Decoding > 0, c.Usage)
		if !(ms > 0) || at+ms > elapsed {
			break
		}
		at += ms
		k++
	}
	return k, at
}

// sharedRun is the length of the leading run of a equal to b: sequence
// hashes match up to a position and differ after it, so it is found by
// binary search.
func sharedRun(a, b []uint64) int {
	n := min(len(a), len(b))
	lo, hi := 0, n
	for lo < hi {
		m := (lo + hi) / 2
		if a[m] == b[m] {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
