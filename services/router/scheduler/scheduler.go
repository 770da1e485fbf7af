// Package scheduler chooses a worker for a request by the time to first
// token it would predictably get there, from each worker's published timing
// model (see pkg/timingmodel), its cached prefix of the request and its
// current load:
//
//	ahead(w) = weight * prefill time of w's queued prompt tokens
//	         + the decode steps w's running requests add to those prefill steps
//	ttft(w)  = the same with this request's tokens not cached on w added
//	work(w)  = ttft(w) - ahead(w): the time w spends on this request before its first token
//	cost(w)  = ttft(w) + rate * work(w) * (ahead(w) + work(w)/2) - seed(w)
//	         + (decoding(w) + waiting(w)) * (the prefill time this request adds to w's steps)
//
// The prefill is computed in steps of the worker's token budget less one
// token per decoding request, each step paying the model's per-step
// constant and its tokens' linear time and, while requests decode, one
// decode step at the worker's KV usage; the model's quadratic term is
// attention, priced per prompt over its own context (its cached prefix
// and its earlier chunks), never over the other prompts a step carries
// (timingmodel.Attention). weight is --kv-overlap-score-weight: 1 is the
// model as published.
// The queued prompt tokens are the router's requests not yet at their first
// token, less what the first of them (the engine prefills in routing order)
// has had time to compute since it became the first (see headStepsOf).
//
// The last term is what the choice costs the requests that come after it:
// rate is the requests per millisecond expected at each worker (the
// router's recent arrival rate over its workers), and every one that
// reaches w before w has done this request's work waits for the rest of
// it, work(w) for those that arrive while w drains what is ahead, less
// for those that arrive during. While the workers are busy a share u of
// their time with prefill, more work arrives as a queue drains, and the
// queue takes 1/(1-u) times its own work to empty (a busy period): the
// wait the decision adds then reaches that many times more later
// requests, so the router divides the rate by 1-u (u measured over the
// same recent arrivals, capped below 1). A worker without the cached prefix costs
// the cluster its recomputation, and that time is paid by whoever queues
// behind it: at low load (rate near 0) the cost is the request's own TTFT,
// and the busier the cluster the more a cache hit is worth, which is what
// lets the router keep prefixes where they are when queues grow instead of
// trading them for a few milliseconds of its own wait.
//
// That cost is the request's own, and it keeps every request with its
// cache, however many share it: a hot prefix cached on one worker queues
// all of them there while other workers idle, and none pays once to copy
// it. So a worker without the prefix that the request's best-cached
// workers (its homes) hold is credited with what a copy there saves the
// requests that share it (see seed): those that began with the same prefix
// among the router's recent arrivals, less the first (it may have brought
// the prefix), come at their measured rate, and each arriving while the
// homes' shortest queue is longer than the new copy's (this request's work
// included) saves the difference. The queues drain as fast as the share
// of the workers' time those requests' prefill leaves free (their
// measured work, over the homes, and one more). Only the homes' current
// busy period counts, so the credit is 0 at low load, and a lower bound on
// the copy's worth.
// The last line is what the request's prefill costs the requests decoding
// on w: each waits for every step that computes part of the prompt, so
// each of their next tokens comes that much later (DecodeStall); those
// waiting for their first token on w are served in the same steps (they
// decode by then, or end their prompt in the step this request's first
// tokens share) and wait as long. All three
// are milliseconds of some request's wait, counted once: the cost is the
// total wait the choice causes.
//
// Temperature 0 takes the cheapest worker, breaking ties by the longer
// cached prefix, then at random; temperature t > 0 samples with probability
// proportional to exp(-normalised cost / t), so load spreads while cache
// affinity still pulls.
//
// The cost is built of parts: each Term (one file each: Prefill, Decode,
// QueueWait, Seed, DecodeStall, KVTransfer, BlockWait, ...) adds its part to every candidate's cost,
// and a Picker (Argmin, Softmax, Lowest, Random) chooses. A Policy is one
// composition of them; policy.go lists the compositions (KV is the cost
// above), and the router's modes name the one they choose with.
package scheduler

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/internal/fifo"
)

// ErrNoCandidates is returned by Select when no worker can serve.
var ErrNoCandidates = errors.New("scheduler: no candidate workers")

