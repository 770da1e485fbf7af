package core

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// Affinity is --session-affinity: how firmly a conversation stays on the
// worker it is bound to.
type Affinity string

// The affinities.
const (
	// AffinitySoft keeps a conversation on its worker unless that worker
	// is full under the saturation limits (--queue-ttft-threshold,
	// --queue-prefill-budget) while the decision's own choice is not, or
	// is gone: then the other worker serves the turn and the binding
	// moves there. The zero value reads as soft.
	AffinitySoft Affinity = "soft"
	// AffinityHard keeps it on its worker while the worker lives and
	// serves the target, however loaded.
	AffinityHard Affinity = "hard"
)

// ParseAffinity parses --session-affinity, case-insensitively.
func ParseAffinity(s string) (Affinity, error) {
	for _, a := range []Affinity{AffinitySoft, AffinityHard} {
		if strings.EqualFold(s, string(a)) {
			return a, nil
		}
	}
	return "", fmt.Errorf("invalid --session-affinity %q: valid values are soft, hard", s)
}

// String is the affinity's name; the zero value is soft.
func (a Affinity) String() string {
	if a == "" {
		return string(AffinitySoft)
	}
	return string(a)
}

// Set parses a flag value.
func (a *Affinity) Set(s string) error {
	v, err := ParseAffinity(s)
	if err == nil {
		*a = v
	}
	return err
}

// Session defaults and limits.
const (
	// DefaultSessionTTL is --session-ttl's default: a conversation idle
	// this long loses its binding (Dynamo's default too).
	DefaultSessionTTL = 10 * time.Minute
	// DefaultMaxSessions is --session-max-bindings' default. A binding
	// costs about 200 bytes with a 64-byte id: 20 MB at the limit.
	DefaultMaxSessions = 100_000
	// MaxSessionIDLen is the longest session id.
	MaxSessionIDLen = 256
	// MaxCacheSaltLen is the longest cache salt.
	MaxCacheSaltLen = 1024
)

// ValidSessionID checks a session id: 1..MaxSessionIDLen bytes of ASCII
// letters, digits and -_.:@/+=~ (a UUID, a ULID, base64 or a path-like
// name fit; spaces, controls and anything a log line or a header could be
// confused by do not). It wraps ErrInvalid.
func ValidSessionID(id string) error {
	if id == "" || len(id) > MaxSessionIDLen {
		return fmt.Errorf("%w: session id must be 1..%d bytes", ErrInvalid, MaxSessionIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !sessionByte(id[i]) {
			return fmt.Errorf("%w: session id byte %d (%q) is not an ASCII letter, digit or one of -_.:@/+=~", ErrInvalid, i, id[i])
		}
	}
	return nil
}

func sessionByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-_.:@/+=~", b) >= 0
}

// The outcomes of a decision for its session (SessionBinding.outcome).
const (
	SessionNew              = "new"
	SessionHit              = "hit"
	SessionMovedLoad        = "moved_load"
	SessionMovedUnavailable = "moved_unavailable"
)

// The reasons a binding ends (SessionStats.Ended).
const (
	SessionExpired    = "expired"
	SessionEvicted    = "evicted"
	SessionWorkerGone = "worker_gone"
)

// SessionStats counts what the session table did since the core started.
type SessionStats struct {
	// Bindings are the live bindings.
	Bindings int
	// Outcomes counts decisions by outcome (SessionNew, SessionHit,
	// SessionMovedLoad, SessionMovedUnavailable).
	Outcomes map[string]uint64
	// Ended counts bindings that ended, by reason (SessionExpired,
	// SessionEvicted past the table's limit, SessionWorkerGone).
	Ended map[string]uint64
}

// binding is one session's worker, in the table's list by last use.
type binding struct {
	id         string
	worker     index.WorkerID
	last       time.Time
	prev, next *binding
}

// sessions is the session table: each conversation's worker and when it
// last served a turn, bounded in size and idle time. Its list runs from the
// least recently used binding (head.next) to the most (head.prev), so
// expiry and eviction take from the front. Replicas' bindings arrive with
// their own times, a little out of order: a binding heard late sits
// behind newer ones and expires at its next lookup or once those before it
// went, a sync delay late at most. Safe for concurrent use.
type sessions struct {
	ttl  time.Duration
	max  int
	hard bool

	mu      sync.Mutex
	byID    map[string]*binding
	head    binding // sentinel
	outcome map[string]uint64
	ended   map[string]uint64
}

