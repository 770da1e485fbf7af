package core

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// clocked is cluster with a clock the test moves.
func clocked(t *testing.T, cfg Config, n int) (*Core, *time.Time) {
	t.Helper()
	now := time.Unix(1000, 0)
	cfg.Clock = func() time.Time { return now }
	return cluster(t, cfg, n), &now
}

// turn routes one request of session id and returns its worker.
func turn(t *testing.T, c *Core, id, session string, toks []uint32, exclude ...uint64) uint64 {
	t.Helper()
	resp, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: toks, SessionId: session, ExcludeInstanceIds: exclude})
	if err != nil {
		t.Fatal(err)
	}
	return resp.InstanceId
}

// TestSessionRule drives one conversation through each case of the
// session rule on two workers (block size 4): its first turn binds it, and
// the second turn's prompt is cached on the other worker, so that the mode
// alone would send it there.
func TestSessionRule(t *testing.T) {
	const full = 4000 // tokens: three such prompts queued fill a worker at 200 ms (264 ms)
	tests := []struct {
		name string
		cfg  Config
		// before runs between the turns, with the bound worker and the
		// other one.
		before func(t *testing.T, c *Core, now *time.Time, bound, other uint64)
		// exclude is excluded from the second turn: the bound worker
		// when true.
		exclude bool
		// stays says the second turn goes to the bound worker.
		stays   bool
		outcome string
		ended   map[string]uint64
	}{
		{name: "hit against the cache", cfg: Config{}, stays: true, outcome: SessionHit},
		{name: "soft stays below the limit", cfg: Config{QueueTTFTThreshold: 200 * time.Millisecond}, stays: true, outcome: SessionHit},
		{name: "soft moves off a full worker", cfg: Config{QueueTTFTThreshold: 200 * time.Millisecond},
			before: func(t *testing.T, c *Core, _ *time.Time, bound, _ uint64) { load(t, c, bound, 3, full) },
			stays:  false, outcome: SessionMovedLoad},
		{name: "soft stays when every worker is full", cfg: Config{QueueTTFTThreshold: 200 * time.Millisecond},
			before: func(t *testing.T, c *Core, _ *time.Time, bound, other uint64) {
				load(t, c, bound, 3, full)
				load(t, c, other, 3, full)
			},
			stays: true, outcome: SessionHit},
		{name: "hard stays on a full worker", cfg: Config{QueueTTFTThreshold: 200 * time.Millisecond, SessionAffinity: AffinityHard},
			before: func(t *testing.T, c *Core, _ *time.Time, bound, _ uint64) { load(t, c, bound, 3, full) },
			stays:  true, outcome: SessionHit},
		{name: "excluded moves", cfg: Config{}, exclude: true, stays: false, outcome: SessionMovedUnavailable},
		{name: "hard excluded moves", cfg: Config{SessionAffinity: AffinityHard}, exclude: true, stays: false, outcome: SessionMovedUnavailable},
		{name: "expires idle", cfg: Config{SessionTTL: time.Minute},
			before: func(_ *testing.T, _ *Core, now *time.Time, _, _ uint64) { *now = now.Add(time.Minute) },
			stays:  false, outcome: SessionNew, ended: map[string]uint64{SessionExpired: 1}},
		{name: "used within the ttl lives", cfg: Config{SessionTTL: time.Minute},
			before: func(_ *testing.T, _ *Core, now *time.Time, _, _ uint64) {
				*now = now.Add(time.Minute - time.Millisecond)
			},
			stays: true, outcome: SessionHit},
		{name: "dies with its worker", cfg: Config{},
			before: func(_ *testing.T, c *Core, _ *time.Time, bound, _ uint64) {
				c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Deleted: true,
					Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: bound}}})
			},
			stays: false, outcome: SessionNew, ended: map[string]uint64{SessionWorkerGone: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Mode = ModeKV
			c, now := clocked(t, cfg, 2)
			first := tokens(64, 1)
			bound := turn(t, c, "t1", "conv-1", first)
			c.Free("t1")
			other := 3 - bound
			// The second turn's prompt: the first one's and more, all of
			// it cached on the other worker, none on the bound one.
			second := append(tokens(64, 1), tokens(64, 500)...)
			stored(c, other, 1, second)
			if tt.before != nil {
				tt.before(t, c, now, bound, other)
			}
			var exclude []uint64
			if tt.exclude {
				exclude = []uint64{bound}
			}
			ex, err := c.Explain(&routerv1.ExplainRouteRequest{Target: modelTarget(), TokenIds: second, SessionId: "conv-1", ExcludeInstanceIds: exclude})
			if err != nil {
				t.Fatal(err)
			}
			got := turn(t, c, "t2", "conv-1", second, exclude...)
			if (got == bound) != tt.stays {
				t.Fatalf("second turn went to %d (bound %d), stays = %v", got, bound, tt.stays)
			}
			if ex.InstanceId != got || ex.GetSession().GetOutcome() != tt.outcome || ex.GetSession().GetInstanceId() != got {
				t.Fatalf("explained %d, session %v; routed %d, want outcome %s", ex.InstanceId, ex.GetSession(), got, tt.outcome)
			}
			if w, ok := c.SessionWorker("conv-1"); !ok || w.Instance != got {
				t.Fatalf("binding after the second turn = %v, %v; want %d", w, ok, got)
			}
			st := c.Sessions()
			wantOutcomes := map[string]uint64{SessionNew: 1}
			wantOutcomes[tt.outcome]++
			if fmt.Sprint(st.Outcomes) != fmt.Sprint(wantOutcomes) || fmt.Sprint(st.Ended) != fmt.Sprint(orEmpty(tt.ended)) || st.Bindings != 1 {
				t.Fatalf("stats = %+v, want outcomes %v, ended %v, 1 binding", st, wantOutcomes, tt.ended)
			}
			if n := c.Stats().SessionBindings; n != 1 {
				t.Fatalf("GetStats session_bindings = %d, want 1", n)
			}
		})
	}
}