// Candidate is one worker that could serve a request.
type Candidate struct {
	Worker index.WorkerID
	// Overlap is how many leading blocks of the request the worker caches
	// (or is predicted to, once requests routed there are computed), on
	// any cache tier.
	Overlap int
	// Reach is the leading blocks the worker caches or is predicted to,
	// computed by the time it would admit the request or not: Overlap is
	// the part it finds computed then (see FillComputed), Reach what its
	// cache will hold, which decides the request's homes (see Seed). 0
	// when not filled: Overlap is all of it.
	Reach int
	// Lower is how many of those blocks it holds on each tier below GPU
	// (host memory, disk, unknown: index.Tier less one), which it loads
	// back rather than computes (see TierLoad); zero when all are on GPU.
	Lower [index.LowerTiers]int32
	// PrefillBlocks and DecodeBlocks are the worker's load in blocks, as
	// the router counts it (reported to callers; the cost uses the rest).
	PrefillBlocks, DecodeBlocks int
	// QueuedTokens are the prompt tokens queued for prefill on the worker.
	QueuedTokens int
	// QueuedAttn is the attention those tokens put in the timing model's
	// quadratic term (tokens squared, see timingmodel.Attention): each
	// queued prompt's tokens over its own context, the prefix it has
	// cached and its tokens computed already. A prompt does not attend to
	// the others it shares a step with, so this is far less than
	// QueuedTokens squared when many short prompts queue, and more than
	// their own square for prompts after long cached prefixes.
	QueuedAttn float64
	// HeadTokens of QueuedTokens are the head of the worker's prefill
	// queue, which it is computing now (in the step it began when the
	// request before it got its first token); HeadMs is the time left of
	// that computation, at the head's pace. Zero when no head is known to
	// be in progress. Saturation reads them (FirstTokenMs); the routing
	// cost does not.
	HeadTokens int
	HeadMs     float64
	// HeadAttn is the part of QueuedAttn that HeadTokens put there.
	HeadAttn float64
	// Decoding counts its requests past their prefill.
	Decoding int
	// Usage is the fraction of its KV blocks in use (0..1).
	Usage float64
	// Timing is the worker's published timing model.
	Timing timingmodel.Model
	// AdapterMs is the time the worker needs to load the request's LoRA
	// adapter before starting it: 0 when it has the adapter loaded or the
	// request has none (see AdapterLoad).
	AdapterMs float64
	// SlotWaitMs is how long the request would wait on the worker for an
	// adapter slot to free before that load can begin: 0 when a slot is
	// free (or the adapter is loaded, or the request has none); otherwise
	// the time until enough of the adapters its running requests hold
	// have no request left (see AdapterLoad).
	SlotWaitMs float64
	// KV is the worker's KV memory as a new request's admission meets
	// it (see BlockWait).
	KV KVSpace
	// SharedBlocks is how many leading blocks of the request the
	// worker's running requests hold, which it shares rather than
	// takes of the free memory (see Load.FillShared; 0 unless filled).
	SharedBlocks int
	// Cost is filled in by Select: the predicted time to first token in
	// milliseconds, with the prefill part weighted.
	Cost float64
	// steps are Timing's step costs at Decoding and Usage, when prepared:
	// FillAll keeps them per worker while its load and model stay, so a
	// decision does not recompute them for every worker. A candidate made
	// or changed otherwise (prepared false) computes them in Cost.
	steps    timingmodel.Steps
	prepared bool
	// ahead and work are Cost's parts: the time of what is queued ahead
	// and of this request's own prefill there (filled when Rate > 0).
	ahead, work float64
}

// Request is the request being routed.
type Request struct {
	// Blocks and Tokens are its full blocks and its prompt's tokens (when
	// only block hashes are known, Blocks times BlockSize).
	Blocks, Tokens int
	// BlockSize is tokens per block.
	BlockSize int
	// Rate is how many requests per millisecond are expected to reach
	// each worker and wait behind this request's work: the arrival rate
	// per worker, over 1 - the workers' prefill utilisation (see the
	// package doc). 0 costs the request's own time to first token only.
	Rate float64
	// Shared describes the prefix the best-cached workers hold and the
	// recent requests that shared it (see Shared); zero: none.
	Shared Shared
}

// Shared is a request's prefix cached on the workers that hold the most of
// it (its homes), and the recent arrivals that began with that prefix: the
// requests that follow it wherever it is cached. A worker without it that
// takes this request gets a copy, and while the homes' queues are longer
// than the new copy's, the requests that share it wait there less.
type Shared struct {
	// Blocks is how many leading blocks the homes cache.
	Blocks int
	// Rate is how many requests per ms begin with those blocks.
	Rate float64
	// HomeBusy is the share of a home's time prefill takes while the
	// homes are what those requests have (at least their own share of the
	// homes' work), SeedBusy the same for a worker that becomes one more
	// home; both in [0, 1).
	HomeBusy, SeedBusy float64
}

// NewTokens is how many prompt tokens a worker caching overlap blocks
// must compute: the rest of the prompt, and at least the last block (an
// engine computes it even when cached, for the first token's logits).
func (r Request) NewTokens(overlap int) int {
	n := r.Tokens - overlap*r.BlockSize
	if n < 1 {
		n = min(r.BlockSize, r.Tokens)
	}
	return max(n, 0)
}

// Attention is what the request's prompt puts in the timing model's
// quadratic term on a worker caching overlap blocks: its NewTokens attend
// to the tokens before them in the prompt, the cached prefix among them
// (timingmodel.Attention), however the engine splits them into chunks.
func (r Request) Attention(overlap int) float64 {
	n := r.NewTokens(overlap)
	return timingmodel.Attention(r.Tokens-n, n)
}

// Params weigh a decision.
type Params struct {
	// OverlapWeight multiplies the prefill time in the cost; 1 is the
	// workers' timing models as published, more favours cache hits, less
	// favours spreading decode load.
	OverlapWeight float64
	// Temperature 0 is deterministic argmin; larger samples more widely.
	Temperature float64
}

