package frontend

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Admission control: while the router says a model's fleet is saturated
// (RouteResponse.saturated, WatchSaturation), requests wait here, in the
// frontend, instead of in the engines' queues, where nothing can reorder
// them. In short:
//
//   - Bands: a request's priority is x-switchyard-priority (an integer,
//     higher first; negative is sheddable) or its API key's priority=
//     (default 0). A higher band is always released first.
//   - Fairness within a band, across tenants (the API key's name, with
//     x-switchyard-fairness-id after a slash): least attained service,
//     the service being the tokens (prompt plus max_tokens) of a
//     tenant's requests let go to the engines lately, each aged by
//     e^(-age/serviceLife), over every frontend replica (see
//     admissionpeers.go). Deficit round robin keeps per-scheduler round
//     state (deficit counters, a round pointer) that replicas cannot
//     merge; an aged sum is state that they can (each ages its share by
//     the time since it was sent), and it weighs a tenant by what it had
//     of the engines over the queue's recent past: a tenant sending 10x
//     more has no more than the others once its queue is ordered by it,
//     and a light tenant's burst, which holds more of the engines than the
//     flood for a moment, is still ordered before the flood's backlog.
//   - Release: only on the router's word that the fleet has room (the
//     watch, or a route decision). The word counts the room (how many more
//     typical requests fit under the router's limits, up to core.MaxRoom):
//     as many go as it counts, less those let go since that the router
//     has not decided yet (pending), the next once their own route
//     decisions say there is room still. A router that does not count
//     its room has one request released at a time. Either way each
//     release is decided on a picture that includes the last ones; what
//     frees capacity (a prefill done, a request's end) reaches the queue
//     as the router's word that there is room again. A request that ends
//     here releases nothing by itself: it says nothing of the prefill
//     queue that the threshold is about, and a release per end would keep
//     however many requests were in flight when saturation began, however
//     far past the threshold that is. A replica with nothing of the model
//     in flight sends one as a probe, whose decision says whether there
//     is room (the router's last word may be stale), but not a flood's
//     request while a tenant it crowds is expected (it would take the
//     last rooms, below). No timers, no polling. The same count bounds
//     the fast path: requests that arrive together on a word of room go
//     on only as many as it counts (unless it is the most it counts,
//     which says plenty), so a burst cannot pass before any decision has
//     seen it.
//   - The last rooms: a request of a tenant with more of its requests
//     queued behind it (a flood) takes one of the last k rooms the router
//     counts only when no other tenant expected (its next request likely
//     to come, from its own rate over every replica: expectedLocked) has
//     a better claim to it: one in a higher band, or in the same band
//     with no backlog of its own or served less lately (see
//     crowdsLocked). A flood then stops k typical requests short of the
//     threshold, and a request of a tenant it crowds, arriving at a
//     random moment, finds a room at once
//     instead of waiting behind the flood for the next one: its time to
//     first token is the router's prediction (at most the threshold),
//     with no release wait on top. Without a kept room that wait is up to
//     the time between two rooms, about a prompt's prefill over the
//     number of workers, on top of a prediction at the threshold. k is
//     what the crowded tenants' share of the fleet's service asks for
//     (keptRooms), at most the fleet's capacity less one. A fleet serving
//     one tenant keeps no room back; the cost is k typical requests'
//     room while a crowded tenant is expected, which on a fleet whose
//     threshold holds one prompt a worker is a worker's throughput: the
//     kept room is the earliest slot, an idle worker.
//     The flood's requests released meanwhile are routed as a backlog's
//     (RouteRequest.backlog): each goes where it, or a typical request
//     (the room is counted in them), fits within the threshold and the
//     next request would be predicted latest, so that
//     the room kept is the earliest slot, not whichever opened last (the
//     router's cheapest pick would give the flood the earliest and leave
//     the kept room at the threshold). A tenant queued here without a
//     backlog (its request came while the flood was queued) takes the
//     kept room even when it holds more in flight than the flood, and
//     any request let go while others stay queued is routed to keep
//     within the router's limits (RouteRequest.within_limit): the room
//     it takes is a slot within them, which the router's cost alone
//     might pass over for a cheaper worker past the threshold. While
//     rooms are kept from it, a flood also has at most the fleet's
//     capacity less k prompts without a first token (floodHeldLocked):
//     the room a worker has behind a flood prompt near its end would
//     queue the next one in the engine, ahead of a crowded tenant's next.
//   - Limits: --queue-timeout per request, --queue-max-requests and
//     --queue-max-bytes per band; past them the oldest request of the
//     lowest band's tenant queueing the most there is shed (sheddable
//     bands are the lowest), never one of a band above the arriving
//     request's. A shed request gets 503 with Retry-After (the queue's
//     recent release rate, see retryAfter) and an OpenAI-style error.
//   - Below saturation with an empty queue (the fast path) a request only
//     counts itself in its tenant's load.

// Headers of admission control.
const (
	headerPriority   = "X-Switchyard-Priority"
	headerFairnessID = "X-Switchyard-Fairness-Id"
)

// Limits of the headers' values.
const (
	maxPriority = 1000
	// fairnessIDRE is what x-switchyard-fairness-id may be: short and
	// plain, as it is shared with other replicas and shown on the status
	// page.
	maxFairnessIDLen = 64
)

var fairnessIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$`)

// Shed reasons: the label values of switchyard_frontend_shed_total.
const (
	shedQueueFull = "queue_full"
	shedTimeout   = "timeout"
)

// ErrShed is a request admission control dropped (503 with Retry-After):
// the fleet is full.
var ErrShed = errors.New("the fleet is saturated")

// shedError is a request shed for reason; retry is the Retry-After.
type shedError struct {
	reason string
	band   int32
	retry  time.Duration
}

func (e *shedError) Error() string {
	switch e.reason {
	case shedTimeout:
		return fmt.Sprintf("%v: the request waited in the queue (priority %d) past its time limit; retry in %s", ErrShed, e.band, e.retryAfter()+"s")
	default:
		return fmt.Sprintf("%v: the queue of priority %d and below is full; retry in %s", ErrShed, e.band, e.retryAfter()+"s")
	}
}

func (e *shedError) Unwrap() error { return ErrShed }

// retryAfter is the Retry-After value: whole seconds, at least 1.
func (e *shedError) retryAfter() string {
	return strconv.FormatInt(max(1, int64(math.Ceil(e.retry.Seconds()))), 10)
}

// AdmissionConfig configures admission control.
type AdmissionConfig struct {
	// Off turns admission control off (--admission=false): every request
	// goes to the engines whatever the fleet's saturation.
	Off bool
	// QueueTimeout is --queue-timeout: how long a request may wait; zero
	// is DefaultQueueTimeout.
	QueueTimeout time.Duration
	// QueueMaxRequests and QueueMaxBytes bound each band's queue
	// (--queue-max-requests, --queue-max-bytes); zero is the default.
	QueueMaxRequests int
	QueueMaxBytes    int64
}

// Defaults of AdmissionConfig.
const (
	DefaultQueueTimeout     = 30 * time.Second
	DefaultQueueMaxRequests = 1024
	DefaultQueueMaxBytes    = 64 << 20
)

// RegisterFlags adds the admission flags.
func (c *AdmissionConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("admission", "queue requests in the frontend while the router says the fleet is saturated (default true; false: send every request on)", func(s string) error {
		on, err := strconv.ParseBool(s)
		c.Off = !on
		return err
	})
	fs.DurationVar(&c.QueueTimeout, "queue-timeout", DefaultQueueTimeout, "how long a request may wait in the admission queue before it is shed (503)")
	fs.IntVar(&c.QueueMaxRequests, "queue-max-requests", DefaultQueueMaxRequests, "requests each priority band's queue holds per model; past it the oldest of the lowest band is shed (503)")
	fs.Int64Var(&c.QueueMaxBytes, "queue-max-bytes", DefaultQueueMaxBytes, "bytes (bodies and prompts) each priority band's queue holds per model; past it the oldest of the lowest band is shed (503)")
}

// Validate checks the settings.
func (c AdmissionConfig) Validate() error {
	switch {
	case c.QueueTimeout < 0:
		return fmt.Errorf("--queue-timeout %v must not be negative", c.QueueTimeout)
	case c.QueueMaxRequests < 0:
		return fmt.Errorf("--queue-max-requests %d must not be negative", c.QueueMaxRequests)
	case c.QueueMaxBytes < 0:
		return fmt.Errorf("--queue-max-bytes %d must not be negative", c.QueueMaxBytes)
	}
	return nil
}

func (c AdmissionConfig) timeout() time.Duration {
	if c.QueueTimeout == 0 {
		return DefaultQueueTimeout
	}
	return c.QueueTimeout
}

func (c AdmissionConfig) maxRequests() int {
	if c.QueueMaxRequests == 0 {
		return DefaultQueueMaxRequests
	}
	return c.QueueMaxRequests
}

func (c AdmissionConfig) maxBytes() int64 {
	if c.QueueMaxBytes == 0 {
		return DefaultQueueMaxBytes
	}
	return c.QueueMaxBytes
}

// parsePriority parses x-switchyard-priority: an integer within
// ±maxPriority.
func parsePriority(v string) (int32, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n < -maxPriority || n > maxPriority {
		return 0, fmt.Errorf("%w: %s must be an integer from %d to %d", ErrInvalidRequest, strings.ToLower(headerPriority), -maxPriority, maxPriority)
	}
	return int32(n), nil
}

// admissionOf reads a request's band and tenant: x-switchyard-priority or
// the key's default, and the key's name with x-switchyard-fairness-id.
// A key's tenants are its own: a fairness id sorts a key's users among
// themselves, never outside it.
func admissionOf(h http.Header, k *apiKey) (prio int32, tenant string, err error) {
	if k != nil {
		prio, tenant = k.priority, k.name
	}
	// An empty header is no header.
	if v := h.Values(headerPriority); len(v) > 0 && (len(v) > 1 || v[0] != "") {
		if len(v) > 1 {
			return 0, "", fmt.Errorf("%w: one %s header at most", ErrInvalidRequest, strings.ToLower(headerPriority))
		}
		if prio, err = parsePriority(v[0]); err != nil {
			return 0, "", err
		}
	}
	if v := h.Values(headerFairnessID); len(v) > 0 && (len(v) > 1 || v[0] != "") {
		if len(v) > 1 || !fairnessIDRE.MatchString(v[0]) {
			return 0, "", fmt.Errorf("%w: %s must be one value of 1 to %d letters, digits, '_', '.', ':', '@' or '-'", ErrInvalidRequest,
				strings.ToLower(headerFairnessID), maxFairnessIDLen)
		}
		if tenant != "" {
			tenant += "/" + v[0]
		} else {
			tenant = v[0]
		}
	}
	return prio, tenant, nil
}

// admission is the frontend's admission control: a queue per model.
type admission struct {
	cfg     AdmissionConfig
	metrics *admissionMetrics
	now     func() time.Time

	mu     sync.Mutex
	models map[string]*modelQueue
	// peers is what the other frontend replicas last said of their
	// tenants (admissionpeers.go); nil without them.
	peers *peerTable
	// changed wakes the publisher of this replica's state (nil: none).
	changed chan struct{}
	// published is what this replica last published of its tenants'
	// queued requests, by (model, tenant) and band: what the others hold
	// of it (see peerTable.queuedBelowLocked).
	published map[peerKey]map[int32]uint32
}

// modelQueue is one model's admission state.
type modelQueue struct {
	name string
	// saturated and room are the router's last word: a route decision or
	// the watch; room 0 while not saturated is a room not counted.
	saturated bool
	room      int
	// capacity is the room the watch last counted for the fleet with no
	// prompt queued (0: not counted), which bounds the rooms kept
	// (keptRooms).
	capacity int
	// pending counts the requests admitted (by the fast path or released)
	// whose first route decision has not come back; pendingQueued those of
	// them that were released from the queue.
	pending, pendingQueued int
	// seen is when each tenant last sent a request of the model (here, or
	// at another replica as it said), in which band, and how fast: the
	// tenants expected, which the last rooms are kept for (keptLocked).
	seen map[string]seenTenant
	// roomyAt is when the router last counted room for two requests or
	// more: a fleet that has not lately had room for two keeps no room
	// back (keptLocked).
	roomyAt time.Time
	// released are the times of the last releases, for Retry-After.
	released releaseTimes
	queued   int
	bytes    int64
	// inflight counts the model's requests admitted here and not done.
	inflight int
	// bands by priority, highest first.
	bands []*band
	// load is each tenant's requests here, over all bands.
	load map[string]*tenantLoad
}

// seenTenant is a tenant's last request of a model: when (here, or at
// another replica as it said), and its band; its requests here lately (for
// its rate, requestRate); and the service it had here lately (see
// serveLocked).
type seenTenant struct {
	at   time.Time
	prio int32
	// localAt is its last request here (zero: none, it is known from
	// another replica); gaps and gapTime are the gaps between its requests
	// here, each weighed e^(-age/serviceLife) by the time since it ended,
	// as of localAt: their weighted count, and their weighted time in
	// seconds.
	localAt       time.Time
	gaps, gapTime float64
	// served is the tokens of its requests let go here, aged to servedAt
	// (see aged).
	served   float64
	servedAt time.Time
}

// serviceLife is how fast a tenant's service ages: a request's tokens
// count e^(-age/serviceLife) of themselves. It is the queue's recent past,
// the window a tenant counts as active in: a tenant's service is then
// about its rate of tokens over that window, and fairness between
// backlogs is over the same past as the activity that makes them compete.
const serviceLife = activeWindow

// aged is v, a service as of from, aged to now.
func aged(v float64, from, now time.Time) float64 {
	if v == 0 || !now.After(from) {
		return v
	}
	return v * math.Exp(-now.Sub(from).Seconds()/serviceLife.Seconds())
}

// activeWindow is the longest a tenant counts as active after its last
// request: the queue's recent past, the window its Retry-After rate reads
// too. Within it a tenant is expected (its next request likely to come,
// the last rooms kept for it) for as long as its own rate says
// (expectFor), the whole window while its rate is not known.
const activeWindow = releaseWindow

// expectQuantile is the share of a steady tenant's gaps between requests
// that end while it is still expected: a tenant silent for longer is taken
// to have stopped, and its next request, if it comes, may wait for a room.
// One gap in a hundred is a tenth of the share the objective's quantile
// (keptQuantile) lets past.
const expectQuantile = 0.99

// expectPrior is the time added to a tenant's gaps when its rate is
// estimated (requestRate): activeWindow over ln(1/(1-expectQuantile)), the
// mean gap of a tenant expected for the whole window. A few gaps then give
// a rate below their own (a longer wait), many gaps their own.
var expectPrior = activeWindow.Seconds() / math.Log(1/(1-expectQuantile))

// expectFor is how long after a tenant's last request its next request
// is expected, for a tenant sending rate requests a second over every
// replica (0: not known): for arrivals at that rate (Poisson), a gap
// outlasts t with probability e^(-rate t), so until the t where that is
// 1-expectQuantile, and never past activeWindow. See expected.md.
func expectFor(rate float64) time.Duration {
	if !(rate > 0) {
		return activeWindow
	}
	t := math.Log(1/(1-expectQuantile)) / rate
	if t >= activeWindow.Seconds() {
		return activeWindow
	}
	return time.Duration(t * float64(time.Second))
}

// addGap is a tenant's gaps and gapTime (seenTenant) with its request at
// at after the one at last (zero: none) counted: the older gaps aged by
// the new one, the new one weighing 1. A request more than activeWindow
// after the last starts afresh: the silence before it says the tenant had
// stopped, not how fast it sends.
func addGap(gaps, gapTime float64, last, at time.Time) (float64, float64) {
	if last.IsZero() {
		return 0, 0
	}
	g := max(at.Sub(last), 0)
	if g > activeWindow {
		return 0, 0
	}
	d := math.Exp(-g.Seconds() / serviceLife.Seconds())
	return gaps*d + 1, gapTime*d + g.Seconds()
}

// requestRate is the request rate (per second) that gaps over gapTime
// say, with expectPrior added to the time (0: no gap).
func requestRate(gaps, gapTime float64) float64 {
	if !(gaps > 0) {
		return 0
	}
	return gaps / (gapTime + expectPrior)
}

// maxSeenTenants bounds a model's seen tenants; past it the ones not
// active any more are dropped, and a new one is not recorded until some
// are.
const maxSeenTenants = 4096

// tenantLoad is one tenant's requests at this replica for one model.
type tenantLoad struct {
	inflightTokens   uint64
	inflight, queued uint32
	// pending counts its requests let go whose first route decision has
	// not come back (ticket.pending); prefilling its requests let go
	// that have no first token yet (ticket.prefilled): prompts routed or
	// about to be, queued or in prefill in an engine.
	pending, prefilling uint32
	// prio is the band of its last request; queuedBy its queued requests
	// by band.
	prio     int32
	queuedBy map[int32]uint32
}

// band is one priority band of a model queue.
type band struct {
	prio    int32
	n       int
	bytes   int64
	tenants map[string]*fifo
}

// fifo is one tenant's waiters in a band, oldest first; settled waiters
// are skipped and compacted away.
type fifo struct {
	ws   []*waiter
	head int
	dead int
}

// waiter is a queued request.
type waiter struct {
	mq     *modelQueue
	b      *band
	tenant string
	tokens uint64
	bytes  int64
	at     time.Time
	// done receives nil when the request is released, a *shedError when
	// it is shed; settled is set (under admission.mu) when either was
	// sent or the request left.
	done    chan error
	settled bool
	// ticket is the request's, once released.
	ticket *ticket
}

// ticket is an admitted request: done gives its place back.
type ticket struct {
	a      *admission
	mq     *modelQueue
	tenant string
	tokens uint64
	prio   int32
	once   sync.Once
	// w is its waiter when it was queued (nil: admitted at once).
	w *waiter
	// pending says its first route decision has not come back;
	// prefilled that its first token came or it ended (both under
	// admission.mu).
	pending, prefilled bool
	// backlog says it was released from a backlog of its tenant while a
	// tenant it crowds was active; withinLimit that it was released, not
	// one of a backlog, while others' requests stayed queued: it takes
	// room held back from them (both set before its release).
	backlog, withinLimit bool
}

// ticketKey is the context key of a request's ticket: its route decisions
// name it to the queue (decided).
type ticketKey struct{}

// withTicket is ctx carrying t, so that the route decisions made under it
// are known to be t's.
func withTicket(ctx context.Context, t *ticket) context.Context {
	if t == nil || t.a.cfg.Off {
		return ctx
	}
	return context.WithValue(ctx, ticketKey{}, t)
}

func newAdmission(cfg AdmissionConfig, m *admissionMetrics) *admission {
	return &admission{cfg: cfg, metrics: m, now: time.Now, models: map[string]*modelQueue{}}
}

// modelLocked is model's queue, made at first use.
func (a *admission) modelLocked(model string) *modelQueue {
	mq := a.models[model]
	if mq == nil {
		mq = &modelQueue{name: model, load: map[string]*tenantLoad{}, seen: map[string]seenTenant{}}
		a.models[model] = mq
	}
	return mq
}

func (mq *modelQueue) tenantLocked(tenant string) *tenantLoad {
	tl := mq.load[tenant]
	if tl == nil {
		tl = &tenantLoad{queuedBy: map[int32]uint32{}}
		mq.load[tenant] = tl
	}
	return tl
}

// bandLocked is the band of prio, made at first use.
func (mq *modelQueue) bandLocked(prio int32) *band {
	i, found := slices.BinarySearchFunc(mq.bands, prio, func(b *band, p int32) int { return int(p) - int(b.prio) })
	if found {
		return mq.bands[i]
	}
	b := &band{prio: prio, tenants: map[string]*fifo{}}
	mq.bands = slices.Insert(mq.bands, i, b)
	return b
}

// admit waits until a request may go to the engines: at once while the
// model is not saturated and nothing waits before it, otherwise when it is
// released. It returns a *shedError when the request is shed, ctx's error
// when the client left while queued. The ticket's done must be called
// once the request ends.
func (a *admission) admit(ctx context.Context, model, tenant string, prio int32, tokens uint64, bytes int64) (*ticket, error) {
	t := &ticket{a: a, tenant: tenant, tokens: tokens, prio: prio}
	a.mu.Lock()
	mq := a.modelLocked(model)
	t.mq = mq
	tl := mq.tenantLocked(tenant)
	tl.prio = prio
	if a.cfg.Off {
		a.countInflightLocked(mq, tl, t)
		a.mu.Unlock()
		return t, nil
	}
	a.arriveLocked(mq, tenant, prio, a.now())
	// The fast path: nothing waits and the router's last word has room
	// for this request, less what went on since (see freeLocked and
	// mayTakeLocked).
	if mq.queued == 0 && a.mayTakeLocked(mq, tenant, prio) {
		a.countInflightLocked(mq, tl, t)
		a.pendLocked(t)
		a.mu.Unlock()
		a.touch()
		return t, nil
	}
	w := &waiter{mq: mq, tenant: tenant, tokens: tokens, bytes: bytes, at: a.now(), done: make(chan error, 1), ticket: t}
	t.w = w
	if err := a.enqueueLocked(mq, w, prio); err != nil {
		a.forgetLocked(mq, tenant)
		a.mu.Unlock()
		a.metrics.shed.WithLabelValues(shedQueueFull).Inc()
		return nil, err
	}
	a.pumpLocked(mq)
	a.mu.Unlock()
	a.touch()

	timer := time.NewTimer(a.cfg.timeout())
	defer timer.Stop()
	var err error
	select {
	case err = <-w.done:
	case <-ctx.Done():
		if !a.leave(w) {
			// Released as the client left: it was counted in flight.
			err = <-w.done
			if err == nil {
				t.done()
			}
		}
		return nil, ctx.Err()
	case <-timer.C:
		se := &shedError{reason: shedTimeout, band: prio}
		if !a.leaveShed(w, se) {
			err = <-w.done
			break
		}
		a.metrics.shed.WithLabelValues(shedTimeout).Inc()
		return nil, se
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Retry-After: a shed request is told how long the queue takes, at the
// rate it has been releasing requests lately, to release as many as are
// queued now in its band and above (what a request of its band arriving
// now would wait behind), clamped to [minRetryAfter, the queue timeout]:
// at least a second (the header's unit), at most what a queued request
// would wait before being shed anyway. A queue that released nothing
// within the window (the fleet is not moving, or it just saturated) says
// the most.
const (
	minRetryAfter = time.Second
	// releaseWindow is how far back releases count in the rate.
	releaseWindow = 30 * time.Second
	// releaseMemory is how many release times a model keeps: the rate of
	// the last releaseMemory releases within releaseWindow.
	releaseMemory = 32
)

// releaseTimes are a model's last releases from its queue, a ring.
type releaseTimes struct {
	at   [releaseMemory]time.Time
	next int
	n    int
}

// add records a release at now.
func (r *releaseTimes) add(now time.Time) {
	r.at[r.next] = now
	r.next = (r.next + 1) % releaseMemory
	r.n = min(r.n+1, releaseMemory)
}

// rate is releases per second over those within releaseWindow of now:
// the intervals between them over the time from the oldest to now (so a
// queue that stopped releasing slows down), one release alone one
// interval; 0 without any.
func (r *releaseTimes) rate(now time.Time) float64 {
	var count int
	var oldest time.Time
	for i := range r.n {
		at := r.at[(r.next-1-i+releaseMemory)%releaseMemory]
		if now.Sub(at) > releaseWindow {
			break
		}
		count, oldest = count+1, at
	}
	if count == 0 {
		return 0
	}
	// A burst released at one instant is a rate over no time: counted
	// over a second at least.
	return float64(max(count-1, 1)) / max(now.Sub(oldest).Seconds(), 1)
}

// retryAfter is the Retry-After of a shed request: ahead requests queued
// at its band and above, released at rate per second, clamped to
// [minRetryAfter, limit]; limit with no rate.
func retryAfter(ahead int, rate float64, limit time.Duration) time.Duration {
	limit = max(limit, minRetryAfter)
	if !(rate > 0) {
		return limit
	}
	d := time.Duration(float64(ahead) / rate * float64(time.Second))
	return min(max(d, minRetryAfter), limit)
}

// retryAfterLocked is retryAfter of a request of band prio shed from mq
// now.
func (a *admission) retryAfterLocked(mq *modelQueue, prio int32) time.Duration {
	ahead := 0
	for _, b := range mq.bands {
		if b.prio < prio {
			break
		}
		ahead += b.n
	}
	return retryAfter(ahead, mq.released.rate(a.now()), a.cfg.timeout())
}

// countInflightLocked counts an admitted request of mq in its tenant's
// load and service.
func (a *admission) countInflightLocked(mq *modelQueue, tl *tenantLoad, t *ticket) {
	mq.inflight++
	tl.inflight++
	tl.prefilling++
	tl.inflightTokens += t.tokens
	a.serveLocked(mq, t.tenant, t.tokens)
}

// serveLocked counts tokens let go to the engines in tenant's service
// (seen: a tenant not recorded there, past maxSeenTenants, has none).
func (a *admission) serveLocked(mq *modelQueue, tenant string, tokens uint64) {
	s, ok := mq.seen[tenant]
	if !ok {
		return
	}
	now := a.now()
	s.served, s.servedAt = aged(s.served, s.servedAt, now)+float64(tokens), now
	mq.seen[tenant] = s
}

// servedLocked is tenant's service here, aged to now.
func (a *admission) servedLocked(mq *modelQueue, tenant string, now time.Time) float64 {
	s := mq.seen[tenant]
	return aged(s.served, s.servedAt, now)
}

// enqueueLocked queues w in band prio, shedding to stay within the
// limits: a band over its own limits sheds one of its requests; the
// model's queue over totalFactor times them sheds one of its lowest band
// (sheddable bands are the lowest), or w itself when that band is above
// w's. Within the band, the one shed is the oldest of the tenant queueing
// the most there (victimLocked): a tenant flooding a band sheds its own
// requests, not those of the tenants it crowds out.
func (a *admission) enqueueLocked(mq *modelQueue, w *waiter, prio int32) error {
	maxN, maxB := a.cfg.maxRequests(), a.cfg.maxBytes()
	if w.bytes > maxB {
		return &shedError{reason: shedQueueFull, band: prio, retry: a.retryAfterLocked(mq, prio)}
	}
	b := mq.bandLocked(prio)
	for b.n+1 > maxN || b.bytes+w.bytes > maxB {
		v := a.victimLocked(mq, b, b, w)
		if v == nil {
			return &shedError{reason: shedQueueFull, band: prio, retry: a.retryAfterLocked(mq, prio)}
		}
		a.shedLocked(v)
	}
	for mq.queued+1 > totalFactor*maxN || mq.bytes+w.bytes > totalFactor*maxB {
		low := mq.lowestLocked()
		var v *waiter
		if low.prio <= prio {
			v = a.victimLocked(mq, low, b, w)
		}
		if v == nil {
			return &shedError{reason: shedQueueFull, band: prio, retry: a.retryAfterLocked(mq, prio)}
		}
		a.shedLocked(v)
	}
	w.b = b
	f := b.tenants[w.tenant]
	if f == nil {
		f = &fifo{}
		b.tenants[w.tenant] = f
	}
	f.ws = append(f.ws, w)
	b.n++
	b.bytes += w.bytes
	mq.queued++
	mq.bytes += w.bytes
	tl := mq.tenantLocked(w.tenant)
	tl.queued++
	tl.queuedBy[prio]++
	a.metrics.depth(prio).Inc()
	return nil
}

// totalFactor bounds a model's whole queue: totalFactor times a band's
// limits, so that traffic spread over many bands stays bounded too.
const totalFactor = 4

// shedLocked sheds a queued request to make room.
func (a *admission) shedLocked(w *waiter) {
	a.settleLocked(w, &shedError{reason: shedQueueFull, band: w.b.prio, retry: a.retryAfterLocked(w.mq, w.b.prio)})
	a.metrics.shed.WithLabelValues(shedQueueFull).Inc()
}

// lowestLocked is the lowest band holding a request, or nil.
func (mq *modelQueue) lowestLocked() *band {
	for i := len(mq.bands) - 1; i >= 0; i-- {
		if mq.bands[i].n > 0 {
			return mq.bands[i]
		}
	}
	return nil
}

// victimLocked is the request to shed from band b to make room for w,
// which is not queued yet and goes to band wb: the oldest of the tenant
// with the most requests queued in b, w counted in its tenant's when b is
// wb; ties go to the tenant with more tokens in flight over every replica,
// then to the older head. Nil when that tenant is w's with nothing queued
// in b: w itself is shed.
func (a *admission) victimLocked(mq *modelQueue, b, wb *band, w *waiter) *waiter {
	var victim *waiter
	var vn int
	var vload uint64
	consider := func(tenant string, head *waiter, n int) {
		if n == 0 {
			return
		}
		load := a.inflightFleetLocked(mq, tenant)
		better := n > vn
		if n == vn {
			// w (no head) is the newest of all.
			better = load > vload || load == vload && head != nil && (victim == nil || head.at.Before(victim.at))
		}
		if better {
			victim, vn, vload = head, n, load
		}
	}
	if _, queued := b.tenants[w.tenant]; !queued && b == wb {
		consider(w.tenant, nil, 1)
	}
	for tenant, f := range b.tenants {
		n := f.live()
		if tenant == w.tenant && b == wb {
			n++
		}
		consider(tenant, f.peek(), n)
	}
	return victim
}

// live counts f's waiters not settled.
func (f *fifo) live() int { return len(f.ws) - f.head - f.dead }

// peek is f's oldest live waiter, dropping settled ones before it.
func (f *fifo) peek() *waiter {
	for f.head < len(f.ws) {
		if w := f.ws[f.head]; !w.settled {
			return w
		}
		f.ws[f.head] = nil
		f.head++
		f.dead--
	}
	return nil
}

// compact drops settled waiters once they are half of f.
func (f *fifo) compact() {
	if f.dead*2 < len(f.ws)-f.head || f.dead < 8 {
		return
	}
	live := f.ws[:0]
	for _, w := range f.ws[f.head:] {
		if !w.settled {
			live = append(live, w)
		}
	}
	clear(f.ws[len(live):])
	f.ws, f.head, f.dead = live, 0, 0
}

// settleLocked takes w out of the queue with result err (nil: released).
func (a *admission) settleLocked(w *waiter, err error) {
	w.settled = true
	b, mq := w.b, w.mq
	b.n--
	b.bytes -= w.bytes
	mq.queued--
	mq.bytes -= w.bytes
	tl := mq.tenantLocked(w.tenant)
	tl.queued--
	if tl.queuedBy[b.prio]--; tl.queuedBy[b.prio] == 0 {
		delete(tl.queuedBy, b.prio)
	}
	a.metrics.depth(b.prio).Dec()
	if err == nil {
		mq.released.add(a.now())
	}
	if f := b.tenants[w.tenant]; f != nil {
		f.dead++
		f.peek()
		f.compact()
		if f.head == len(f.ws) {
			delete(b.tenants, w.tenant)
		}
	}
	a.forgetLocked(mq, w.tenant)
	w.done <- err
}

// leave takes w out of the queue unless it was settled already (then it
// reports false and w.done holds the result).
func (a *admission) leave(w *waiter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.settled {
		return false
	}
	a.settleLocked(w, errLeft)
	<-w.done // nobody reads it: the client left
	a.touchLocked()
	return true
}

// errLeft settles the waiter of a client that left.
var errLeft = errors.New("the client left the queue")

// leaveShed sheds w, past its time limit, unless it was settled already
// (then it reports false and w.done holds the result); se gets its
// Retry-After.
func (a *admission) leaveShed(w *waiter, se *shedError) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.settled {
		return false
	}
	se.retry = a.retryAfterLocked(w.mq, w.b.prio)
	a.settleLocked(w, se)
	a.touchLocked()
	return true
}

// freeLocked is how many more requests may go on the router's last word:
// none while saturated; its room less the requests pending (let go and
// not decided yet, so not in the picture the word was of), here and at
// the other replicas as they last said (every replica hears the same
// word of room, and a request another let go takes it as one let go
// here does); without a counted room, one request released from the
// queue at a time. The most the router counts (core.MaxRoom) says plenty:
// no bound.
func (a *admission) freeLocked(mq *modelQueue) int {
	free := mq.freeLocked()
	if a.peers == nil || free <= 0 || free == math.MaxInt || mq.room <= 0 {
		return free
	}
	return free - int(a.peers.pendingLocked(mq.name, a.now()))
}

// freeLocked is admission.freeLocked without the other replicas'.
func (mq *modelQueue) freeLocked() int {
	switch {
	case mq.saturated:
		return 0
	case mq.room >= core.MaxRoom:
		return math.MaxInt
	case mq.room <= 0:
		if mq.pendingQueued > 0 {
			return 0
		}
		return math.MaxInt
	}
	return mq.room - mq.pending
}

// mayTakeLocked says whether a request of tenant in band prio may go on
// the router's last word: there is room for it, more than the rooms kept
// from it (keptLocked).
func (a *admission) mayTakeLocked(mq *modelQueue, tenant string, prio int32) bool {
	free := a.freeLocked(mq)
	return free > 0 && (free == math.MaxInt || free > a.keptLocked(mq, tenant, prio))
}

// keptLocked is how many of the rooms the router counts are kept from
// tenant's request of band prio (0: none): when the fleet had room for
// two lately, the tenant has more requests queued here behind it (it
// sends faster than it is served: a flood), and other tenants expected
// (expectedLocked) have a better claim to the room (crowdsLocked),
// keptRooms of their share of the fleet's service lately. A flood is then
// held that many typical requests short of the threshold, where the
// others find room at once; a tenant without a backlog is never held for
// one that may come.
func (a *admission) keptLocked(mq *modelQueue, tenant string, prio int32) int {
	if tl := mq.load[tenant]; tl == nil || tl.queued < 2 {
		return 0
	}
	now := a.now()
	// A fleet whose whole room is one request (one small worker, a tight
	// budget) would serve nothing of the flood while keeping it.
	if mq.roomyAt.IsZero() || now.Sub(mq.roomyAt) > activeWindow {
		return 0
	}
	crowded, all, any := a.claimsLocked(mq, tenant, prio, now)
	if !any {
		return 0
	}
	return keptRooms(crowded/all, mq.capacity)
}

// keptQuantile is the share of a crowded tenant's requests that should
// find a kept room on arrival: the TTFT objective's quantile (the goals
// are on the p90).
const keptQuantile = 0.9

// keptRooms is how many rooms to keep from a flood for the tenants it
// crowds, whose requests are a share rho of the fleet's (its throughput,
// which admission lets go at while saturated), on a fleet with room for
// capacity typical requests with no prompt queued (0: not known).
//
// A crowded tenant's request takes a kept room on arrival; while fewer
// than k are free the flood is held, so every slot the fleet opens, at
// its throughput mu, refills them. The rooms short of k are then the
// queue of an M/M/1 server with arrivals lambda (the crowded tenants'
// rate) and service mu, and a request finds none free, and waits for the
// next slot, when k are short: with probability rho^k, rho = lambda/mu
// (the slots a fleet opens are more regular than Poisson, so rho^k bounds
// it). For keptQuantile q of them to find one, k = ceil(ln(1-q)/ln rho),
// at least 1 (a tenant just seen has no share yet). At most capacity less
// one, so that the flood keeps a room of its own to be served on: past
// it the flood would run only on the crowded tenants' gaps, on a
// fleet held idle for them. Without a known capacity, 1.
func keptRooms(rho float64, capacity int) int {
	most := max(capacity-1, 1)
	switch {
	case !(rho > 0):
		return 1
	case rho >= 1:
		return most
	}
	// The ratio of two logarithms is off by a rounding where rho^k is
	// 1-q exactly (rho 0.1: k 1).
	k := math.Ceil(math.Log(1-keptQuantile)/math.Log(rho) - 1e-9)
	return int(min(max(k, 1), float64(most)))
}

// claimsLocked is the service lately (attainedLocked) of the tenants
// expected (expectedLocked) with a better claim to the fleet's room than
// tenant's backlog in band prio (crowdsLocked), of every tenant's seen,
// and whether there is one such tenant.
func (a *admission) claimsLocked(mq *modelQueue, tenant string, prio int32, now time.Time) (crowded, all float64, any bool) {
	load := a.attainedLocked(mq, tenant, now)
	for other, s := range mq.seen {
		served := load
		if other != tenant {
			served = a.attainedLocked(mq, other, now)
		}
		all += served
		if other == tenant || !a.expectedLocked(mq, other, s, now) {
			continue
		}
		if s.prio > prio || s.prio == prio && (!a.backlogLocked(mq, other) || served < load) {
			crowded += served
			any = true
		}
	}
	return crowded, all, any
}

// crowdsLocked says whether another tenant expected (expectedLocked) has
// a better claim to the fleet's room than tenant's request of band prio
// (tenant's backlog): it is in a higher band, or in the same band with no
// backlog of its own over every replica, or served less lately there
// (attainedLocked). A tenant without a backlog is served as fast as it sends: its
// demand is below its fair share, whatever it holds in flight at a given
// moment (a light tenant's few requests in flight may outnumber a flood's
// that the queue holds to the fleet's room), and a request of it should
// find room on arrival. Between two backlogs, the one served less lately
// is the one below its share (a light tenant's burst, while it is in
// flight, may hold more of the engines than the flood does).
func (a *admission) crowdsLocked(mq *modelQueue, tenant string, prio int32) bool {
	_, _, any := a.claimsLocked(mq, tenant, prio, a.now())
	return any
}

// backlogLocked says whether tenant has a backlog of the model: two
// requests or more queued, here and at the other replicas together.
func (a *admission) backlogLocked(mq *modelQueue, tenant string) bool {
	var n uint32
	if tl := mq.load[tenant]; tl != nil {
		n = tl.queued
	}
	if a.peers != nil {
		n += a.peers.queuedLocked(mq.name, tenant, a.now())
	}
	return n >= 2
}

// expectedLocked says whether tenant, last seen as s, is expected at now:
// its next request is likely to come (expectFor of its rate over every
// replica).
func (a *admission) expectedLocked(mq *modelQueue, tenant string, s seenTenant, now time.Time) bool {
	since := now.Sub(s.at)
	if since > activeWindow {
		return false
	}
	rate := requestRate(s.gaps, s.gapTime)
	if a.peers != nil {
		rate += a.peers.rateLocked(mq.name, tenant, now)
	}
	return since <= expectFor(rate)
}

// arriveLocked records a request of tenant in band prio arriving here at
// at: seen, and counted in its rate.
func (a *admission) arriveLocked(mq *modelQueue, tenant string, prio int32, at time.Time) {
	a.seeLocked(mq, tenant, prio, at)
	s, ok := mq.seen[tenant]
	if !ok || at.Before(s.localAt) {
		return
	}
	s.gaps, s.gapTime = addGap(s.gaps, s.gapTime, s.localAt, at)
	s.localAt = at
	mq.seen[tenant] = s
}

// seeLocked records that tenant sent a request of band prio at at.
func (a *admission) seeLocked(mq *modelQueue, tenant string, prio int32, at time.Time) {
	if s, ok := mq.seen[tenant]; ok {
		if at.After(s.at) {
			s.at, s.prio = at, prio
			mq.seen[tenant] = s
		}
		return
	}
	if len(mq.seen) >= maxSeenTenants {
		for t, s := range mq.seen {
			if at.Sub(s.at) > activeWindow {
				delete(mq.seen, t)
			}
		}
		if len(mq.seen) >= maxSeenTenants {
			return
		}
	}
	mq.seen[tenant] = seenTenant{at: at, prio: prio}
}

// pendLocked counts t as pending: admitted, its first route decision not
// back yet.
func (a *admission) pendLocked(t *ticket) {
	t.pending = true
	t.mq.pending++
	if tl := t.mq.load[t.tenant]; tl != nil {
		tl.pending++
	}
	if t.w != nil {
		t.mq.pendingQueued++
	}
}

// unpendLocked takes t out of the pending count, once.
func (a *admission) unpendLocked(t *ticket) {
	if !t.pending {
		return
	}
	t.pending = false
	t.mq.pending--
	if tl := t.mq.load[t.tenant]; tl != nil && tl.pending > 0 {
		tl.pending--
	}
	// The other replicas count it off the room they heard of until they
	// hear it is decided (see freeLocked).
	a.touchLocked()
	if t.w != nil {
		t.mq.pendingQueued--
	}
}

// pumpLocked releases what the model's state allows: as many requests as
// the router's last word has room for (freeLocked, mayTakeLocked); one as
// a probe when nothing of the model is in flight or pending here.
func (a *admission) pumpLocked(mq *modelQueue) {
	for mq.queued > 0 {
		// With nothing of the model in flight here, no decision of this
		// replica's will say when there is room again: one request goes
		// as a probe, and its decision says whether there is (the
		// router's word may be of a request unlike the queued ones, or
		// stale). The probe goes whatever the other replicas queue:
		// nothing else tells this replica when there is room, and their
		// state may be stale.
		free := a.freeLocked(mq)
		probe := free <= 0 && mq.inflight == 0 && mq.pending == 0
		if free <= 0 && !probe {
			return
		}
		w := a.nextLocked(mq, !probe)
		if w == nil {
			return // held back for a tenant queued at another replica
		}
		if probe && a.keptLocked(mq, w.tenant, w.b.prio) > 0 {
			// A flood's probe would take the room kept for the tenant it
			// crowds, or go past the threshold: the router's watch says
			// when a head's progress or an end makes room, and a broken
			// watch takes the fleet for unsaturated.
			return
		}
		if kept := a.keptLocked(mq, w.tenant, w.b.prio); !probe && (free <= kept || a.floodHeldLocked(mq, w.tenant, kept)) {
			// The last rooms are kept from w's backlog for tenants with a
			// better claim. A tenant queued here without a backlog of
			// its own (one request: it came while the flood was queued,
			// and would have taken the room at once with nothing queued)
			// is what the room is kept for, whatever it holds in flight
			// now: it takes it, rather than wait behind the backlog held
			// for a request yet to come.
			if w = a.nextUnbackloggedLocked(mq, w.b); w == nil {
				return
			}
		}
		a.metrics.wait.Observe(a.now().Sub(w.at).Seconds())
		// One of a backlog, while a tenant it crowds is expected: the
		// router places it where it leaves the earliest slots to the
		// others (RouteRequest.backlog), so that the room kept for them
		// is an early one, not the last to open.
		if tl := mq.load[w.tenant]; tl != nil && tl.queued >= 2 {
			w.ticket.backlog = a.crowdsLocked(mq, w.tenant, w.b.prio)
		} else if tl != nil && mq.queued > int(tl.queued) {
			// Not one of a backlog, let go while others' requests stay
			// queued: the room it takes is held back from them, a slot
			// within the router's limits, and the router places it
			// there rather than where its cost alone would
			// (RouteRequest.within_limit).
			w.ticket.withinLimit = true
		}
		// Counted in flight before it leaves the queue, so that its
		// tenant is never forgotten between the two.
		a.countInflightLocked(mq, mq.tenantLocked(w.tenant), w.ticket)
		a.pendLocked(w.ticket)
		a.settleLocked(w, nil)
		// The other replicas count it off the room they heard of.
		a.touchLocked()
	}
}

// nextLocked picks the request to release: from the highest band holding
// one, the head of the tenant served least lately over every replica
// (attainedLocked; ties: the oldest head). A tenant is held back when
// another, queued at another replica in this band or above, was served
// less, or
// as much and that replica's turn (queuedBelowLocked), when holdBack: that
// replica releases it on the same word of room, and two releases for one
// room would put one past the threshold.
func (a *admission) nextLocked(mq *modelQueue, holdBack bool) *waiter {
	now := a.now()
	var b *band
	for _, x := range mq.bands {
		if x.n > 0 {
			b = x
			break
		}
	}
	if b == nil {
		return nil
	}
	var best *waiter
	var bestLoad float64
	for tenant, f := range b.tenants {
		w := f.peek()
		if w == nil {
			continue
		}
		load := a.attainedLocked(mq, tenant, now)
		if best == nil || load < bestLoad || (load == bestLoad && w.at.Before(best.at)) {
			best, bestLoad = w, load
		}
	}
	if best != nil && holdBack && a.peers != nil && a.peers.queuedBelowLocked(mq.name, b.prio, bestLoad, a.publishedFromLocked(mq.name, best.tenant, b.prio), a.localAttained(mq, now), now) {
		return nil
	}
	return best
}

// nextUnbackloggedLocked is the head of band b's tenant served least
// lately over every replica (ties: the oldest head) among those
// with a single request queued here, nil when there is none (or it is
// held back for another replica's, as in nextLocked): the request the
// last rooms kept from a backlog go to.
func (a *admission) nextUnbackloggedLocked(mq *modelQueue, b *band) *waiter {
	now := a.now()
	var best *waiter
	var bestLoad float64
	for tenant, f := range b.tenants {
		if f.live() != 1 {
			continue
		}
		if tl := mq.load[tenant]; tl == nil || tl.queued >= 2 {
			continue
		}
		w := f.peek()
		if w == nil {
			continue
		}
		load := a.attainedLocked(mq, tenant, now)
		if best == nil || load < bestLoad || (load == bestLoad && w.at.Before(best.at)) {
			best, bestLoad = w, load
		}
	}
	// Held back, as nextLocked holds back, for a tenant another replica
	// queues with less in flight: that replica releases it on this room.
	if best != nil && a.peers != nil && a.peers.queuedBelowLocked(mq.name, b.prio, bestLoad, a.publishedFromLocked(mq.name, best.tenant, b.prio), a.localAttained(mq, now), now) {
		return nil
	}
	return best
}

// attainedLocked is a tenant's service for the model over every replica
// (servedLocked, and the peers' as they last said), aged to now. The
// tenants a decision compares are aged to one now: ties stay ties.
func (a *admission) attainedLocked(mq *modelQueue, tenant string, now time.Time) float64 {
	n := a.servedLocked(mq, tenant, now)
	if a.peers != nil {
		n += a.peers.servedLocked(mq.name, tenant, now)
	}
	return n
}

// inflightFleetLocked is a tenant's tokens in flight for the model over
// every replica.
func (a *admission) inflightFleetLocked(mq *modelQueue, tenant string) uint64 {
	var n uint64
	if tl := mq.load[tenant]; tl != nil {
		n = tl.inflightTokens
	}
	if a.peers != nil {
		n += a.peers.inflightLocked(mq.name, tenant, a.now())
	}
	return n
}

// localAttained is attainedLocked of mq's tenants, for the peers' table
// to weigh its tenants with this replica's share added.
func (a *admission) localAttained(mq *modelQueue, now time.Time) func(string) float64 {
	return func(tenant string) float64 { return a.servedLocked(mq, tenant, now) }
}

// forgetLocked drops a tenant that has nothing here any more.
func (a *admission) forgetLocked(mq *modelQueue, tenant string) {
	if tl := mq.load[tenant]; tl != nil && tl.inflight == 0 && tl.queued == 0 {
		delete(mq.load, tenant)
	}
}

// done gives an admitted request's place back. Its end releases nothing
// by itself (see the release above), unless it was the probe whose
// decision never came (it failed before it was routed), or it leaves this
// replica with nothing of the model in flight.
func (t *ticket) done() {
	t.once.Do(func() {
		a := t.a
		a.mu.Lock()
		mq := t.mq
		mq.inflight--
		if tl := mq.load[t.tenant]; tl != nil {
			tl.inflight--
			tl.inflightTokens -= t.tokens
		}
		a.prefilledLocked(t)
		a.forgetLocked(mq, t.tenant)
		a.unpendLocked(t)
		a.pumpLocked(mq)
		a.touchLocked()
		a.mu.Unlock()
	})
}

// firstToken records that an admitted request had its first token: its
// prompt is no longer in an engine's prefill queue, which may let a
// flood's next request go (floodHeldLocked).
func (t *ticket) firstToken() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.prefilled {
		return
	}
	a.prefilledLocked(t)
	a.pumpLocked(t.mq)
	a.touchLocked()
}

// prefilledLocked takes t out of its tenant's prefilling count, once.
func (a *admission) prefilledLocked(t *ticket) {
	if t.prefilled {
		return
	}
	t.prefilled = true
	if tl := t.mq.load[t.tenant]; tl != nil && tl.prefilling > 0 {
		tl.prefilling--
	}
}

// firstTokenOf tells the admission queue that the request of ctx
// (withTicket) had its first token.
func firstTokenOf(ctx context.Context) {
	if t, _ := ctx.Value(ticketKey{}).(*ticket); t != nil {
		t.firstToken()
	}
}

// prefillingFleetLocked is how many of tenant's requests of the model
// have no first token yet, over every replica.
func (a *admission) prefillingFleetLocked(mq *modelQueue, tenant string) int {
	var n uint32
	if tl := mq.load[tenant]; tl != nil {
		n = tl.prefilling
	}
	if a.peers != nil {
		n += a.peers.prefillingLocked(mq.name, tenant, a.now())
	}
	return int(n)
}

// floodHeldLocked says whether a request of tenant's backlog in band prio
// is held while kept rooms are kept from it: the flood already has as
// many prompts waiting for their first token, over every replica, as the
// fleet's capacity less the kept rooms. The router counts room at the
// threshold, which a worker prefilling one prompt still has when its
// prompt is near done (room for one more within the threshold, queued
// behind it); a flood let into that room keeps a prompt queued in an
// engine, and a crowded tenant's request arriving next, beside one of its
// own in the kept room (a burst), finds every worker's queue ahead of it
// a prompt longer. Held to its share, the flood's next prompt goes once
// one of its own has its first token: the engines then hold at most one
// flood prompt per room it may use, and the burst's next request waits
// for that prompt's rest only.
func (a *admission) floodHeldLocked(mq *modelQueue, tenant string, kept int) bool {
	if kept <= 0 || mq.capacity <= 0 {
		return false
	}
	return a.prefillingFleetLocked(mq, tenant) >= max(mq.capacity-kept, 1)
}

// decided records a route decision's word for model (saturated, room
// not counted); decidedRoom is the same with the room it counted.
func (a *admission) decided(ctx context.Context, model string, saturated bool) {
	a.decidedRoom(ctx, model, saturated, 0)
}

// decidedRoom records a route decision's saturation and room for model;
// ctx is the request's (withTicket), which stops being pending. The queue
// then releases what the word allows: the released requests' own
// decisions let the next ones go.
func (a *admission) decidedRoom(ctx context.Context, model string, saturated bool, room uint32) {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	a.mu.Lock()
	defer a.mu.Unlock()
	mq := a.models[model]
	if t != nil && t.a == a {
		a.unpendLocked(t)
		// The word is of the request's queue, whatever name the routing
		// gave the model (a LoRA adapter's target is named with it).
		mq = t.mq
	}
	if mq == nil {
		if !bounds(saturated, room) {
			return
		}
		mq = a.modelLocked(model)
	}
	a.setSaturatedLocked(mq, saturated, room)
	a.pumpLocked(mq)
}

// bounds says whether a word of the router's bounds what may go: a
// model the queue has not met yet is made for it, so that the first
// requests are bounded too; a word of plenty, or of a room not counted,
// is what a model without a queue has already.
func bounds(saturated bool, room uint32) bool {
	return saturated || room > 0 && room < core.MaxRoom
}

// setSaturatedLocked records the router's word on mq's fleet.
func (a *admission) setSaturatedLocked(mq *modelQueue, saturated bool, room uint32) {
	if mq.saturated != saturated {
		v := 0.0
		if saturated {
			v = 1
		}
		a.metrics.saturated.WithLabelValues(mq.name).Set(v)
	}
	mq.saturated = saturated
	mq.room = int(min(room, core.MaxRoom))
	if saturated {
		mq.room = 0
	}
	if mq.room >= 2 {
		mq.roomyAt = a.now()
	}
}

// watched records the router's saturation of model (WatchSaturation),
// room not counted; watchedRoom is the same with the room it counted.
func (a *admission) watched(model string, saturated bool) { a.watchedRoom(model, saturated, 0) }

// watchedRoom records the router's saturation and room of model
// (WatchSaturation), capacity not counted.
func (a *admission) watchedRoom(model string, saturated bool, room uint32) {
	a.watchedFleet(model, saturated, room, 0)
}

// watchedFleet records the router's saturation, room and capacity of
// model (WatchSaturation).
func (a *admission) watchedFleet(model string, saturated bool, room, capacity uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	mq := a.models[model]
	if mq == nil {
		if !bounds(saturated, room) {
			return
		}
		mq = a.modelLocked(model)
	}
	mq.capacity = int(min(capacity, core.MaxRoom))
	a.setSaturatedLocked(mq, saturated, room)
	a.pumpLocked(mq)
}

// repump releases what every model allows (the peers' state changed).
func (a *admission) repump() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, mq := range a.models {
		if mq.queued > 0 {
			a.pumpLocked(mq)
		}
	}
}

// touch wakes the publisher of this replica's state.
func (a *admission) touch() {
	if a.changed != nil {
		select {
		case a.changed <- struct{}{}:
		default:
		}
	}
}

func (a *admission) touchLocked() { a.touch() }

// admissionMetrics are admission control's Prometheus metrics.
type admissionMetrics struct {
	queueDepth *prometheus.GaugeVec
	wait       prometheus.Histogram
	shed       *prometheus.CounterVec
	saturated  *prometheus.GaugeVec
	mu         sync.Mutex
	depths     map[int32]prometheus.Gauge
}

func newAdmissionMetrics(reg prometheus.Registerer) *admissionMetrics {
	m := &admissionMetrics{
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_frontend_queue_depth",
			Help: "Requests waiting in the admission queue, by priority band."}, []string{"priority"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "switchyard_frontend_queue_wait_seconds",
			Help:    "How long released requests waited in the admission queue.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_frontend_shed_total",
			Help: "Requests admission control shed (503), by reason: queue_full (a band's limits), timeout (--queue-timeout)."}, []string{"reason"}),
		saturated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_frontend_saturated",
			Help: "1 while the router says the model's fleet is saturated (this frontend queues its requests), 0 otherwise."}, []string{"model"}),
		depths: map[int32]prometheus.Gauge{},
	}
	reg.MustRegister(m.queueDepth, m.wait, m.shed, m.saturated)
	for _, r := range []string{shedQueueFull, shedTimeout} {
		m.shed.WithLabelValues(r)
	}
	return m
}

// depth is the queue depth gauge of a band.
func (m *admissionMetrics) depth(prio int32) prometheus.Gauge {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.depths[prio]
	if g == nil {
		g = m.queueDepth.WithLabelValues(strconv.Itoa(int(prio)))
		m.depths[prio] = g
	}
	return g
}

// StatusQueue is one model's admission queue on the status page.
type StatusQueue struct {
	Model string `json:"model"`
	// Saturated is the router's last word on the model's fleet.
	Saturated bool `json:"saturated"`
	Queued    int  `json:"queued"`
	// Bands are the queued requests by priority band, highest first.
	Bands []StatusBand `json:"bands"`
	// TopTenants are the tenants with the most tokens in flight over every
	// replica, at most statusTenants.
	TopTenants []StatusTenant `json:"top_tenants"`
}

// StatusBand is one priority band's queue.
type StatusBand struct {
	Priority int32 `json:"priority"`
	Queued   int   `json:"queued"`
}

// StatusTenant is one tenant's load.
type StatusTenant struct {
	Tenant string `json:"tenant"`
	// InFlight and Queued are its requests at this replica;
	// InFlightTokens its tokens in flight here, FleetInFlightTokens over
	// every replica.
	InFlight            uint32 `json:"in_flight"`
	Queued              uint32 `json:"queued"`
	InFlightTokens      uint64 `json:"in_flight_tokens"`
	FleetInFlightTokens uint64 `json:"fleet_in_flight_tokens"`
}

// statusTenants bounds the tenants the status page lists per model.
const statusTenants = 5

// status is every model queue's state, by model name.
func (a *admission) status() []StatusQueue {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []StatusQueue{}
	for _, mq := range a.models {
		q := StatusQueue{Model: mq.name, Saturated: mq.saturated, Queued: mq.queued, Bands: []StatusBand{}, TopTenants: []StatusTenant{}}
		for _, b := range mq.bands {
			if b.n > 0 {
				q.Bands = append(q.Bands, StatusBand{Priority: b.prio, Queued: b.n})
			}
		}
		for tenant, tl := range mq.load {
			q.TopTenants = append(q.TopTenants, StatusTenant{Tenant: tenant, InFlight: tl.inflight, Queued: tl.queued,
				InFlightTokens: tl.inflightTokens, FleetInFlightTokens: a.inflightFleetLocked(mq, tenant)})
		}
		slices.SortFunc(q.TopTenants, func(x, y StatusTenant) int {
			if x.FleetInFlightTokens != y.FleetInFlightTokens {
				return cmpDesc(x.FleetInFlightTokens, y.FleetInFlightTokens)
			}
			return strings.Compare(x.Tenant, y.Tenant)
		})
		q.TopTenants = q.TopTenants[:min(len(q.TopTenants), statusTenants)]
		out = append(out, q)
	}
	slices.SortFunc(out, func(x, y StatusQueue) int { return strings.Compare(x.Model, y.Model) })
	return out
}

func cmpDesc(x, y uint64) int {
	switch {
	case x > y:
		return -1
	case x < y:
		return 1
	}
	return 0
}