func newSessions(ttl time.Duration, maxBindings int, a Affinity) *sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if maxBindings <= 0 {
		maxBindings = DefaultMaxSessions
	}
	s := &sessions{ttl: ttl, max: maxBindings, hard: a == AffinityHard, byID: map[string]*binding{},
		outcome: map[string]uint64{}, ended: map[string]uint64{}}
	s.head.prev, s.head.next = &s.head, &s.head
	return s
}

func (s *sessions) unlinkLocked(b *binding) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
}

func (s *sessions) pushLocked(b *binding) {
	b.prev, b.next = s.head.prev, &s.head
	s.head.prev.next = b
	s.head.prev = b
}

func (s *sessions) dropLocked(b *binding, reason string) {
	s.unlinkLocked(b)
	delete(s.byID, b.id)
	s.ended[reason]++
}

// expireLocked drops the bindings idle past the TTL at now, from the front.
func (s *sessions) expireLocked(now time.Time) {
	for b := s.head.next; b != &s.head && !now.Before(b.last.Add(s.ttl)); b = s.head.next {
		s.dropLocked(b, SessionExpired)
	}
}

// lookupLocked is id's live binding at now, or nil.
func (s *sessions) lookupLocked(id string, now time.Time) *binding {
	s.expireLocked(now)
	b := s.byID[id]
	if b != nil && !now.Before(b.last.Add(s.ttl)) {
		s.dropLocked(b, SessionExpired)
		return nil
	}
	return b
}