// Load tracks the requests the router has sent to each worker: added on
// route, moved from prefill to decode on prefill-complete, removed on free.
// The decode leg of a disaggregated request (AddLeg) is the exception: its
// prefill completes on another worker, and it then waits on its own for
// admission (its KV moving, then free blocks and a running slot) until the
// worker's load report shows it decoding (see PrefillDone and Report).
// A worker's decode blocks are the distinct blocks of its decoding requests,
// counted once however many requests share them (a shared system prompt
// occupies the cache once), which is what its KV memory holds.
//
// Workers' load reports are merged with this record request by request
// (Report): a reported request the router routed keeps the router's record,
// one it has freed is ignored, and only the others (sent by another router
// or directly) add to the worker's load, for as long as the report is fresh.
// So a finished request's blocks never outlive it, however late a report.
type Load struct {
	mu       sync.Mutex
	now      func() time.Time
	workers  map[index.WorkerID]*workerLoad
	requests map[string]*request
	// order lists requests by when they were added, for Expire. It is a
	// chunked queue: a slice compacted now and then would copy up to the
	// request TTL's worth of entries (half an hour) in one decision.
	order fifo.Queue[added]
	// freed remembers requests freed in the last FreedMemory, so that a
	// report still listing them does not bring them back.
	freed     map[string]time.Time
	freedList fifo.Queue[freedAt]
	// unrouted are the ids among freed that were not in flight when freed:
	// their Free overtook their Route (the two travel on different streams,
	// or through different replicas), so the Route, when it comes, is not
	// counted.
	unrouted map[string]struct{}
	// gen counts the workers map's changes (a record made or dropped);
	// fill is valid while it stays.
	gen  uint64
	fill fillCache
	// changes logs the workers whose record changed, in order, for the
	// floors that keep a bound per worker (see Floor); changesBase is the
	// number of changes logged before changes[0]. reports lists the load
	// reports in the order they came, for the floors to hear when one
	// stops being fresh.
	changes     []index.WorkerID
	changesBase uint64
	reports     fifo.Queue[reportAt]
}

// fillCache holds, by position, the records of the candidate list FillAll
// filled last: a router fills the same list of workers decision after
// decision, and a map lookup per worker was a large part of that.
type fillCache struct {
	gen     uint64
	workers []index.WorkerID
	loads   []*workerLoad // nil: the worker has no record
	// memos are what filling each position computed last; see fillMemo.
	memos []fillMemo
	// timings are the models memos were computed with, apart: read only
	// when the caller does not number its models (see FillAllVersion),
	// and a model is as large as the rest of a memo, which a decision
	// reads for every worker.
	timings []timingmodel.Model
}

// fillMemo is what filling a candidate from its worker's record computed,
// kept while everything it was computed from stays: the record (its ver),
// whether the worker's report was fresh, the block size and the timing
// model. Only the head's progress depends on the time of the decision;
// the rest changes when a request is routed to, started on or freed from
// the worker, or it reports, a few workers per decision. The cost's step
// costs (Candidate.steps) are computed here too, once per change.
type fillMemo struct {
	// What it was computed from, read at every decision first.
	ver, timingVer           uint64
	bs                       int
	ok, hasLoad, fresh, tver bool
	// What it computed.
	prefill, decodeBlocks int
	queued, decoding      int // before the head's progress
	usage, queuedAttn     float64
	kv                    KVSpace
	head                  headSteps
	steps                 timingmodel.Steps
	// The model it was computed with is fillCache.timings'.
}

// FreedMemory is how long a freed request id is remembered; a load report
// older than this would bring it back, and reports are published every
// second.
const FreedMemory = time.Minute

// ReportTTL is how long a load report's foreign requests count.
const ReportTTL = 5 * time.Second

type added struct {
	id string
	r  *request
	at time.Time
}

type freedAt struct {
	id string
	at time.Time
}

type workerLoad struct {
	// ver changes with the record: every change goes through
	// workerLocked, which bumps it (see fillMemo).
	ver                               uint64
	prefillBlocks, requests, decoding int
	// queueAttn is the attention of the prefill queue's requests, in
	// blocks squared: the sum of their attn. Integers, so that adding
	// and taking away requests leaves no rounding behind.
	queueAttn int64
	// queueNeed is the blocks the prefill queue's requests take when
	// admitted: the sum of their need.
	queueNeed int
	// runMs and output are how long a request runs on the worker and
	// how many tokens it generates, on average, from its last load
	// report (see ReportRun); 0: unknown.
	runMs, output float64
	// listed says the worker's last load report listed its requests, so
	// that a decode leg's admission shows there (see Report); a worker
	// that has not reported, or reports only sums, gives no sign of it.
	listed   bool
	blocks   map[uint64]int32 // active block -> requests holding it
	report   Reported
	reportAt time.Time
	// queue lists the requests waiting for their first token, and the
	// decode legs waiting for admission, in the order they were routed:
	// the order the engine prefills them in.
	// headSince is when the first of them became the head, the one
	// being computed; headRouted says it became the head when it was
	// routed (the queue was empty), not when the request before it got
	// its first token, at the end of a step.
	queue      []*request
	headSince  time.Time
	headRouted bool
}

// dequeue takes r out of the prefill queue; when r was its head, the next
// one starts now.
func (wl *workerLoad) dequeue(r *request, now time.Time) {
	for i, q := range wl.queue {
		if q != r {
			continue
		}
		wl.queue = append(wl.queue[:i], wl.queue[i+1:]...)
		wl.queueAttn -= r.attn
		wl.queueNeed -= r.need
		if i == 0 {
			wl.headSince, wl.headRouted = now, false
		}
		return
	}
}