func orEmpty(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return m
}

// load reports instance with n requests of tokens prompt tokens each queued
// for prefill.
func load(t *testing.T, c *Core, instance uint64, n, tokens int) {
	t.Helper()
	m := &workerv1.LoadMetrics{InstanceId: instance, Requests: []*workerv1.RequestLoad{}}
	for i := range n {
		m.Requests = append(m.Requests, &workerv1.RequestLoad{RequestId: fmt.Sprintf("load-%d-%d", instance, i), PrefillTokens: uint32(tokens)})
	}
	c.ReportLoad(m)
}

// TestSessionTableLimit fills a table of three bindings with five
// sessions: the least recently used go, a session used again stays.
func TestSessionTableLimit(t *testing.T) {
	c, now := clocked(t, Config{Mode: ModeRoundRobin, MaxSessions: 3}, 2)
	for i, s := range []string{"a", "b", "c", "a", "d", "e"} {
		*now = now.Add(time.Second)
		turn(t, c, fmt.Sprint("r", i), s, tokens(8, uint32(i)))
	}
	for s, live := range map[string]bool{"a": true, "b": false, "c": false, "d": true, "e": true} {
		if _, ok := c.SessionWorker(s); ok != live {
			t.Errorf("session %s live = %v, want %v", s, ok, live)
		}
	}
	st := c.Sessions()
	if st.Bindings != 3 || st.Ended[SessionEvicted] != 2 {
		t.Fatalf("stats = %+v, want 3 bindings and 2 evicted", st)
	}
}

// relay hands one core's decisions to others, as the replica sync does.
type relay struct {
	to []*Core
	at func() time.Time
	// sent keeps every event with its time, for a replica that joins
	// later.
	sent *[]sentEvent
}

type sentEvent struct {
	ev *routerv1.ReplicaEvent
	at time.Time
}

