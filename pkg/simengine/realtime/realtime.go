// Package realtime paces a simengine.Engine in real time, for the mocker
// worker: one goroutine steps the engine and waits each step's simulated
// duration, while callers submit and cancel requests and read their outputs
// as streams. The engine itself stays a pure step function, which the
// router's replay benchmark drives on a simulated clock instead.
package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// ErrClosed is returned by Submit once Run has returned.
var ErrClosed = errors.New("realtime: runner closed")

// Options are the Runner's hooks. Both are called from the Run goroutine
// after each step, outside the Runner's lock; a slow hook delays the next
// step, as a slow event publisher would delay a real engine.
type Options struct {
	// OnEvents, when set, receives the KV cache events of each step that
	// has any, in id order.
	OnEvents func(events []simengine.Event)
	// OnMetrics, when set, receives the engine's load after each step and
	// after each handoff's end, and the time it was taken.
	OnMetrics func(m simengine.Metrics, at time.Time)
	// HandoffTimeout is how long a prefill leg's blocks (simengine.Request's
	// Hold) stay held after its last output for the decode leg to take
	// (Take) before they are freed; 0 holds them until taken, released or
	// cancelled.
	HandoffTimeout time.Duration
	// OnHandoffEnd, when set, is told how each held handoff ended and how
	// many blocks it freed, from the goroutine that ended it, outside the
	// Runner's lock.
	OnHandoffEnd func(id string, end HandoffEnd, blocks int)
}

// HandoffEnd says how the blocks held for a handoff were freed.
type HandoffEnd int

// The ends of a handoff.
const (
	// HandoffPulled: the decode leg took the blocks (Take).
	HandoffPulled HandoffEnd = iota
	// HandoffReleased: the request ended before its decode leg (Release).
	HandoffReleased
	// HandoffCancelled: the prefill leg was cancelled (Cancel), its
	// answer undelivered.
	HandoffCancelled
	// HandoffTimedOut: nobody took them within Options.HandoffTimeout.
	HandoffTimedOut
	numHandoffEnds
)

// String returns the end's name, as the mocker's metrics label it.
func (e HandoffEnd) String() string {
	switch e {
	case HandoffPulled:
		return "pulled"
	case HandoffReleased:
		return "released"
	case HandoffCancelled:
		return "cancelled"
	case HandoffTimedOut:
		return "timed_out"
	default:
		return "unknown"
	}
}

// HandoffStats are the Runner's held handoffs and how past ones ended.
type HandoffStats struct {
	// Held counts the handoffs whose blocks are held now; HeldBlocks
	// counts their blocks.
	Held, HeldBlocks int
	// Ended counts the handoffs freed, by how.
	Ended [numHandoffEnds]uint64
}

// Runner steps an engine in real time. Create one with New, start Run, then
// Submit requests. Its methods are safe for concurrent use.
type Runner struct {
	opts Options
	wake chan struct{}

	mu      sync.Mutex
	eng     *simengine.Engine
	streams map[string]*Stream
	closed  bool
	// holds has a timer per held handoff, which frees it at the timeout
	// (a stopped one without a timeout); ended counts past handoffs.
	holds map[string]*time.Timer
	ended [numHandoffEnds]uint64
	// dirty says the load changed outside a step (a handoff freed): Run
	// reports it when idle.
	dirty bool
}

// New returns a Runner of e, which it owns from now on: use e only through
// the Runner.
func New(e *simengine.Engine, opts Options) *Runner {
	return &Runner{opts: opts, eng: e, streams: make(map[string]*Stream), holds: make(map[string]*time.Timer), wake: make(chan struct{}, 1)}
}

// Submit adds a request and returns the stream of its outputs. It fails
// with ErrClosed after Run returned, and with the engine's Add errors
// (simengine.ErrInvalidRequest, simengine.ErrDuplicateRequest,
// simengine.ErrRequestTooLarge).
func (r *Runner) Submit(req simengine.Request) (*Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if err := r.eng.Add(req); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	s := newStream()
	r.streams[req.ID] = s
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return s, nil
}