// Reported is what a worker's load report adds to the router's record:
// the load of requests the router does not know, and the cache size.
type Reported struct {
	// PrefillTokens, DecodeBlocks and Decoding are the foreign requests';
	// Prefilling counts those with prompt tokens left (PrefillBlocks
	// their blocks, each request's prompt tokens left in whole blocks).
	PrefillTokens, DecodeBlocks, Decoding int
	Prefilling, PrefillBlocks             int
	// PrefillAttn is the attention of PrefillTokens (tokens squared):
	// each foreign request's as an uncached prompt (a report does not say
	// what a request has cached or computed), or, from an aggregate-only
	// report, their sum's, as one prompt.
	PrefillAttn float64
	// TotalBlocks is the worker's KV capacity; 0 if unknown.
	TotalBlocks int
}

// ReportedRequest is one request in a worker's load report.
type ReportedRequest struct {
	ID            string
	PrefillTokens int
	DecodeBlocks  int
}

type request struct {
	worker        index.WorkerID
	prefillBlocks int
	// attn is the attention of its prefill in blocks squared: its
	// prefill blocks over the blocks it had cached (the rest of its
	// blocks), timingmodel.Attention in blocks.
	attn int64
	// need is the blocks it takes when the engine admits it: its
	// prefill blocks, or those it receives (a decode leg's).
	need      int
	blocks    []uint64
	prefilled bool
	// leg says it is a disaggregated request's decode leg (AddLeg);
	// running that it decodes on its worker (its blocks held there):
	// from its prefill's completion, or, a decode leg, from the report
	// that shows it decoding (reportedDecoding says a report did before
	// its prefill's completion was heard).
	leg, running, reportedDecoding bool
	// at is when it was routed.
	at time.Time
	// expect is when its first token was predicted (zero: no
	// prediction kept), key what the caller keeps its lateness under.
	expect time.Time
	key    string
}

// NewLoad returns an empty tracker on the wall clock.
func NewLoad() *Load { return NewLoadClock(time.Now) }

// NewLoadClock returns an empty tracker on the given clock (a simulation's
// virtual one).
func NewLoadClock(now func() time.Time) *Load {
	return &Load{now: now, workers: map[index.WorkerID]*workerLoad{}, requests: map[string]*request{},
		freed: map[string]time.Time{}, unrouted: map[string]struct{}{}}
}

// Add records a request routed to w: it will prefill prefillBlocks blocks
// and holds the blocks with these sequence hashes while it runs. A request
// id already present is replaced (a retry moved it). Add keeps its own copy
// of blocks.
//
// A request whose Free came first (in the last FreedMemory, while it was
// not in flight) is over already: Add records nothing and returns false.
func (l *Load) Add(id string, w index.WorkerID, prefillBlocks int, blocks []uint64) bool {
	return l.AddShared(id, w, prefillBlocks, append([]uint64(nil), blocks...))
}

// AddShared is Add keeping blocks itself, not a copy: the caller must not
// change them afterwards (Core hands the load record and its predictions
// one copy of a request's hashes).
func (l *Load) AddShared(id string, w index.WorkerID, prefillBlocks int, blocks []uint64) bool {
	return l.AddNeed(id, w, prefillBlocks, prefillBlocks, blocks)
}

// AddNeed is AddShared for a request that takes need blocks of the
// worker's KV memory when admitted, whatever it prefills: a decode leg
// prefills nothing of its prompt and takes the blocks it receives.
func (l *Load) AddNeed(id string, w index.WorkerID, prefillBlocks, need int, blocks []uint64) bool {
	return l.add(id, w, prefillBlocks, need, blocks, false)
}

// AddLeg is AddShared for the decode leg of a disaggregated request routed
// to w: it prefills nothing of its prompt there and takes need blocks of
// w's KV memory when w admits it. Its prefill completes on another worker
// (PrefillDone at the handoff); it then still waits on w, its KV moving
// and then its admission, behind the blocks and running slots w's running
// requests hold, so it stays among w's waiting requests until w's load
// report lists it decoding (Report). A worker whose reports list no
// requests gives no such sign: its decode legs run from the handoff.
func (l *Load) AddLeg(id string, w index.WorkerID, need int, blocks []uint64) bool {
	return l.add(id, w, 0, need, blocks, true)
}

func (l *Load) add(id string, w index.WorkerID, prefillBlocks, need int, blocks []uint64, leg bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, early := l.unrouted[id]; early {
		delete(l.unrouted, id)
		return false
	}
	l.freeLocked(id)
	delete(l.freed, id)
	r := &request{worker: w, prefillBlocks: prefillBlocks, need: max(need, 0), blocks: blocks, at: l.now(), leg: leg}
	if n := int64(max(prefillBlocks, 0)); n > 0 {
		r.attn = n * (2*int64(max(len(blocks)-prefillBlocks, 0)) + n)
	}
	l.requests[id] = r
	l.order.Push(added{id: id, r: r, at: l.now()})
	wl := l.workerLocked(w)
	wl.prefillBlocks += prefillBlocks
	wl.requests++
	if len(wl.queue) == 0 {
		wl.headSince, wl.headRouted = l.now(), true
	}
	wl.queue = append(wl.queue, r)
	wl.queueAttn += r.attn
	wl.queueNeed += r.need
	return true
}

// Knows says whether id is a request in flight that the tracker records.
func (l *Load) Knows(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.requests[id]
	return ok
}