// peek is the worker session id is bound to, if it has a binding, live or
// not: a decision prices it (the rule may choose it), and choose, which
// comes after, tells whether the binding lives.
func (s *sessions) peek(id string) (index.WorkerID, bool) {
	if id == "" {
		return index.WorkerID{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.byID[id]; b != nil {
		return b.worker, true
	}
	return index.WorkerID{}, false
}

// bindLocked binds id to w as of at, unless its binding was used later;
// past the limit the least recently used binding goes.
func (s *sessions) bindLocked(id string, w index.WorkerID, at time.Time) {
	if b := s.byID[id]; b != nil {
		if at.Before(b.last) {
			return // an older decision, heard late
		}
		s.unlinkLocked(b)
		b.worker, b.last = w, at
		s.pushLocked(b)
		return
	}
	if len(s.byID) >= s.max {
		s.dropLocked(s.head.next, SessionEvicted)
	}
	b := &binding{id: id, worker: w, last: at}
	s.byID[id] = b
	s.pushLocked(b)
}

// bind records a replica's binding (ReplicaRouted.session_id).
func (s *sessions) bind(id string, w index.WorkerID, at time.Time) {
	s.mu.Lock()
	s.bindLocked(id, w, at)
	s.mu.Unlock()
}

// removeInstance ends the bindings of a departed instance: a binding dies
// with its worker.
func (s *sessions) removeInstance(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := s.head.next; b != &s.head; {
		next := b.next
		if b.worker.Instance == id {
			s.dropLocked(b, SessionWorkerGone)
		}
		b = next
	}
}

// live counts the bindings live at now.
func (s *sessions) live(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	return len(s.byID)
}

// stats copies the counters.
func (s *sessions) stats() SessionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := SessionStats{Bindings: len(s.byID), Outcomes: map[string]uint64{}, Ended: map[string]uint64{}}
	for k, v := range s.outcome {
		out.Outcomes[k] = v
	}
	for k, v := range s.ended {
		out.Ended[k] = v
	}
	return out
}

// sessionChoice is what the session rule made of a decision.
type sessionChoice struct {
	chosen   int
	outcome  string
	previous index.WorkerID
	last     time.Time
}

// choose applies the session rule to decision d for session id at now:
// the bound worker when the binding lives and the affinity allows it,
// d.chosen otherwise. With record, the binding and the counters are
// updated (a Route); without, nothing changes (ExplainRoute). It runs
// after the mode has chosen, as a rule over its pick, not a term of the
// cost: a conversation's next turn goes where its cache is even when the
// mode would not send it there.
func (s *sessions) choose(d *decision, id string, req scheduler.Request, limits scheduler.Limits, now time.Time, record bool) sessionChoice {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := sessionChoice{chosen: d.chosen, outcome: SessionNew}
	if b := s.lookupLocked(id, now); b != nil {
		out.previous, out.last = b.worker, b.last
		bound := -1
		for i := range d.scored {
			if d.scored[i].Worker == b.worker {
				bound = i
				break
			}
		}
		switch {
		case bound < 0:
			out.outcome = SessionMovedUnavailable
		case s.hard || bound == d.chosen:
			out.chosen, out.outcome = bound, SessionHit
		case !limits.Off() && limits.Full(&d.scored[bound], req) && !limits.Full(&d.scored[d.chosen], req):
			out.outcome = SessionMovedLoad
		default:
			out.chosen, out.outcome = bound, SessionHit
		}
	}
	if record {
		s.outcome[out.outcome]++
		s.bindLocked(id, d.scored[out.chosen].Worker, now)
	}
	return out
}

// describe is c as the session's SessionBinding (what ExplainRoute shows).
func (s *sessions) describe(id string, d *decision, c sessionChoice) *routerv1.SessionBinding {
	w := d.scored[c.chosen].Worker
	out := &routerv1.SessionBinding{SessionId: id, InstanceId: w.Instance, DpRank: w.DPRank, Outcome: c.outcome,
		Affinity: string(AffinitySoft), PreviousInstanceId: c.previous.Instance}
	if s.hard {
		out.Affinity = string(AffinityHard)
	}
	if !c.last.IsZero() {
		out.LastUsed = timestamppb.New(c.last)
	}
	return out
}

// sessionReason says in words what the session rule did, before the
// mode's reason for its own pick.
func sessionReason(b *routerv1.SessionBinding) string {
	switch b.Outcome {
	case SessionHit:
		return fmt.Sprintf("session %s bound to %s (%s affinity); the mode alone: ", b.SessionId,
			workerName(index.WorkerID{Instance: b.InstanceId, DPRank: b.DpRank}), b.Affinity)
	case SessionMovedLoad:
		return fmt.Sprintf("session %s moves from %x, full, to the mode's pick (soft affinity): ", b.SessionId, b.PreviousInstanceId)
	case SessionMovedUnavailable:
		return fmt.Sprintf("session %s moves from %x, which cannot serve it, to the mode's pick: ", b.SessionId, b.PreviousInstanceId)
	}
	return fmt.Sprintf("session %s has no binding: the mode's pick binds it: ", b.SessionId)
}

// applySession applies the session rule to a decision of a request with a
// session id (see sessions.choose) and moves d to its pick. A disaggregated
// pair and a direct decision are left as they are: the pair was priced
// for its decode worker, and direct mode names its worker. It reports
// what the rule chose, and false when it did not apply.
func (c *Core) applySession(d *decision, id string, tokens int, record bool) (sessionChoice, bool) {
	if id == "" || d.pools != nil || c.mode == ModeDirect {
		return sessionChoice{}, false
	}
	if tokens == 0 {
		tokens = len(d.hashes) * d.blockSize
	}
	req := scheduler.Request{Blocks: len(d.hashes), Tokens: tokens, BlockSize: d.blockSize}
	ch := c.sessions.choose(d, id, req, c.limitsOf(d), c.now(), record)
	if ch.chosen != d.chosen {
		d.chosen = ch.chosen
		d.overlap = d.scored[ch.chosen].Overlap
		if d.sparse {
			c.mu.Lock()
			d.saturated = c.saturated(d, req, ch.chosen)
			c.mu.Unlock()
		} else {
			d.saturated = c.saturated(d, req, ch.chosen)
		}
	}
	return ch, true
}

// Sessions counts the session table's bindings and what it did.
func (c *Core) Sessions() SessionStats { return c.sessions.stats() }

// SessionWorker is the worker a session is bound to, if its binding lives.
func (c *Core) SessionWorker(id string) (index.WorkerID, bool) {
	s := c.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.lookupLocked(id, c.now()); b != nil {
		return b.worker, true
	}
	return index.WorkerID{}, false
}