func (r relay) send(ev *routerv1.ReplicaEvent) {
	*r.sent = append(*r.sent, sentEvent{ev, r.at()})
	for _, c := range r.to {
		c.ApplyReplica(ev, r.at())
	}
}
func (r relay) Routed(id, _ string, w index.WorkerID, prefill int, hashes []uint64, leg Leg, session, _ string) {
	r.send(SessionRoutedEvent(id, w, prefill, hashes, leg, session))
}
func (r relay) PrefillDone(id string) { r.send(PrefillDoneEvent(id)) }
func (r relay) Freed(id string)       { r.send(FreedEvent(id)) }

// TestSessionReplicaSync binds sessions on replica a and routes their next
// turns on replica b, which sends them to the same workers; a replica that
// starts later learns every live binding by replaying the events, except
// those of a worker that left and those idle past the TTL; an older
// decision heard late does not override a newer one.
func TestSessionReplicaSync(t *testing.T) {
	cfg := Config{Mode: ModeKV, SessionTTL: time.Minute}
	a, now := clocked(t, cfg, 4)
	b, _ := clocked(t, cfg, 4)
	b.now = a.now // one clock
	var sent []sentEvent
	a.SetObserver(relay{to: []*Core{b}, at: a.now, sent: &sent})
	b.SetObserver(relay{to: []*Core{a}, at: a.now, sent: &sent})
	bound := map[string]uint64{}
	for i := range 8 {
		s := fmt.Sprint("s", i)
		bound[s] = turn(t, a, s+"-1", s, tokens(32, uint32(i*100)))
		a.Free(s + "-1")
	}
	// Every worker caches the next turns' prompts: b's mode alone
	// would spread them.
	for w := uint64(1); w <= 4; w++ {
		for i := range 8 {
			stored(b, w, uint64(i+1), tokens(64, uint32(i*100)))
		}
	}
	for i := range 8 {
		s := fmt.Sprint("s", i)
		if got := turn(t, b, s+"-2", s, tokens(64, uint32(i*100))); got != bound[s] {
			t.Errorf("session %s: turn 2 on replica b went to %d, bound to %d on replica a", s, got, bound[s])
		}
		b.Free(s + "-2")
	}
	if st := b.Sessions(); st.Outcomes[SessionHit] != 8 {
		t.Fatalf("replica b's outcomes = %v, want 8 hits", st.Outcomes)
	}
	// An old decision for s0, heard late, leaves its newer binding.
	stale := SessionRoutedEvent("old", index.WorkerID{Instance: 1 + bound["s0"]%4}, 0, nil, Leg{}, "s0")
	b.ApplyReplica(stale, now.Add(-time.Hour))
	if w, _ := b.SessionWorker("s0"); w.Instance != bound["s0"] {
		t.Fatalf("a late old decision moved s0 to %d", w.Instance)
	}
	// Worker 1 leaves; s7 goes idle past the TTL.
	*now = now.Add(30 * time.Second)
	gone := uint64(1)
	for i := range 7 {
		s := fmt.Sprint("s", i)
		turn(t, a, s+"-3", s, tokens(64, uint32(i*100)))
		a.Free(s + "-3")
	}
	*now = now.Add(40 * time.Second)
	leave := []registryclient.Change[*registryv1.Instance]{{Deleted: true,
		Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: gone}}}
	a.OnInstances(leave)
	// A replica that starts now replays the stream, each event at the
	// time it was sent.
	c, _ := clocked(t, cfg, 4)
	c.now = a.now
	c.OnInstances(leave)
	for _, e := range sent {
		c.ApplyReplica(e.ev, e.at)
	}
	for i := range 8 {
		s := fmt.Sprint("s", i)
		wa, oka := a.SessionWorker(s)
		wc, okc := c.SessionWorker(s)
		want := i < 7 && bound[s] != gone
		if oka != want || okc != oka || wc != wa {
			t.Errorf("session %s: replica a %v %v, the later replica %v %v; want live = %v", s, wa, oka, wc, okc, want)
		}
	}
	if a.Sessions().Bindings != c.Sessions().Bindings {
		t.Fatalf("replica a holds %d bindings, the later replica %d", a.Sessions().Bindings, c.Sessions().Bindings)
	}
}