// Expect records when a request in flight is predicted to get its first
// token (at), and, with sample, keeps it for PrefillDone to say how late
// the token came, with a key (its model, say). The requests waiting on
// its worker behind the head (routed before it, their step not begun) are
// expected no earlier than at from then on: an engine batches what waits
// into its next step, so the request shares their step and their first
// tokens come with its own (the prediction's span of the queue and the
// request), later than predicted at their own decisions by what joined
// them. That is the threshold's business at the later decision, not
// lateness. Unknown ids are ignored.
func (l *Load) Expect(id, key string, at time.Time, sample bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.requests[id]
	if !ok || r.prefilled {
		return
	}
	if sample {
		r.expect, r.key = at, key
	}
	wl := l.workers[r.worker]
	if wl == nil || len(wl.queue) < 2 {
		return
	}
	for _, q := range wl.queue[1:] {
		if q != r && !q.expect.IsZero() && q.expect.Before(at) {
			q.expect = at
		}
	}
}

// PrefillDone records that a request finished its prefill: it runs from
// now, holding its blocks. A decode leg's prefill completes on another
// worker (the handoff), and it runs once its worker admits it: when that
// worker's load report shows it decoding (see AddLeg), at once when one
// did already or the worker's reports list no requests. Unknown ids and
// repeats are ignored. For a request with a predicted first token
// (Expect), it says how much later than predicted it finished (negative:
// earlier) and the key Expect gave; ok is false otherwise.
func (l *Load) PrefillDone(id string) (key string, late time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, known := l.requests[id]
	if !known || r.prefilled {
		return "", 0, false
	}
	if !r.expect.IsZero() {
		key, late, ok = r.key, l.now().Sub(r.expect), true
	}
	r.prefilled = true
	if r.leg && !r.reportedDecoding {
		if wl := l.workers[r.worker]; wl != nil && wl.listed {
			return key, late, ok // it waits for admission there
		}
	}
	wl := l.workerLocked(r.worker)
	wl.prefillBlocks -= r.prefillBlocks
	wl.runLocked(r, l.now())
	return key, late, ok
}

// runLocked moves r, prefilled, from wl's waiting requests to its running
// ones, which hold their blocks.
func (wl *workerLoad) runLocked(r *request, now time.Time) {
	wl.dequeue(r, now)
	r.running = true
	wl.decoding++
	for _, h := range r.blocks {
		wl.blocks[h]++
	}
}

// Free forgets a request (finished or cancelled) and remembers that it
// did; it says whether the request had finished its prefill. Unknown ids
// are remembered too, as freed before they were routed: a replica may free
// a request whose routing this one has not heard of yet, and a caller that
// gave up waiting for a decision frees it on another stream, which may
// overtake the decision; the Add that follows is not counted.
func (l *Load) Free(id string) (prefilled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.requests[id]
	if ok {
		prefilled = r.prefilled
		l.freeLocked(id)
	} else if _, again := l.freed[id]; !again {
		l.unrouted[id] = struct{}{}
	}
	l.rememberLocked(id)
	return prefilled
}

// Drop forgets a request in flight as Free does and says whether it was
// in flight and had finished its prefill. An id not in flight is left
// alone: nothing is remembered of it, so a later Add of it counts. It
// ends a part of a request that may end twice or never have begun (the
// prefill leg of a disaggregated request, at its handoff and again with
// the request), whose routing is decided by another record.
func (l *Load) Drop(id string) (found, prefilled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.requests[id]
	if !ok {
		return false, false
	}
	prefilled = r.prefilled
	l.freeLocked(id)
	l.rememberLocked(id)
	return true, prefilled
}

// rememberLocked remembers id as freed now, for FreedMemory, and forgets
// the ids freed before that.
func (l *Load) rememberLocked(id string) {
	now := l.now()
	l.freed[id] = now
	l.freedList.Push(freedAt{id: id, at: now})
	for l.freedList.Len() > 0 && now.Sub(l.freedList.Front().at) > FreedMemory {
		f := l.freedList.Pop()
		if at, ok := l.freed[f.id]; ok && at.Equal(f.at) {
			delete(l.freed, f.id)
			delete(l.unrouted, f.id)
		}
	}
}

func (l *Load) freeLocked(id string) {
	r, ok := l.requests[id]
	if !ok {
		return
	}
	delete(l.requests, id)
	wl := l.workerLocked(r.worker)
	wl.requests--
	if !r.prefilled {
		wl.prefillBlocks -= r.prefillBlocks
	}
	if !r.running {
		wl.dequeue(r, l.now())
	} else {
		wl.decoding--
		for _, h := range r.blocks {
			if n := wl.blocks[h] - 1; n > 0 {
				wl.blocks[h] = n
			} else {
				delete(wl.blocks, h)
			}
		}
	}
	// Its entry in order outlives it until the request TTL (half an hour
	// by default); the block list, a request's bulk, need not.
	r.blocks = nil
}