// Cancel ends a request; its stream gets a last output with
// simengine.FinishCancelled. A prefill leg that already ended (its blocks
// held for the handoff) is freed as HandoffCancelled. It fails with
// simengine.ErrUnknownRequest for a request that is not running (never
// submitted, finished, cancelled, or its handoff ended).
func (r *Runner) Cancel(id string) error {
	if _, ok := r.endHold(id, HandoffCancelled); ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out, err := r.eng.Cancel(id)
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	r.deliver(out)
	r.dirty = true // its blocks are freed: the load is reported again
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

// Take frees the blocks a prefill leg holds for its handoff, as its decode
// leg takes them, and returns how many there were; false when none are
// held under id (never held, or already freed).
func (r *Runner) Take(id string) (int, bool) { return r.endHold(id, HandoffPulled) }

// Release frees the blocks a prefill leg holds for its handoff without
// their being taken; false when none are held under id.
func (r *Runner) Release(id string) (int, bool) { return r.endHold(id, HandoffReleased) }

// EndPull says that the arrived KV of a request whose pull is the caller's
// (simengine.Request.AwaitPull; its stream's Pull returned) is in: it runs
// once the engine has a running slot for it. It fails with
// simengine.ErrUnknownRequest for a request not waiting for its pull.
func (r *Runner) EndPull(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.eng.EndPull(id); err != nil {
		return fmt.Errorf("end pull: %w", err)
	}
	r.dirty = true
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

// HandoffStats returns the held handoffs and how past ones ended.
func (r *Runner) HandoffStats() HandoffStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return HandoffStats{Held: len(r.holds), HeldBlocks: r.eng.HeldBlocks(), Ended: r.ended}
}

// hold starts the hold of a prefill leg that just ended. Called with r.mu
// held.
func (r *Runner) hold(id string) {
	if r.opts.HandoffTimeout <= 0 {
		t := time.NewTimer(time.Hour)
		t.Stop()
		r.holds[id] = t
		return
	}
	r.holds[id] = time.AfterFunc(r.opts.HandoffTimeout, func() { r.endHold(id, HandoffTimedOut) })
}

// endHold frees a held handoff's blocks and says how many there were;
// false when id holds none.
func (r *Runner) endHold(id string, end HandoffEnd) (int, bool) {
	r.mu.Lock()
	t, ok := r.holds[id]
	if !ok {
		r.mu.Unlock()
		return 0, false
	}
	t.Stop()
	delete(r.holds, id)
	n, err := r.eng.Release(id)
	if err != nil {
		// The engine and the holds are kept together under r.mu.
		panic(fmt.Sprintf("realtime: handoff %q held by the runner, not the engine: %v", id, err))
	}
	r.ended[end]++
	r.dirty = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	if r.opts.OnHandoffEnd != nil {
		r.opts.OnHandoffEnd(id, end, n)
	}
	return n, true
}

// deliver hands an output to its stream, dropping the stream when it is the
// last. Called with r.mu held.
func (r *Runner) deliver(out simengine.Output) {
	s, ok := r.streams[out.RequestID]
	if !ok {
		return
	}
	s.push(out)
	if out.Finish != simengine.FinishNone {
		delete(r.streams, out.RequestID)
	}
}

// CachedPrefix returns how many leading blocks of a sequence the engine's
// prefix cache holds (simengine.Engine.CachedPrefix); safe while Run runs.
func (r *Runner) CachedPrefix(blocks []kvhash.Block) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng.CachedPrefix(blocks)
}

// Stats returns the engine's cumulative counters; safe while Run runs.
func (r *Runner) Stats() simengine.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng.Stats()
}

// Run steps the engine until ctx is done, waiting after each step for its
// simulated duration and, when the engine is idle, for a submission. On
// return every request still running has been cancelled (its stream ends
// with simengine.FinishCancelled) and Submit fails with ErrClosed. It returns
// nil when ctx ends it.
func (r *Runner) Run(ctx context.Context) error {
	defer r.close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		r.mu.Lock()
		if r.eng.Idle() {
			if r.dirty {
				r.dirty = false
				m := r.eng.Metrics()
				r.mu.Unlock()
				if r.opts.OnMetrics != nil {
					r.opts.OnMetrics(m, time.Now())
				}
				continue
			}
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
				continue
			}
		}
		start := time.Now()
		res := r.eng.Step()
		for _, id := range res.Admitted {
			if s, ok := r.streams[id]; ok {
				s.admit(start)
			}
		}
		for _, p := range res.PullStarts {
			if s, ok := r.streams[p.RequestID]; ok {
				s.startPull(p.Blocks)
			}
		}
		for _, out := range res.Outputs {
			if out.Finish == simengine.FinishHeld {
				// The engine holds the blocks from now: a cancel
				// while the step computes frees them.
				r.hold(out.RequestID)
			}
		}
		m := r.eng.Metrics()
		r.dirty = false
		r.mu.Unlock()

		// The step "computes" until start+Duration; submissions and
		// cancellations queue up meanwhile, as in a real engine. What it
		// produced (tokens, KV blocks stored, its load) is out at its
		// end, as a real engine's is: a request's first token marks the
		// end of its prefill, which is what routers predict and what
		// they learn from it. Delivered at the step's start, a token
		// would come a step early, and a router would take a worker
		// still computing that step's prefill for free.
		stopped := false
		if wait := time.Until(start.Add(res.Duration)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				stopped = true
			case <-timer.C:
			}
		} else {
			stopped = ctx.Err() != nil
		}
		r.mu.Lock()
		for _, out := range res.Outputs {
			r.deliver(out)
		}
		r.mu.Unlock()
		if stopped {
			return nil
		}
		if len(res.Events) > 0 && r.opts.OnEvents != nil {
			r.opts.OnEvents(res.Events)
		}
		if r.opts.OnMetrics != nil {
			r.opts.OnMetrics(m, time.Now())
		}
		if stalled(res) {
			// Nothing ran, nothing was admitted and no time passed: what
			// the engine holds waits on its callers (pulls they run, held
			// handoffs to free) until a submission, cancel, release or
			// end of a pull wakes it.
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
			}
		}
	}
}