func TestValidSessionID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"", false},
		{"a", true},
		{"3f2b9c1e-8d4a-4b8e-9f1a-2c3d4e5f6a7b", true},
		{"user@example.com/chat:42+x=y~z_.", true},
		{strings.Repeat("a", MaxSessionIDLen), true},
		{strings.Repeat("a", MaxSessionIDLen+1), false},
		{"has space", false},
		{"tab\t", false},
		{"new\nline", false},
		{"quote\"", false},
		{"semi;colon", false},
		{"pct%41", false},
		{"sël", false},
		{"nul\x00", false},
	} {
		err := ValidSessionID(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("ValidSessionID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

// FuzzSessionRoute routes requests with any session id and cache salt: a
// valid one is routed and bound, an invalid one is ErrInvalid and binds
// nothing, and nothing panics.
func FuzzSessionRoute(f *testing.F) {
	for _, s := range []string{"", "a", "conv-1", "bad id", strings.Repeat("x", 300), "\xff", "a/b:c@d"} {
		f.Add(s, "", uint16(8))
		f.Add(s, "tenant", uint16(40))
	}
	c := cluster(&testing.T{}, Config{Mode: ModeKV, MaxSessions: 64}, 3)
	f.Fuzz(func(t *testing.T, session, salt string, n uint16) {
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: "fz", Target: modelTarget(), TokenIds: tokens(int(n%512)+1, 3), SessionId: session, CacheSalt: salt})
		valid := (session == "" || ValidSessionID(session) == nil) && len(salt) <= MaxCacheSaltLen
		if valid != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Fatalf("session %q salt %d bytes: err %v, valid %v", session, len(salt), err, valid)
		}
		if err != nil {
			return
		}
		c.Free("fz")
		if session == "" {
			return
		}
		if w, ok := c.SessionWorker(session); !ok || w.Instance != resp.InstanceId {
			t.Fatalf("session %q bound to %v %v, routed to %d", session, w, ok, resp.InstanceId)
		}
	})
}

// TestCacheSaltIsolates stores a prompt's blocks on worker 2 under salt A:
// the same prompt finds them under salt A only, not under salt B nor
// unsalted, and the same holds the other way round.
func TestCacheSaltIsolates(t *testing.T) {
	c := cluster(t, Config{Mode: ModeKV}, 3)
	prompt := tokens(64, 7)
	storedSalted(c, 2, 1, prompt, "tenant-a")
	storedSalted(c, 3, 1, prompt, "")
	for _, tc := range []struct {
		salt    string
		worker  uint64
		overlap uint32
	}{
		{"tenant-a", 2, 16},
		{"tenant-b", 0, 0},
		{"", 3, 16},
	} {
		t.Run("salt "+tc.salt, func(t *testing.T) {
			q, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: prompt, CacheSalt: tc.salt})
			if err != nil {
				t.Fatal(err)
			}
			for _, cd := range q.Candidates {
				want := uint32(0)
				if cd.InstanceId == tc.worker {
					want = tc.overlap
				}
				if cd.OverlapBlocks != want {
					t.Errorf("worker %d: %d blocks cached under salt %q, want %d", cd.InstanceId, cd.OverlapBlocks, tc.salt, want)
				}
			}
		})
	}
	if _, err := c.Route(&routerv1.RouteRequest{RequestId: "h", Target: modelTarget(), BlockHashes: []uint64{1}, CacheSalt: "x"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a salt with block_hashes: %v, want ErrInvalid", err)
	}
}

// storedSalted reports that instance holds toks' blocks under salt.
func storedSalted(c *Core, instance, firstID uint64, toks []uint32, salt string) {
	ev := &workerv1.KvBlocksStored{}
	for _, b := range kvhash.SaltedHashes(toks, 4, salt, nil) {
		ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
	}
	c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: instance, FirstEventId: firstID, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
}