// Report merges a worker's load report: reqs lists every request on it
// (nil with aggregate-only reports, when prefillTokens is its prompt
// tokens still to prefill in all), totalBlocks its KV capacity. A decode
// leg the report lists with no prompt tokens left is decoding: admitted,
// it runs from now (see AddLeg); one the report lists still to compute,
// or does not list (its KV still moving), waits on. An aggregate-only
// report says nothing of admissions: the legs waiting for one run.
func (l *Load) Report(w index.WorkerID, reqs []ReportedRequest, prefillTokens, totalBlocks, blockSize int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wl := l.workerLocked(w)
	l.expireReportsLocked(l.now())
	rep := Reported{TotalBlocks: totalBlocks}
	wl.listed = reqs != nil
	if !wl.listed {
		l.runWaitingLegsLocked(wl)
	}
	if reqs == nil {
		// Without ids nothing tells our requests from others but their
		// sum; decode blocks may be a finished request's, so only prompt
		// tokens beyond our own count.
		rep.PrefillTokens = max(0, prefillTokens-wl.prefillBlocks*blockSize)
		rep.PrefillAttn = float64(rep.PrefillTokens) * float64(rep.PrefillTokens)
		if blockSize > 0 {
			rep.PrefillBlocks = (rep.PrefillTokens + blockSize - 1) / blockSize
		}
	}
	for _, r := range reqs {
		if q, ours := l.requests[r.ID]; ours {
			if q.leg && !q.running && r.PrefillTokens == 0 && q.worker == w {
				if q.reportedDecoding = true; q.prefilled {
					wl.runLocked(q, l.now())
				}
			}
			continue
		}
		if _, freed := l.freed[r.ID]; freed {
			continue
		}
		rep.PrefillTokens += r.PrefillTokens
		rep.PrefillAttn += float64(r.PrefillTokens) * float64(r.PrefillTokens)
		rep.DecodeBlocks += r.DecodeBlocks
		if r.PrefillTokens == 0 {
			rep.Decoding++
		} else if blockSize > 0 {
			rep.Prefilling++
			rep.PrefillBlocks += (r.PrefillTokens + blockSize - 1) / blockSize
		}
	}
	wl.report, wl.reportAt = rep, l.now()
	l.reports.Push(reportAt{w: w, at: wl.reportAt})
}

// runWaitingLegsLocked runs the decode legs waiting on wl past their
// prefill's completion.
func (l *Load) runWaitingLegsLocked(wl *workerLoad) {
	for i := 0; i < len(wl.queue); {
		if q := wl.queue[i]; q.leg && q.prefilled {
			wl.runLocked(q, l.now())
			continue
		}
		i++
	}
}

// ReportRun keeps what a worker's load report says of its requests' runs:
// how long one runs there once admitted (runMs) and how many tokens it
// generates (output), on average; 0 for unknown. BlockWait reads them.
func (l *Load) ReportRun(w index.WorkerID, runMs, output float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wl := l.workers[w]; wl != nil && wl.runMs == runMs && wl.output == output {
		return
	}
	wl := l.workerLocked(w)
	wl.runMs, wl.output = runMs, output
}

// workerLocked is w's record, made if it has none, for a change: it bumps
// the record's ver, so call it for every change and only for one.
func (l *Load) workerLocked(w index.WorkerID) *workerLoad {
	wl, ok := l.workers[w]
	if !ok {
		wl = &workerLoad{blocks: map[uint64]int32{}}
		l.workers[w] = wl
		l.gen++
	}
	wl.ver++
	l.logChangeLocked(w)
	return wl
}

// Expire forgets requests added before cutoff that were never freed: their
// frontend or router replica died without saying so. It returns how many.
func (l *Load) Expire(cutoff time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for l.order.Len() > 0 && l.order.Front().at.Before(cutoff) {
		if a := l.order.Pop(); l.requests[a.id] == a.r { // not freed, nor replaced by a retry
			l.freeLocked(a.id)
			n++
		}
	}
	return n
}

// RemoveWorker drops a worker and its requests: it left.
func (l *Load) RemoveWorker(w index.WorkerID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.workers, w)
	l.gen++
	l.logChangeLocked(w)
	for id, r := range l.requests {
		if r.worker == w {
			delete(l.requests, id)
		}
	}
}

// RemoveInstance drops every rank of an instance and their requests: it
// left.
func (l *Load) RemoveInstance(instance uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.workers {
		if w.Instance == instance {
			delete(l.workers, w)
			l.logChangeLocked(w)
		}
	}
	l.gen++
	for id, r := range l.requests {
		if r.worker.Instance == instance {
			delete(l.requests, id)
		}
	}
}

// Of returns a worker's pending prefill blocks, distinct decode blocks and
// requests in flight, as the router recorded them.
func (l *Load) Of(w index.WorkerID) (prefillBlocks, decodeBlocks, requests int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wl, ok := l.workers[w]; ok {
		return wl.prefillBlocks, len(wl.blocks), wl.requests
	}
	return 0, 0, 0
}

// Fill sets c's load from the router's record plus a fresh report's
// foreign requests: queued prompt tokens (blockSize tokens per recorded
// prefill block), decoding requests and KV usage.
func (l *Load) Fill(c *Candidate, blockSize int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.fillLocked(c, l.workers[c.Worker], blockSize, now, now.Add(-ReportTTL))
}

// FillAll is Fill for every candidate, under one lock. It also prepares
// each candidate's step costs for Cost. It sets every field but Worker,
// Overlap, Lower, Timing, AdapterMs and SlotWaitMs, which are its input.
func (l *Load) FillAll(cands []Candidate, blockSize int) {
	l.fillAll(cands, blockSize, 0, false)
}

// FillAllVersion is FillAll for a caller that numbers its timing models:
// timingVer changes whenever any candidate's Timing does. It spares FillAll
// comparing every candidate's model with the one it filled it with last.
func (l *Load) FillAllVersion(cands []Candidate, blockSize int, timingVer uint64) {
	l.fillAll(cands, blockSize, timingVer, true)
}