// stalled says a step changed nothing: stepping again before an outside
// change would repeat it.
func stalled(res simengine.StepResult) bool {
	return res.Duration == 0 && res.PrefillTokens == 0 && res.DecodeTokens == 0 && res.Preempted == 0 &&
		len(res.Outputs) == 0 && len(res.Admitted) == 0 && len(res.Pulled) == 0 && len(res.PullStarts) == 0 &&
		len(res.Events) == 0
}

// close cancels every running request, stops the handoffs' timers and
// refuses new requests.
func (r *Runner) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for id, t := range r.holds {
		t.Stop()
		delete(r.holds, id)
	}
	for id := range r.streams {
		if out, err := r.eng.Cancel(id); err == nil {
			r.deliver(out)
		}
	}
}

// Stream is the output of one request. It buffers without bound, so a slow
// reader never stalls the engine.
type Stream struct {
	mu     sync.Mutex
	queue  []simengine.Output
	done   bool
	notify chan struct{}
	// admitted is when the engine first admitted the request (the start
	// of the step that did); zero while it waits.
	admitted time.Time
	// pull is closed when the engine admitted a request whose pull is
	// the caller's; pullBlocks are the blocks it pulls.
	pull       chan struct{}
	pullBlocks int
	// ended is closed with the last output's push.
	ended chan struct{}
}

// admit records the request's first admission.
func (s *Stream) admit(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admitted.IsZero() {
		s.admitted = at
	}
}

// AdmittedAt is when the engine first admitted the request from its queue
// (zero while it waits): known by the time its first output arrives, which
// is how the mocker times its engine-queue and prefill spans.
func (s *Stream) AdmittedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admitted
}

// startPull records that the engine admitted the request and waits for
// its pull of blocks.
func (s *Stream) startPull(blocks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.pull:
	default:
		s.pullBlocks = blocks
		close(s.pull)
	}
}

// Pull waits until the engine has admitted a request whose pull is the
// caller's (simengine.Request.AwaitPull) and returns the arrived blocks to
// pull, after which the caller runs the pull and says Runner.EndPull (or
// cancels). It returns io.EOF when the stream ended first (cancelled; its
// last output is still to Recv) and ctx's error if ctx ends first.
func (s *Stream) Pull(ctx context.Context) (int, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.pull:
	case <-s.ended:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return 0, io.EOF
	}
	return s.pullBlocks, nil
}

func newStream() *Stream {
	return &Stream{notify: make(chan struct{}, 1), pull: make(chan struct{}), ended: make(chan struct{})}
}

// push appends an output and wakes the reader.
func (s *Stream) push(out simengine.Output) {
	s.mu.Lock()
	s.queue = append(s.queue, out)
	if out.Finish != simengine.FinishNone && !s.done {
		s.done = true
		close(s.ended)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next output. After the output with a finish reason it
// returns io.EOF; it returns ctx's error if ctx ends first.
func (s *Stream) Recv(ctx context.Context) (simengine.Output, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			out := s.queue[0]
			s.queue[0] = simengine.Output{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return out, nil
		}
		if s.done {
			s.mu.Unlock()
			return simengine.Output{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return simengine.Output{}, ctx.Err()
		case <-s.notify:
		}
	}
}
