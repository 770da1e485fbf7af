package scheduler

import (
	"math"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// A Floor keeps, for a fixed list of workers (a target's candidates), two
// lower bounds per worker that hold whatever request comes and until its
// load record changes: Ahead, the time the worker's queue takes before a
// request's first token, at weight 1, and Decoding, its decoding requests.
// From them a caller bounds from below the cost of every worker (see
// CostBound) and finds, without pricing them, the workers whose bound is
// under a cost: a decision over thousands of workers prices the few that
// can win and leaves the rest.
//
// The bounds hold at any time until the record changes: the head of the
// queue is taken as computed whole (its progress only shrinks the queue),
// and a load report in the last floorSlack of its freshness (the record
// logs a change when one enters it) counts at the lower of the two loads
// it leaves, as the decision that syncs may fill a moment after its
// freshness ends. Sync brings a floor up to date
// with the record's changes since its last call, a few workers per decision;
// the workers are kept in a tree of the bounds' minima by position, so
// Below visits only the subtrees that hold a worker under the limit.
type Floor struct {
	workers []index.WorkerID
	models  []*timingmodel.Model
	bs      int
	pos     map[index.WorkerID]int
	// ahead and decoding are the bounds by position; the trees hold their
	// minima over each subtree (node 1 the root, leaves from size on).
	ahead, decoding  []float64
	minAhead, minDec []float64
	size             int
	// synced is the number of logged changes applied; timingVer the
	// version of the models the bounds were computed with; ok says
	// every model has coefficients no smaller than zero (the bounds
	// assume it) and perToken is the least prefill time per token.
	synced    uint64
	timingVer uint64
	built     bool
	ok        bool
	perToken  float64
}

// NewFloor returns a floor over workers (sorted as the caller's
// candidates are), whose timing models are models (read at each Sync: the
// caller keeps them from changing meanwhile) and whose block size is bs.
func NewFloor(workers []index.WorkerID, models []*timingmodel.Model, bs int) *Floor {
	f := &Floor{workers: workers, models: models, bs: bs, pos: make(map[index.WorkerID]int, len(workers))}
	for i, w := range workers {
		f.pos[w] = i
	}
	f.size = 1
	for f.size < len(workers) {
		f.size *= 2
	}
	f.ahead, f.decoding = make([]float64, len(workers)), make([]float64, len(workers))
	f.minAhead, f.minDec = make([]float64, 2*f.size), make([]float64, 2*f.size)
	for i := range f.minAhead {
		f.minAhead[i], f.minDec[i] = math.Inf(1), math.Inf(1)
	}
	return f
}

// floorSlack is how long before a load report stops being fresh the
// floor stops counting on it: a decision fills its candidates a moment
// after it syncs the floor, and the report must still count then.
const floorSlack = ReportTTL / 5

// maxChanges bounds the change log: a floor that falls further behind
// (no decision synced it meanwhile) computes every bound again.
const maxChanges = 1 << 15

// Valid says whether the floor's bounds hold (every model's coefficients
// are at least zero): when not, the caller prices every worker.
func (f *Floor) Valid() bool { return f.ok }

// PerToken is the least prefill time per prompt token of the workers'
// models: a bound on what each new token of a request adds.
func (f *Floor) PerToken() float64 { return f.perToken }

// Len is the number of workers.
func (f *Floor) Len() int { return len(f.workers) }

// Sync brings f up to date with l's record at timingVer (the version of
// f's models, which changes whenever any of them does).
func (l *Load) Sync(f *Floor, timingVer uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expireReportsLocked(now)
	sure := now.Add(-ReportTTL + floorSlack)
	fresh := now.Add(-ReportTTL)
	if !f.built || f.timingVer != timingVer || f.synced < l.changesBase {
		f.rebuildLocked(l, sure, fresh, timingVer)
		return
	}
	for _, w := range l.changes[f.synced-l.changesBase:] {
		if i, ok := f.pos[w]; ok {
			f.setLocked(i, l.workers[w], sure, fresh)
		}
	}
	f.synced = l.changesBase + uint64(len(l.changes))
}

func (f *Floor) rebuildLocked(l *Load, sure, fresh time.Time, timingVer uint64) {
	f.ok, f.perToken = true, math.Inf(1)
	for _, m := range f.models {
		if !nonNegative(m) {
			f.ok = false
		}
		f.perToken = min(f.perToken, m.PrefillPerToken)
	}
	if len(f.models) == 0 {
		f.perToken = 0
	}
	for i, w := range f.workers {
		f.setLocked(i, l.workers[w], sure, fresh)
	}
	f.built, f.timingVer = true, timingVer
	f.synced = l.changesBase + uint64(len(l.changes))
}

// nonNegative says whether m's coefficients are all at least zero: then a
// step costs more the more tokens it computes, and a worker's queue takes
// longer the longer it is.
func nonNegative(m *timingmodel.Model) bool {
	return m.PrefillQuadratic >= 0 && m.PrefillPerToken >= 0 && m.PrefillPerBatch >= 0 && m.DecodeMin >= 0 &&
		m.LoraLoadMs >= 0 && m.MaxBatchedTokens > 0
}

// setLocked computes position i's bounds from its record wl (nil: none).
func (f *Floor) setLocked(i int, wl *workerLoad, sure, fresh time.Time) {
	ahead, dec := 0.0, 0.0
	if wl != nil {
		m := f.models[i]
		ahead, dec = queueFloor(m, wl, f.bs, true)
		switch {
		case wl.reportAt.IsZero() || !wl.reportAt.After(fresh):
			// Stale: counts for nothing, and will not again.
			ahead, dec = queueFloor(m, wl, f.bs, false)
		case !wl.reportAt.After(sure):
			// Fresh now, maybe not when a decision fills: the bound
			// holds for both (and stays until the record changes).
			a, d := queueFloor(m, wl, f.bs, false)
			ahead, dec = min(ahead, a), min(dec, d)
		}
	}
	f.ahead[i], f.decoding[i] = ahead, dec
	n := f.size + i
	f.minAhead[n], f.minDec[n] = ahead, dec
	for n > 1 {
		n /= 2
		f.minAhead[n] = min(f.minAhead[2*n], f.minAhead[2*n+1])
		f.minDec[n] = min(f.minDec[2*n], f.minDec[2*n+1])
	}
}

// queueFloor is what fillStatic fills a candidate with, as bounds: the
// time its queue takes at weight 1 with the head taken as computed (all
// but the block it keeps), and its decoding requests; with report, the
// report's foreign load counts.
func queueFloor(m *timingmodel.Model, wl *workerLoad, bs int, report bool) (ahead, decoding float64) {
	queued, dec := wl.prefillBlocks*bs, wl.decoding
	attn := float64(wl.queueAttn) * float64(bs) * float64(bs)
	used := len(wl.blocks)
	if report {
		queued += wl.report.PrefillTokens
		attn += wl.report.PrefillAttn
		dec += wl.report.Decoding
		used += wl.report.DecodeBlocks
	}
	if len(wl.queue) > 0 {
		// The most the head's progress takes off (headStepsOf's left),
		// and the attention of those tokens.
		head := wl.queue[0]
		left := max(head.prefillBlocks*bs-bs, 0)
		queued -= left
		attn -= timingmodel.Attention(max(len(head.blocks)-head.prefillBlocks, 0)*bs, left)
	}
	usage := 0.0
	if t := wl.report.TotalBlocks; t > 0 {
		usage = min(float64(used)/float64(t), 1)
	}
	s := m.Steps(dec, usage)
	sp := s.Span(max(queued, 0))
	sp.Attn = max(attn, 0)
	if sp.Tokens <= 0 {
		sp.Attn = 0
	}
	ahead = s.PrefillMs(sp, 1)
	if d, ok := s.DecodeMs(sp); ok {
		ahead += d
	}
	return ahead, float64(dec)
}

// Min is the position with the least Ahead bound (-1 with no workers).
func (f *Floor) Min() int {
	if len(f.workers) == 0 {
		return -1
	}
	n := 1
	for n < f.size {
		if f.minAhead[2*n] <= f.minAhead[2*n+1] {
			n = 2 * n
		} else {
			n = 2*n + 1
		}
	}
	return n - f.size
}

// Below appends to dst, in position order, every position whose bounds
// give perAhead*Ahead + perDecoding*Decoding <= limit (perAhead and
// perDecoding at least zero). Subtrees whose minima are over the limit are
// not visited.
func (f *Floor) Below(dst []int, perAhead, perDecoding, limit float64) []int {
	if len(f.workers) == 0 {
		return dst
	}
	return f.below(dst, 1, perAhead, perDecoding, limit)
}

func (f *Floor) below(dst []int, n int, pa, pd, limit float64) []int {
	if !(pa*f.minAhead[n]+pd*f.minDec[n] <= limit) {
		return dst
	}
	if n >= f.size {
		return append(dst, n-f.size)
	}
	dst = f.below(dst, 2*n, pa, pd, limit)
	return f.below(dst, 2*n+1, pa, pd, limit)
}

// reportAt is a load report, for the floors to hear when it goes stale.
type reportAt struct {
	w  index.WorkerID
	at time.Time
}

// expireReportsLocked logs a change of every worker whose last report
// entered, by now, the last floorSlack of its freshness (where a floor
// stops counting on it), and forgets the reports that have.
func (l *Load) expireReportsLocked(now time.Time) {
	cutoff := now.Add(-ReportTTL + floorSlack)
	for l.reports.Len() > 0 && !l.reports.Front().at.After(cutoff) {
		r := l.reports.Pop()
		if wl, ok := l.workers[r.w]; ok && wl.reportAt.Equal(r.at) {
			l.logChangeLocked(r.w)
		}
	}
}

// logChangeLocked logs a change of w's record (see Load.changes).
func (l *Load) logChangeLocked(w index.WorkerID) {
	if len(l.changes) >= maxChanges {
		half := len(l.changes) / 2
		l.changes = append(l.changes[:0], l.changes[half:]...)
		l.changesBase += uint64(half)
	}
	l.changes = append(l.changes, w)
}

// CostBound bounds from below the cost under KV of a worker that caches
// overlap leading blocks of req, from its floor's bounds: it is
// perAhead*Ahead + perDecoding*Decoding + base, and Below finds the workers
// under a cost with the same three (for overlap 0: a worker caching some of
// the request costs no more than the same worker caching none, so a bound
// for overlap 0 is one for every worker). perToken is a bound on the
// worker's model's prefill time per token (Floor.PerToken), credit one on
// the Seed credit the worker may get (MaxSeedCredit). ok is false when the
// bound does not hold (a weight of 0 makes every queue free).
//
// Why it holds (models with coefficients at least zero): the worker's
// prefill and decode time up to the request's first token is its queue's
// (at least min(weight, 1) times Ahead) plus the request's own work, at
// least weight times perToken per token it computes (every token adds at
// least the linear part, and no step or decode step fewer); QueueWait adds
// rate times the work times (the queue plus half the work), growing with
// both; Seed takes off at most credit; DecodeStall adds the decoding
// requests times the same work's prefill; TierLoad and AdapterLoad add
// nothing below zero.
func CostBound(req Request, p Params, perToken, credit float64, overlap int) (perAhead, perDecoding, base float64, ok bool) {
	k := min(p.OverlapWeight, 1)
	if !(k > 0) || !(perToken >= 0) || math.IsInf(perToken, 0) || math.IsNaN(credit) {
		return 0, 0, 0, false
	}
	work := p.OverlapWeight * perToken * float64(req.NewTokens(overlap))
	rate := max(req.Rate, 0)
	perAhead = k * (1 + rate*work)
	perDecoding = work
	base = work + rate*work*work/2 - credit
	return perAhead, perDecoding, base, true
}

// Bounds are position i's Ahead and Decoding bounds.
func (f *Floor) Bounds(i int) (ahead, decoding float64) { return f.ahead[i], f.decoding[i] }

// MaxSeedCredit is the most Seed subtracts from a worker outside cands
// that caches none of req, once KV has priced cands (which hold every
// worker caching req.Shared.Blocks, its homes): the credit of a copy on a
// worker with no queue, which is the largest (a longer queue saves less).
func MaxSeedCredit(cands []Candidate, req Request) float64 {
	sh := req.Shared
	if !(req.Rate > 0) || !(sh.Rate > 0) {
		return 0
	}
	backlog := math.Inf(1)
	homes := 0
	for i := range cands {
		if cands[i].reach() >= sh.Blocks {
			homes++
			backlog = min(backlog, cands[i].ahead)
		}
	}
	if homes == 0 || !(backlog > 0) {
		return 0
	}
	return sh.Rate * WaitSaved(backlog, 1-sh.HomeBusy, 0, 1-sh.SeedBusy)
}

// Price fills each candidate's cost for req with the policy's terms, as
// Select does, without choosing (and without drawing from any random
// source).
func (pol *Policy) Price(cands []Candidate, req Request, p Params) { pol.cost(cands, req, p) }