func (l *Load) fillAll(cands []Candidate, blockSize int, timingVer uint64, versioned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	// Reports since fresh count: one time for every worker (Time.Add is
	// not free, and this runs per worker and decision).
	fresh := now.Add(-ReportTTL)
	clk := clockAt(now)
	loads, memos, timings := l.loadsLocked(cands)
	for i := range cands {
		c, wl, m := &cands[i], loads[i], &memos[i]
		isFresh := wl != nil && !wl.reportAt.IsZero() && wl.reportAt.After(fresh)
		var ver uint64
		if wl != nil {
			ver = wl.ver
		}
		sameTiming := versioned && m.tver && m.timingVer == timingVer
		if !sameTiming && m.ok && timings[i].Same(&c.Timing) {
			sameTiming = true
			m.timingVer, m.tver = timingVer, versioned
		}
		if !m.ok || m.hasLoad != (wl != nil) || m.ver != ver || m.fresh != isFresh || m.bs != blockSize || !sameTiming {
			m.head = fillStatic(c, wl, blockSize, isFresh)
			m.ok, m.hasLoad, m.ver, m.fresh, m.bs, timings[i] = true, wl != nil, ver, isFresh, blockSize, c.Timing
			m.timingVer, m.tver = timingVer, versioned
			m.prefill, m.decodeBlocks, m.queued, m.decoding, m.usage = c.PrefillBlocks, c.DecodeBlocks, c.QueuedTokens, c.Decoding, c.Usage
			m.queuedAttn, m.kv = c.QueuedAttn, c.KV
			m.steps = c.Timing.Steps(c.Decoding, c.Usage)
		}
		c.PrefillBlocks, c.DecodeBlocks, c.QueuedTokens, c.Decoding, c.Usage = m.prefill, m.decodeBlocks, m.queued, m.decoding, m.usage
		c.QueuedAttn, c.KV = m.queuedAttn, m.kv
		c.steps, c.prepared, c.Cost = m.steps, true, 0
		c.HeadTokens, c.HeadMs, c.HeadAttn = 0, 0, 0
		if wl != nil && m.head.left > 0 {
			m.head.fill(c, m.head.progressSince(clk.sub(wl.headSince)), blockSize)
		}
	}
}

// loadsLocked returns each candidate's record (nil if none), fill memo and
// the model of its memo,
// by position: the cached ones when the workers are the last call's.
func (l *Load) loadsLocked(cands []Candidate) ([]*workerLoad, []fillMemo, []timingmodel.Model) {
	fc := &l.fill
	if fc.gen == l.gen && len(fc.workers) == len(cands) {
		same := true
		for i := range cands {
			if cands[i].Worker != fc.workers[i] {
				same = false
				break
			}
		}
		if same {
			return fc.loads, fc.memos, fc.timings
		}
	}
	fc.gen = l.gen
	fc.workers, fc.loads = fc.workers[:0], fc.loads[:0]
	for i := range cands {
		fc.workers = append(fc.workers, cands[i].Worker)
		fc.loads = append(fc.loads, l.workers[cands[i].Worker])
	}
	fc.memos = slices.Grow(fc.memos[:0], len(cands))[:len(cands)]
	clear(fc.memos)
	fc.timings = slices.Grow(fc.timings[:0], len(cands))[:len(cands)]
	clear(fc.timings)
	return fc.loads, fc.memos, fc.timings
}

// fillLocked fills c from wl, c.Worker's record (nil if none), at now;
// fresh is now less ReportTTL.
func (l *Load) fillLocked(c *Candidate, wl *workerLoad, blockSize int, now, fresh time.Time) {
	isFresh := wl != nil && !wl.reportAt.IsZero() && wl.reportAt.After(fresh)
	h := fillStatic(c, wl, blockSize, isFresh)
	c.HeadTokens, c.HeadMs, c.HeadAttn = 0, 0, 0
	if wl != nil && h.left > 0 {
		h.fill(c, h.progress(wl.headSince, now), blockSize)
	}
}

// fillStatic fills c from wl, c.Worker's record (nil if none), as far as
// it does not depend on the time: all but the head's progress, which it
// returns the steps of. fresh says wl's report is fresh.
func fillStatic(c *Candidate, wl *workerLoad, blockSize int, fresh bool) headSteps {
	if wl == nil {
		// No load: all but the caller's fields are zero (the adapter's
		// load time is the caller's, as every record's fill keeps it).
		*c = Candidate{Worker: c.Worker, Overlap: c.Overlap, Lower: c.Lower, Timing: c.Timing, AdapterMs: c.AdapterMs,
			SlotWaitMs: c.SlotWaitMs, SharedBlocks: c.SharedBlocks}
		return headSteps{}
	}
	c.KV = KVSpace{Total: wl.report.TotalBlocks, Queued: wl.queueNeed, Waiting: len(wl.queue), Holders: wl.decoding,
		RunMs: wl.runMs}
	if blockSize > 0 {
		// The router records a running request's prompt blocks; it
		// holds those of its output so far too, half of it on average.
		c.KV.Held = int(float64(wl.decoding) * wl.output / 2 / float64(blockSize))
	}
	c.PrefillBlocks, c.DecodeBlocks = wl.prefillBlocks, len(wl.blocks)
	c.QueuedTokens, c.Decoding = wl.prefillBlocks*blockSize, wl.decoding
	bs := float64(blockSize)
	c.QueuedAttn = float64(wl.queueAttn) * bs * bs
	used := len(wl.blocks)
	if fresh {
		r := wl.report
		c.QueuedTokens += r.PrefillTokens
		c.QueuedAttn += r.PrefillAttn
		c.Decoding += r.Decoding
		used += r.DecodeBlocks
		c.KV.Holders += r.Decoding
		c.KV.Queued += r.PrefillBlocks
		c.KV.Waiting += r.Prefilling
	}
	c.KV.Held += used
	c.Usage = 0
	if t := wl.report.TotalBlocks; t > 0 {
		c.Usage = min(float64(used)/float64(t), 1)
	}
	return headStepsOf(wl, c, blockSize)
}

// headSteps are how the head of a worker's prefill queue progresses (see
// headStepsOf): step ms for every chunk tokens, up to left tokens, after
// the cached tokens of its prompt. The zero value progresses by none.
type headSteps struct {
	left, chunk, cached int
	step                float64
}

// headStepsOf is how the head of w's prefill queue progresses, from which
// progress estimates how many of its prompt tokens are computed already:
// it has been computed since headSince, at the pace of w's timing model
// (steps of its budget less the decoding requests, each with a decode
// step while requests decode, and its attention spread evenly over its
// steps: its mean pace, the later chunks of a long prompt being slower
// than its first). Without it a
// long prompt would count whole until its first token, though on average
// half of it is done, and a worker caching a prefix would look busier than
// it is. At least a block is left to the head: it is not done until its
// first token says so. Only progress depends on the time.
func headStepsOf(wl *workerLoad, c *Candidate, blockSize int) headSteps {
	if len(wl.queue) == 0 {
		return headSteps{}
	}
	left := wl.queue[0].prefillBlocks*blockSize - blockSize
	if left <= 0 || !c.Timing.Valid() {
		return headSteps{}
	}
	head := wl.queue[0]
	cached := max(len(head.blocks)-head.prefillBlocks, 0) * blockSize
	chunk := min(max(c.Timing.MaxBatchedTokens-c.Decoding, 1), left)
	attn := timingmodel.Attention(cached, left) * float64(chunk) / float64(left)
	step := c.Timing.StepAttentionMs(float64(chunk), attn, c.Decoding > 0, c.Usage)
	if step <= 0 {
		return headSteps{}
	}
	return headSteps{left: left, chunk: chunk, cached: cached, step: step}
}

// progress is the head's computed tokens at now, computed since since.
func (h headSteps) progress(since, now time.Time) int {
	return h.progressSince(now.Sub(since))
}

// fill sets c's queued tokens and their attention less the head's
// progress, and the head's part of them: its tokens left (with the block
// it keeps until its first token), their attention and their time at its
// pace.
func (h headSteps) fill(c *Candidate, progress, blockSize int) {
	c.QueuedTokens -= progress
	c.QueuedAttn -= timingmodel.Attention(h.cached, progress)
	c.HeadTokens = h.left - progress + blockSize
	c.HeadAttn = timingmodel.Attention(h.cached+progress, c.HeadTokens)
	c.HeadMs = float64(h.left-progress) / float64(h.chunk) * h.step
}

// progressSince is progress after d.
func (h headSteps) progressSince(d time.Duration) int {
	if h.left <= 0 {
		return 0
	}
	elapsed := float64(d) / float64(time.Millisecond)
	if elapsed <= 0 {
		return 0
	}
	return min(int(elapsed/h.step*float64(h.chunk)), h.left)
}

// clock is a decision's time, to subtract every worker's head start from:
// now.Sub(u), to the nanosecond, without Sub's overflow check (an Add and
// an Equal) once per worker and decision, which a time without a
// monotonic reading (a simulation's virtual clock) takes every time.
type clock struct {
	now time.Time
	// mono says now has a monotonic reading (Sub then uses it when u has
	// one too) or is out of clockSpan: clock leaves the subtraction to Sub.
	mono bool
	sec  int64
	nsec int
}

func clockAt(now time.Time) clock {
	c := clock{now: now, mono: now != now.Round(0), sec: now.Unix(), nsec: now.Nanosecond()}
	if c.sec <= -clockSpan || c.sec >= clockSpan {
		c.mono = true // out of sub's range: Sub for every worker
	}
	return c
}

// clockSpan bounds the seconds clock.sub subtracts itself: far inside
// int64, and a difference of them in nanoseconds too (Sub would saturate
// past that).
const clockSpan = 1 << 32

// sub is c.now.Sub(u).
func (c *clock) sub(u time.Time) time.Duration {
	// Without now's monotonic reading, Sub subtracts the wall times,
	// seconds and nanoseconds, as this does while nothing can overflow
	// (c.sec is in range, or c.mono is set: see clockAt).
	if us := u.Unix(); !c.mono && us > -clockSpan && us < clockSpan {
		return time.Duration(c.sec-us)*time.Second + time.Duration(c.nsec-u.Nanosecond())
	}
	return c.subSlow(u)
}

// subSlow is sub by Sub, out of line so that sub inlines.
//
//go:noinline
func (c *clock) subSlow(u time.Time) time.Duration { return c.now.Sub(u) }
