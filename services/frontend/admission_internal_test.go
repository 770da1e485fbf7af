package frontend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-llm/switchyard/services/router/core"
)

// testAdmission is an admission queue for model "m" with the fleet
// saturated, and helpers to queue requests and watch them come out.
type testAdmission struct {
	t *testing.T
	// stop ends every request still queued at the test's end; wg waits
	// for them.
	stop    context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup
	a       *admission
	m       *admissionMetrics
	results chan admitted
}

// admitted is what one queued request got.
type admitted struct {
	name string
	tk   *ticket
	err  error
}

func newTestAdmission(t *testing.T, cfg AdmissionConfig) *testAdmission {
	t.Helper()
	m := newAdmissionMetrics(prometheus.NewRegistry())
	ta := &testAdmission{t: t, a: newAdmission(cfg, m), m: m, results: make(chan admitted, 1024)}
	ta.ctx, ta.stop = context.WithCancel(context.Background())
	t.Cleanup(func() { ta.stop(); ta.wg.Wait() })
	return ta
}

// inflight admits a request at once (the fleet not saturated yet).
func (ta *testAdmission) inflight(tenant string, tokens uint64) *ticket {
	ta.t.Helper()
	tk, err := ta.a.admit(context.Background(), "m", tenant, 0, tokens, 100)
	if err != nil {
		ta.t.Fatal(err)
	}
	return tk
}

// queue starts a request that waits in the queue, and returns once it is
// queued or answered.
func (ta *testAdmission) queue(ctx context.Context, name, tenant string, prio int32, tokens uint64, bytes int64) {
	ta.t.Helper()
	before := ta.state()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ta.ctx, cancel)
	ta.wg.Go(func() {
		defer stop()
		tk, err := ta.a.admit(ctx, "m", tenant, prio, tokens, bytes)
		ta.results <- admitted{name, tk, err}
	})
	for ta.state() == before {
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// state is what a queued request changes: the depth, the shed count, the
// answers not read yet.
func (ta *testAdmission) state() [3]int {
	ta.a.mu.Lock()
	d := 0
	if mq := ta.a.models["m"]; mq != nil {
		d = mq.queued
	}
	ta.a.mu.Unlock()
	return [3]int{d, int(testutil.ToFloat64(ta.m.shed.WithLabelValues(shedQueueFull))), len(ta.results)}
}

// next is the next request out of the queue.
func (ta *testAdmission) next() admitted {
	ta.t.Helper()
	select {
	case r := <-ta.results:
		return r
	case <-time.After(10 * time.Second):
		ta.t.Fatal("no request came out of the queue")
	}
	return admitted{}
}

// room is the router saying the fleet has room: one request comes out,
// and its own decision says saturated again. It returns that request.
func (ta *testAdmission) room() admitted {
	ta.t.Helper()
	before := ta.depth()
	ta.a.watched("m", false)
	r := ta.next()
	if r.err != nil {
		ta.t.Fatalf("%s: %v", r.name, r.err)
	}
	ta.decide(r.tk, true)
	if d := ta.depth(); d != before-1 {
		ta.t.Fatalf("depth %d after one room, want %d", d, before-1)
	}
	return r
}

// decide is a route decision of tk's request.
func (ta *testAdmission) decide(tk *ticket, saturated bool) {
	ta.a.decided(withTicket(context.Background(), tk), "m", saturated)
}

func (ta *testAdmission) depth() int {
	ta.a.mu.Lock()
	defer ta.a.mu.Unlock()
	return ta.a.models["m"].queued
}

// TestAdmissionFastPath: below saturation nothing waits, whatever the
// band, and the tenants' load is counted and given back.
func TestAdmissionFastPath(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	var tks []*ticket
	for i := range 10 {
		tk, err := ta.a.admit(context.Background(), "m", fmt.Sprint("t", i%3), int32(i-5), 10, 10)
		if err != nil {
			t.Fatal(err)
		}
		tks = append(tks, tk)
	}
	for _, tk := range tks {
		tk.done()
		tk.done() // twice is once
	}
	ta.a.mu.Lock()
	defer ta.a.mu.Unlock()
	if n := len(ta.a.models["m"].load); n != 0 {
		t.Fatalf("%d tenants left counted", n)
	}
}

// TestAdmissionOrder: while saturated, each word of room releases one
// queued request, the highest band first, in arrival order within a band
// and tenant.
func TestAdmissionOrder(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	var running []*ticket
	for range 6 {
		running = append(running, ta.inflight("x", 10))
	}
	ta.a.decided(context.Background(), "m", true)
	ctx := context.Background()
	for _, q := range []struct {
		name string
		prio int32
	}{{"low-1", 0}, {"shed-1", -1}, {"high-1", 5}, {"low-2", 0}, {"top-1", 9}, {"high-2", 5}} {
		ta.queue(ctx, q.name, "x", q.prio, 10, 10)
	}
	if d := ta.depth(); d != 6 {
		t.Fatalf("queued %d, want 6", d)
	}
	var got []string
	for range running {
		got = append(got, ta.room().name)
	}
	if g, want := strings.Join(got, " "), "top-1 high-1 high-2 low-1 low-2 shed-1"; g != want {
		t.Fatalf("released %s, want %s", g, want)
	}
	if n := testutil.CollectAndCount(ta.m.wait); n != 1 {
		t.Fatalf("wait histogram series %d", n)
	}
}

// TestAdmissionFairness: within a band, the tenant served least lately
// (tokens let go, aged) goes first: B, sending a fifth of A's requests,
// gets its requests out before A's backlog, until it was served as many
// tokens as A.
func TestAdmissionFairness(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	var running []*ticket
	for range 4 {
		running = append(running, ta.inflight("A", 100))
	}
	ta.a.decided(context.Background(), "m", true)
	ctx := context.Background()
	for i := range 10 {
		ta.queue(ctx, fmt.Sprint("A", i), "A", 0, 100, 10)
		if i%5 == 0 {
			ta.queue(ctx, fmt.Sprint("B", i/5), "B", 0, 100, 10)
		}
	}
	var got []string
	for range running {
		got = append(got, ta.room().name)
	}
	// 4 released: B holds nothing, so B0, then B1 (B: 100 < A: 300),
	// then A's oldest two.
	if g := strings.Join(got, " "); g != "B0 B1 A0 A1" {
		t.Fatalf("released %s, want B0 B1 A0 A1", g)
	}
}

// TestAdmissionBurstBeforeBacklog: between two backlogs the tenant served
// least lately goes first, whatever each holds in flight at the moment. A
// floods (three queued) and was served ten requests of 100 tokens before,
// of which one is still in flight; B, a light tenant, has a burst: three
// requests in flight and two queued. On a word of room, B's goes first
// while A's service is recent; once it has aged away (five service lives
// ago: 1,000 tokens count 7), A, holding less in flight, has had less.
func TestAdmissionBurstBeforeBacklog(t *testing.T) {
	tests := []struct {
		name string
		// history is how many requests of A's went, ago before the
		// queue forms.
		history int
		ago     time.Duration
		want    string
	}{
		{"the flood served lately, the burst holding more now: the burst", 10, time.Second, "B"},
		{"the flood's service aged away: the flood, holding less now", 10, 5 * serviceLife, "A"},
		{"no service before: the flood, holding less now", 0, time.Second, "A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			clock := time.Unix(1000, 0)
			ta.a.now = func() time.Time { return clock }
			// A's first stays in flight, the others end.
			for i := range tt.history {
				if tk := ta.inflight("A", 100); i > 0 {
					tk.done()
				}
			}
			clock = clock.Add(tt.ago)
			if tt.history == 0 {
				ta.inflight("A", 100)
			}
			for range 3 {
				ta.inflight("B", 100)
			}
			ta.a.decided(context.Background(), "m", true)
			ctx := context.Background()
			for i := range 3 {
				ta.queue(ctx, fmt.Sprint("A", i), "A", 0, 100, 10)
			}
			for i := range 2 {
				ta.queue(ctx, fmt.Sprint("B", i), "B", 0, 100, 10)
			}
			if got := ta.room().name[:1]; got != tt.want {
				t.Fatalf("released %s's first, want %s's", got, tt.want)
			}
		})
	}
}

// TestAdmissionTimeout: a request queued past --queue-timeout is shed
// with 503 reason timeout; the queue is empty after.
func TestAdmissionTimeout(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{QueueTimeout: time.Millisecond})
	ta.inflight("x", 10)
	ta.a.decided(context.Background(), "m", true)
	ta.queue(context.Background(), "late", "x", 0, 10, 10)
	r := ta.next()
	var se *shedError
	if !errors.As(r.err, &se) || se.reason != shedTimeout {
		t.Fatalf("got %v, want a timeout shed", r.err)
	}
	if code, body := errorStatus(r.err); code != http.StatusServiceUnavailable || *body.Code != "overloaded" {
		t.Fatalf("status %d %+v", code, body)
	}
	if d := ta.depth(); d != 0 {
		t.Fatalf("depth %d after the timeout", d)
	}
	if v := testutil.ToFloat64(ta.m.shed.WithLabelValues(shedTimeout)); v != 1 {
		t.Fatalf("shed_total{timeout} = %v", v)
	}
}

// TestAdmissionShedding: past a band's limits its oldest request is
// shed, of the tenant queueing the most there; past the model's (4 bands'
// worth) the oldest of the lowest band, sheddable first, and never a band
// above the arriving request's.
func TestAdmissionShedding(t *testing.T) {
	tests := []struct {
		name string
		cfg  AdmissionConfig
		// queued in order: name:priority:bytes, tenant x, or
		// name:priority:bytes:tenant
		queue []string
		// shed, in order
		want []string
	}{
		{"band requests", AdmissionConfig{QueueMaxRequests: 2}, []string{"a:0:1", "b:0:1", "c:0:1"}, []string{"a"}},
		{"band bytes", AdmissionConfig{QueueMaxBytes: 100}, []string{"a:0:60", "b:0:30", "c:0:30"}, []string{"a"}},
		{"bigger than a band", AdmissionConfig{QueueMaxBytes: 100}, []string{"a:0:101"}, []string{"a"}},
		{"other bands are not touched by a band's limit", AdmissionConfig{QueueMaxRequests: 1}, []string{"a:-1:1", "b:0:1", "c:0:1"}, []string{"b"}},
		{"sheddable first past the model's limit", AdmissionConfig{QueueMaxRequests: 1},
			[]string{"s:-1:1", "a:0:1", "b:1:1", "c:2:1", "d:3:1"}, []string{"s"}},
		{"then the oldest of the lowest band", AdmissionConfig{QueueMaxRequests: 1},
			[]string{"a:0:1", "b:1:1", "c:2:1", "d:3:1", "e:4:1"}, []string{"a"}},
		{"never a higher band for a lower one", AdmissionConfig{QueueMaxRequests: 1},
			[]string{"a:1:1", "b:2:1", "c:3:1", "d:4:1", "e:0:1"}, []string{"e"}},
		{"the flooding tenant's oldest, not the band's", AdmissionConfig{QueueMaxRequests: 3},
			[]string{"b:0:1:B", "a1:0:1:A", "a2:0:1:A", "a3:0:1:A"}, []string{"a1"}},
		{"ties: the tenant with more in flight", AdmissionConfig{QueueMaxRequests: 2},
			[]string{"y:0:1:y", "x:0:1:x", "z:0:1:z"}, []string{"x"}},
		{"the arrival, when its tenant is the one", AdmissionConfig{QueueMaxRequests: 2},
			[]string{"p:0:1:p", "q:0:1:q", "x:0:1:x"}, []string{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, tt.cfg)
			ta.inflight("x", 10)
			ta.a.decided(context.Background(), "m", true)
			for _, q := range tt.queue {
				var name string
				var prio int32
				var bytes int64
				tenant := "x"
				f := strings.Split(q, ":")
				if len(f) == 4 {
					tenant = f[3]
				}
				if _, err := fmt.Sscanf(strings.Join(f[:3], " "), "%s %d %d", &name, &prio, &bytes); err != nil {
					t.Fatal(err)
				}
				ta.queue(context.Background(), name, tenant, prio, 1, bytes)
			}
			var got []string
			for range tt.want {
				r := ta.next()
				var se *shedError
				if !errors.As(r.err, &se) || se.reason != shedQueueFull {
					t.Fatalf("%s got %v, want queue_full", r.name, r.err)
				}
				got = append(got, r.name)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("shed %v, want %v", got, tt.want)
			}
			if v := testutil.ToFloat64(ta.m.shed.WithLabelValues(shedQueueFull)); v != float64(len(tt.want)) {
				t.Fatalf("shed_total{queue_full} = %v", v)
			}
			select {
			case r := <-ta.results:
				t.Fatalf("%s answered too: %v", r.name, r.err)
			default:
			}
		})
	}
}

// TestAdmissionDisconnect: a client that leaves while queued is out of the
// queue at once, its tenant forgotten, and the next request released is
// another one.
func TestAdmissionDisconnect(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	running := ta.inflight("x", 10)
	ta.a.decided(context.Background(), "m", true)
	ctx, cancel := context.WithCancel(context.Background())
	ta.queue(ctx, "gone", "g", 5, 10, 10)
	ta.queue(context.Background(), "stays", "s", 0, 10, 10)
	cancel()
	if r := ta.next(); r.name != "gone" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("got %s %v, want gone canceled", r.name, r.err)
	}
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
	ta.a.mu.Lock()
	_, known := ta.a.models["m"].load["g"]
	ta.a.mu.Unlock()
	if known {
		t.Fatal("the tenant that left is still counted")
	}
	running.done()
	if r := ta.next(); r.name != "stays" || r.err != nil {
		t.Fatalf("got %s %v", r.name, r.err)
	}
}

// TestAdmissionReleasesWhenRoomReturns: the router's watch saying the
// fleet has room releases one request, and the next once its decision
// says there is still room; a decision saying saturated stops it.
func TestAdmissionReleasesWhenRoomReturns(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	ta.inflight("x", 10)
	ta.a.decided(context.Background(), "m", true)
	for i := range 3 {
		ta.queue(context.Background(), fmt.Sprint("q", i), "x", 0, 10, 10)
	}
	ta.a.watched("m", false)
	r0 := ta.next()
	if r0.name != "q0" {
		t.Fatalf("got %s", r0.name)
	}
	if d := ta.depth(); d != 2 {
		t.Fatalf("depth %d: released more than one before a decision", d)
	}
	// Another request's decision (one admitted before) is not the
	// released one's: the next still waits for it.
	ta.a.decided(context.Background(), "m", false)
	ta.a.watched("m", false)
	if d := ta.depth(); d != 2 {
		t.Fatalf("depth %d: released on a decision not the released request's", d)
	}
	ta.decide(r0.tk, false)
	r1 := ta.next()
	if r1.name != "q1" {
		t.Fatalf("got %s", r1.name)
	}
	ta.decide(r1.tk, true)
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: released while saturated", d)
	}
	// Requests ending while saturated release nothing: the router's word
	// of room does.
	r0.tk.done()
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: a request's end released one while saturated", d)
	}
	ta.a.watched("m", false)
	if r := ta.next(); r.name != "q2" {
		t.Fatalf("got %s", r.name)
	}
}

// TestAdmissionWaitsForTheReleasedDecision: while the decision of the
// request released last is awaited, an arrival queues even with the queue
// empty and the router's last word room: that request may take the room.
// Its decision saying there is room still lets the arrival go.
func TestAdmissionWaitsForTheReleasedDecision(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	ta.inflight("x", 10)
	ta.a.decided(context.Background(), "m", true)
	ta.queue(context.Background(), "q0", "x", 0, 10, 10)
	ta.a.watched("m", false)
	r0 := ta.next()
	ta.queue(context.Background(), "q1", "x", 0, 10, 10)
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: the arrival went on before the released request's decision", d)
	}
	ta.decide(r0.tk, false)
	if r := ta.next(); r.name != "q1" || r.err != nil {
		t.Fatalf("got %s %v", r.name, r.err)
	}
}

// TestAdmissionProbeEndsUndecided: a released request that ends before
// its route decision (it failed first) lets the next one go, as its
// decision would have.
func TestAdmissionProbeEndsUndecided(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	ta.inflight("x", 10)
	ta.a.decided(context.Background(), "m", true)
	ta.queue(context.Background(), "q0", "x", 0, 10, 10)
	ta.queue(context.Background(), "q1", "x", 0, 10, 10)
	ta.a.watched("m", false)
	r0 := ta.next()
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d", d)
	}
	r0.tk.done()
	if r := ta.next(); r.name != "q1" {
		t.Fatalf("got %s", r.name)
	}
}

// TestAdmissionHeaders reads bands and tenants from the headers and keys.
func TestAdmissionHeaders(t *testing.T) {
	key := &apiKey{name: "team-a", priority: 3}
	tests := []struct {
		name       string
		headers    map[string][]string
		key        *apiKey
		prio       int32
		tenant     string
		wantErrStr string
	}{
		{"nothing", nil, nil, 0, "", ""},
		{"key default", nil, key, 3, "team-a", ""},
		{"header over key", map[string][]string{headerPriority: {"-2"}}, key, -2, "team-a", ""},
		{"fairness id in a key", map[string][]string{headerFairnessID: {"user-7"}}, key, 3, "team-a/user-7", ""},
		{"fairness id alone", map[string][]string{headerFairnessID: {"user-7"}}, nil, 0, "user-7", ""},
		{"limits", map[string][]string{headerPriority: {"1000"}}, nil, 1000, "", ""},
		{"spaces", map[string][]string{headerPriority: {" 7 "}}, nil, 7, "", ""},
		{"empty headers are none", map[string][]string{headerPriority: {""}, headerFairnessID: {""}}, key, 3, "team-a", ""},
		{"past the limit", map[string][]string{headerPriority: {"1001"}}, nil, 0, "", "x-switchyard-priority"},
		{"not a number", map[string][]string{headerPriority: {"high"}}, nil, 0, "", "x-switchyard-priority"},
		{"two priorities", map[string][]string{headerPriority: {"1", "2"}}, nil, 0, "", "one x-switchyard-priority"},
		{"bad fairness id", map[string][]string{headerFairnessID: {"a b"}}, nil, 0, "", "x-switchyard-fairness-id"},
		{"long fairness id", map[string][]string{headerFairnessID: {strings.Repeat("a", 65)}}, nil, 0, "", "x-switchyard-fairness-id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, vs := range tt.headers {
				for _, v := range vs {
					h.Add(k, v)
				}
			}
			prio, tenant, err := admissionOf(h, tt.key)
			if tt.wantErrStr != "" {
				if err == nil || !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.wantErrStr) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErrStr)
				}
				return
			}
			if err != nil || prio != tt.prio || tenant != tt.tenant {
				t.Fatalf("got %d %q %v, want %d %q", prio, tenant, err, tt.prio, tt.tenant)
			}
		})
	}
}

// FuzzAdmissionHeaders: any header values give a band within the limits
// and a tenant the replicas may share, or a 400.
func FuzzAdmissionHeaders(f *testing.F) {
	for _, s := range [][2]string{{"0", ""}, {"-1", "u"}, {"1000", "a.b@c:d-e_f"}, {"+5", "x"}, {"0x10", "é"}, {"99999999999", " "}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, prio, fid string) {
		h := http.Header{}
		h.Set(headerPriority, prio)
		if fid != "" {
			h.Set(headerFairnessID, fid)
		}
		p, tenant, err := admissionOf(h, &apiKey{name: "k"})
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if p < -maxPriority || p > maxPriority {
			t.Fatalf("priority %d out of range", p)
		}
		if len(tenant) > len("k/")+maxFairnessIDLen || strings.ContainsAny(tenant, " \t\r\n") {
			t.Fatalf("tenant %q", tenant)
		}
	})
}

// BenchmarkAdmissionFastPath is what admission control costs a request
// below saturation: admit and done with nothing queued.
func BenchmarkAdmissionFastPath(b *testing.B) {
	a := newAdmission(AdmissionConfig{}, newAdmissionMetrics(prometheus.NewRegistry()))
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := a.admit(ctx, "m", "tenant", 0, 300, 1000)
			if err != nil {
				b.Fatal(err)
			}
			tk.done()
		}
	})
}

// TestAdmissionProbe: a replica with nothing of the model in flight sends
// one queued request on, whatever the router said last, and the rest wait
// for its decision; it never waits with nothing in flight.
func TestAdmissionProbe(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	ta.a.decided(context.Background(), "m", true)
	ta.queue(context.Background(), "probe", "x", 0, 10, 10)
	r := ta.next()
	if r.name != "probe" || r.err != nil {
		t.Fatalf("got %s %v", r.name, r.err)
	}
	ta.queue(context.Background(), "waits", "x", 0, 10, 10)
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: a second request went on before the probe's decision", d)
	}
	ta.decide(r.tk, true) // the probe's decision: saturated
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d, want 1 while saturated", d)
	}
	r.tk.done() // the probe ends: its place goes to the next
	if r := ta.next(); r.name != "waits" {
		t.Fatalf("got %s", r.name)
	}
}

// TestKeyFilePriority: a key file line's priority= is its requests' band.
// TestAdmissionProbeKeepsLastRoom: a replica with nothing of the model in
// flight sends a queued request on as a probe, but not a flood's while a
// tenant it crowds is active (here a higher band, seen lately with nothing
// in flight): that probe would take the room kept for the other tenant,
// or go past the threshold. The flood's requests then go on the router's
// word of room.
func TestAdmissionProbeKeepsLastRoom(t *testing.T) {
	tests := []struct {
		name    string
		crowded bool
	}{
		{"alone: the probe goes", false},
		{"a higher band active lately: no probe", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			plenty := uint32(core.MaxRoom)
			ta.a.watchedRoom("m", false, plenty)
			if tt.crowded {
				tk, err := ta.a.admit(context.Background(), "m", "h", 10, 100, 10)
				if err != nil {
					t.Fatal(err)
				}
				ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
				tk.done()
			}
			// The flood's one request in flight, decided; then saturated,
			// two more queue behind it.
			tk := ta.inflight("l", 100)
			ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
			ta.a.watchedRoom("m", true, 0)
			ta.queue(context.Background(), "l1", "l", 0, 10, 10)
			ta.queue(context.Background(), "l2", "l", 0, 10, 10)
			tk.done() // nothing in flight here now
			if !tt.crowded {
				if r := ta.next(); r.name != "l1" || r.err != nil {
					t.Fatalf("got %s %v, want the probe l1", r.name, r.err)
				}
				return
			}
			if d := ta.depth(); d != 2 {
				t.Fatalf("depth %d: a probe went though a tenant it crowds is active", d)
			}
			// Room for two: both go (the second with nothing queued
			// behind it).
			ta.a.watchedRoom("m", false, 2)
			got := map[string]bool{}
			for range 2 {
				r := ta.next()
				if r.err != nil {
					t.Fatalf("%s: %v", r.name, r.err)
				}
				got[r.name] = true
			}
			if !got["l1"] || !got["l2"] {
				t.Fatalf("released %v on room for two, want l1 and l2", got)
			}
		})
	}
}

func TestKeyFilePriority(t *testing.T) {
	tests := []struct {
		name, file string
		want       []int32
		wantErr    string
	}{
		{"bands", "k1 priority=5\nk2 name=b priority=-3\nk3\n", []int32{5, -3, 0}, ""},
		{"limit", "k1 priority=1000\n", []int32{1000}, ""},
		{"past the limit", "secret-key priority=1001\n", nil, "invalid priority"},
		{"not a number", "secret-key priority=high\n", nil, "invalid priority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := t.TempDir() + "/keys"
			if err := os.WriteFile(p, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			ring, err := (&Config{APIKeyFile: p}).readKeys()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "secret-key") {
					t.Fatalf("err = %v, want one saying %q without the key", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int32
			for _, k := range ring.keys {
				got = append(got, k.priority)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("priorities %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRetryAfter: a shed request is told how long the queue takes, at its
// recent release rate, to release what is queued at its band and above,
// clamped to [1 s, the queue timeout]; with no release within the window,
// the queue timeout.
func TestRetryAfter(t *testing.T) {
	at := time.Unix(1000, 0)
	every := func(n int, gap time.Duration) []time.Time {
		var ts []time.Time
		for i := range n {
			ts = append(ts, at.Add(-time.Duration(n-1-i)*gap))
		}
		return ts
	}
	tests := []struct {
		name     string
		releases []time.Time
		ahead    int
		timeout  time.Duration
		want     time.Duration
	}{
		{"no release yet", nil, 10, 30 * time.Second, 30 * time.Second},
		{"2 a second, 10 ahead", every(21, 500*time.Millisecond), 10, 30 * time.Second, 5 * time.Second},
		{"2 a second, 1 ahead: a second at least", every(21, 500*time.Millisecond), 1, 30 * time.Second, time.Second},
		{"nothing ahead", every(21, 500*time.Millisecond), 0, 30 * time.Second, time.Second},
		{"slow: at most the timeout", every(4, 10*time.Second), 100, 30 * time.Second, 30 * time.Second},
		{"a burst counts over a second", every(10, 0), 18, 30 * time.Second, 2 * time.Second},
		{"one release, 5 s ago", []time.Time{at.Add(-5 * time.Second)}, 2, 30 * time.Second, 10 * time.Second},
		{"releases older than the window do not count", []time.Time{at.Add(-2 * releaseWindow)}, 1, 30 * time.Second, 30 * time.Second},
		{"only the last releases count", every(100, 100*time.Millisecond), 30, time.Minute, 3 * time.Second},
		{"the stale part of the ring ends the window", append([]time.Time{at.Add(-time.Hour)}, every(4, time.Second)...), 8, time.Minute, 8 * time.Second},
		{"a timeout under a second is a second", nil, 5, time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r releaseTimes
			for _, ts := range tt.releases {
				r.add(ts)
			}
			if got := retryAfter(tt.ahead, r.rate(at), tt.timeout); got != tt.want {
				t.Fatalf("retry after %v (rate %v/s), want %v", got, r.rate(at), tt.want)
			}
		})
	}
}

// TestAdmissionRetryAfterHeader: a request shed from a queue that has been
// releasing is told the estimate, in whole seconds, rounded up.
func TestAdmissionRetryAfterHeader(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{QueueMaxRequests: 4})
	now := time.Unix(1000, 0)
	ta.a.now = func() time.Time { return now }
	ta.inflight("x", 10)
	ta.a.decided(context.Background(), "m", true)
	// Four released a second apart, the last one now: 1 a second.
	for i := range 4 {
		ta.queue(context.Background(), fmt.Sprint("r", i), "x", 0, 10, 10)
		ta.room()
		now = now.Add(time.Second)
	}
	now = now.Add(-time.Second)
	for i := range 5 {
		ta.queue(context.Background(), fmt.Sprint("q", i), "x", 0, 10, 10)
	}
	r := ta.next()
	var se *shedError
	if !errors.As(r.err, &se) || r.name != "q0" {
		t.Fatalf("%s: %v, want q0 shed", r.name, r.err)
	}
	// Shed as q4 arrives: 4 queued at 1 a second, 4 s.
	if got := se.retryAfter(); got != "4" {
		t.Fatalf("Retry-After %s, want 4", got)
	}
}

// TestAdmissionLongFlood: a short form of a long 10x flood. Tenant A
// sends ten requests for each of tenant B's while the router says there
// is room once per ten arrivals; the queue holds at most its limits (8
// requests, 800 bytes) whatever arrives, sheds the rest with 503 and a
// Retry-After, and releases B's requests first. Then the flood outlasts
// --queue-timeout with no room at all: every queued request is shed by
// the timeout. Nothing is left of either tenant once their requests end.
func TestAdmissionLongFlood(t *testing.T) {
	const limit = 8
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		rooms   bool
		want    string // the shed reason past the queue's limits
	}{
		{"10x flood", time.Hour, true, shedQueueFull},
		{"past the queue timeout", 5 * time.Millisecond, false, shedTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{QueueMaxRequests: limit, QueueMaxBytes: limit * 100, QueueTimeout: tt.timeout})
			// A's requests are ten times B's: B holds less in flight.
			running := []*ticket{ta.inflight("A", 100)}
			ta.a.decided(context.Background(), "m", true)
			const arrivals = 200
			released := map[string]int{}
			shed := map[string]int{}
			var retries []string
			take := func(r admitted) {
				var se *shedError
				switch {
				case r.err == nil:
					released[r.name[:1]]++
					running = append(running, r.tk)
				case errors.As(r.err, &se):
					if code, _ := errorStatus(r.err); code != http.StatusServiceUnavailable {
						t.Fatalf("%s: status %d", r.name, code)
					}
					shed[se.reason]++
					retries = append(retries, se.retryAfter())
					if r.name[0] == 'B' && tt.rooms {
						t.Errorf("%s shed (%s): B's requests go first", r.name, se.reason)
					}
				default:
					t.Fatalf("%s: %v", r.name, r.err)
				}
			}
			for i := range arrivals {
				name := fmt.Sprint("A", i)
				if i%10 == 5 {
					name = fmt.Sprint("B", i)
				}
				tokens := uint64(100)
				if name[0] == 'B' {
					tokens = 10
				}
				ta.queue(context.Background(), name, name[:1], 0, tokens, 100)
				if tt.rooms && i%10 == 9 {
					// Room for one: its decision says saturated.
					ta.a.watched("m", false)
					for {
						r := ta.next()
						take(r)
						if r.err == nil {
							ta.decide(r.tk, true)
							break
						}
					}
				}
				ta.a.mu.Lock()
				mq := ta.a.models["m"]
				depth, bytes := mq.queued, mq.bytes
				ta.a.mu.Unlock()
				if depth > limit || bytes > limit*100 {
					t.Fatalf("after %d arrivals %d requests and %d bytes queued, past the limits", i+1, depth, bytes)
				}
			drain:
				for {
					select {
					case r := <-ta.results:
						take(r)
					default:
						break drain
					}
				}
			}
			// What is queued at the end waits for room or its timeout;
			// every other request is answered.
			answered := func() int { return released["A"] + released["B"] + shed[shedQueueFull] + shed[shedTimeout] }
			for {
				d := ta.depth()
				if !tt.rooms && d > 0 || answered()+d < arrivals {
					take(ta.next())
					continue
				}
				break
			}
			n := answered() + ta.depth()
			if n != arrivals {
				t.Fatalf("%d requests accounted for, want %d (released %v, shed %v)", n, arrivals, released, shed)
			}
			if shed[tt.want] == 0 {
				t.Fatalf("nothing shed for %s (released %v, shed %v)", tt.want, released, shed)
			}
			if tt.rooms {
				// B's requests go first until B holds as many tokens in
				// flight as A: all of them but the last few.
				ta.a.mu.Lock()
				var queuedB uint32
				if tl := ta.a.models["m"].load["B"]; tl != nil {
					queuedB = tl.queued
				}
				ta.a.mu.Unlock()
				if released["B"]+int(queuedB) != arrivals/10 || queuedB > 1 {
					t.Fatalf("released %v, %d of B queued: every B request should be released or next", released, queuedB)
				}
			}
			for _, ra := range retries {
				if s, err := strconv.Atoi(ra); err != nil || s < 1 || time.Duration(s)*time.Second > max(tt.timeout, time.Second) {
					t.Fatalf("Retry-After %q outside [1 s, the queue timeout]", ra)
				}
			}
			for _, v := range []string{shedQueueFull, shedTimeout} {
				if got := testutil.ToFloat64(ta.m.shed.WithLabelValues(v)); got != float64(shed[v]) {
					t.Fatalf("shed_total{%s} = %v, want %d", v, got, shed[v])
				}
			}
			ta.stop() // the rest leave
			ta.wg.Wait()
			for len(ta.results) > 0 {
				<-ta.results
			}
			for _, tk := range running {
				tk.done()
			}
			ta.a.mu.Lock()
			defer ta.a.mu.Unlock()
			if mq := ta.a.models["m"]; mq.queued != 0 || mq.bytes != 0 || len(mq.load) != 0 {
				t.Fatalf("left: %d queued, %d bytes, %d tenants", mq.queued, mq.bytes, len(mq.load))
			}
		})
	}
}

// TestAdmissionRoomBoundsBurst: requests arriving together on a word of
// room go on only as many as it counts; the rest queue until the
// decisions of those that went say there is room still, each counting
// the requests routed before it, not those still pending. The most the
// router counts says plenty: no bound.
func TestAdmissionRoomBoundsBurst(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	ta.a.watchedRoom("m", false, 2)
	var went []admitted
	for i := range 3 {
		ta.queue(context.Background(), fmt.Sprint("r", i), "x", 0, 10, 10)
		if i < 2 {
			went = append(went, ta.next())
		}
	}
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: a burst of 3 on room for 2 queued %d", d, d)
	}
	// r0's decision: room for one more after it, but r1 went on that room
	// too and has not been decided yet.
	ta.a.decidedRoom(withTicket(context.Background(), went[0].tk), "m", false, 1)
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: released on a room a pending request holds", d)
	}
	// r1's decision, counting r0 and r1: room for one.
	ta.a.decidedRoom(withTicket(context.Background(), went[1].tk), "m", false, 1)
	r2 := ta.next()
	if r2.name != "r2" || r2.err != nil {
		t.Fatalf("got %s %v", r2.name, r2.err)
	}
	ta.a.decidedRoom(withTicket(context.Background(), r2.tk), "m", false, uint32(core.MaxRoom))
	for i := range core.MaxRoom + 1 {
		ta.queue(context.Background(), fmt.Sprint("p", i), "x", 0, 10, 10)
		ta.next()
	}
}

// TestAdmissionLastRoom: with room for one request left, a request of a
// tenant with more queued behind it takes it only when no other tenant
// active lately has a better claim: one in a higher band, or in the same
// band without a backlog of its own (whatever it holds in flight) or
// served less lately (tokens let go, aged; here the others' requests in
// flight are their service). A request with nothing of its tenant
// queued behind it takes it whoever else is active. A request with more
// of its tenant behind it, released while such another tenant is active,
// is routed as a backlog's (the router leaves the earliest slots to the
// others), whether the last room was kept from it or not.
func TestAdmissionLastRoom(t *testing.T) {
	type other struct {
		tenant   string
		prio     int32
		inflight uint64 // tokens; 0: its request ended
		ago      time.Duration
		// backlog: it queues two requests too, after the tenant's.
		backlog bool
	}
	tests := []struct {
		name   string
		others []other
		prio   int32
		// backlog: a second request of the tenant queued behind.
		backlog bool
		kept    bool
		// small: the router never counted room for two.
		small bool
		// crowding: the request, once released, is routed as one of a
		// backlog that crowds another tenant (RouteRequest.backlog).
		crowding bool
	}{
		{"a fleet with room for one at most", []other{{"b", 0, 100, time.Second, false}}, 0, true, false, true, true},
		{"alone", nil, 0, true, false, false, false},
		{"no backlog, another with less in flight", []other{{"b", 0, 100, time.Second, false}}, 0, false, false, false, false},
		{"another with less in flight", []other{{"b", 0, 100, time.Second, false}}, 0, true, true, false, true},
		{"another with nothing in flight, active lately", []other{{"b", 0, 0, 10 * time.Second, false}}, 0, true, true, false, true},
		{"another with less in flight, not active lately", []other{{"b", 0, 0, activeWindow + time.Second, false}}, 0, true, false, false, false},
		{"another with more in flight, without a backlog", []other{{"b", 0, 5000, time.Second, false}}, 0, true, true, false, true},
		{"another with as much in flight, without a backlog", []other{{"b", 0, 1000, time.Second, false}}, 0, true, true, false, true},
		{"another with a backlog, served more", []other{{"b", 0, 5000, time.Second, true}}, 0, true, false, false, false},
		{"another with a backlog, served as much at the same time", []other{{"b", 0, 1000, 0, true}}, 0, true, false, false, false},
		{"another in a higher band with more in flight", []other{{"h", 10, 5000, time.Second, false}}, 0, true, true, false, true},
		{"another in a lower band with less in flight", []other{{"l", -1, 100, time.Second, false}}, 0, true, false, false, false},
		{"a higher band than every other", []other{{"b", 0, 100, time.Second, false}}, 10, true, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			now := time.Unix(1000, 0)
			ta.a.now = func() time.Time { return now }
			plenty := uint32(core.MaxRoom)
			if tt.small {
				plenty = 1
			}
			ta.a.watchedRoom("m", false, plenty)
			// The tenant asking holds 1,000 tokens in flight. Every
			// request in flight has had its decision: none is pending.
			ta.a.decidedRoom(withTicket(context.Background(), ta.inflight("a", 1000)), "m", false, plenty)
			start := now
			for _, o := range tt.others {
				now = start.Add(-o.ago)
				tk, err := ta.a.admit(context.Background(), "m", o.tenant, o.prio, max(o.inflight, 1), 10)
				if err != nil {
					t.Fatal(err)
				}
				ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
				if o.inflight == 0 {
					tk.done()
				}
			}
			now = start
			// Queued while saturated, then room for one.
			ta.a.watchedRoom("m", true, 0)
			ta.queue(context.Background(), "a1", "a", tt.prio, 10, 10)
			queued := 1
			if tt.backlog {
				ta.queue(context.Background(), "a2", "a", tt.prio, 10, 10)
				queued++
			}
			for _, o := range tt.others {
				if o.backlog {
					now = start.Add(time.Millisecond)
					ta.queue(context.Background(), o.tenant+"1", o.tenant, o.prio, 10, 10)
					ta.queue(context.Background(), o.tenant+"2", o.tenant, o.prio, 10, 10)
					queued += 2
				}
			}
			ta.a.watchedRoom("m", false, 1)
			if kept := ta.depth() == queued; kept != tt.kept {
				t.Fatalf("the last room kept from the request: %v, want %v", kept, tt.kept)
			}
			if !tt.kept {
				r := ta.next()
				if r.name != "a1" || r.err != nil {
					t.Fatalf("got %s %v", r.name, r.err)
				}
				if r.tk.backlog != tt.crowding {
					t.Fatalf("a1 routed as a crowding backlog's: %v, want %v", r.tk.backlog, tt.crowding)
				}
				return
			}
			// Room for two: it goes whoever else is active (and a2 with
			// it, on the room left, with nothing queued behind it).
			ta.a.watchedRoom("m", false, 2)
			got := map[string]bool{}
			for range queued {
				r := ta.next()
				if r.err != nil {
					t.Fatalf("%s: %v", r.name, r.err)
				}
				got[r.name] = true
				// a2 has nothing queued behind it: not a backlog.
				if want := tt.crowding && r.name == "a1"; r.tk.backlog != want {
					t.Fatalf("%s routed as a crowding backlog's: %v, want %v", r.name, r.tk.backlog, want)
				}
			}
			if !got["a1"] || !got["a2"] {
				t.Fatalf("released %v on room for two, want a1 and a2", got)
			}
		})
	}
}

// TestAdmissionKeptRoomGoesToTheQueued: the last room, kept from a
// tenant's backlog for a tenant with a better claim, goes to a tenant
// queued here without a backlog (a request that came while the backlog
// was queued, which would have taken it at once with nothing queued),
// whatever it holds in flight, rather than stay kept while it waits; and
// such a request is routed to keep within the router's limits
// (RouteRequest.within_limit). Tenant a holds 1,000 tokens in flight and
// queues two requests; c, active a second ago, holds none (the room is
// kept from a for it).
func TestAdmissionKeptRoomGoesToTheQueued(t *testing.T) {
	tests := []struct {
		name string
		// bInflight are b's tokens in flight, bQueued its requests
		// queued; idle says c is active.
		bInflight uint64
		bQueued   int
		idle      bool
		// want is the request released on room for one ("": none).
		want string
	}{
		{"kept for an idle tenant: to one queued without a backlog, more in flight", 5000, 1, true, "b1"},
		{"kept for nobody (b has a backlog too): the least in flight, a's", 5000, 2, false, "a1"},
		{"one queued with less in flight: first anyway", 0, 1, true, "b1"},
		{"two backlogs: kept", 5000, 2, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			now := time.Unix(1000, 0)
			ta.a.now = func() time.Time { return now }
			plenty := uint32(core.MaxRoom)
			ta.a.watchedRoom("m", false, plenty)
			ta.a.decidedRoom(withTicket(context.Background(), ta.inflight("a", 1000)), "m", false, plenty)
			if tt.bInflight > 0 {
				ta.a.decidedRoom(withTicket(context.Background(), ta.inflight("b", tt.bInflight)), "m", false, plenty)
			}
			if tt.idle {
				now = now.Add(-time.Second)
				tk := ta.inflight("c", 10)
				ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
				tk.done()
				now = now.Add(time.Second)
			}
			ta.a.watchedRoom("m", true, 0)
			ta.queue(context.Background(), "a1", "a", 0, 1000, 10)
			ta.queue(context.Background(), "a2", "a", 0, 1000, 10)
			for i := range tt.bQueued {
				ta.queue(context.Background(), fmt.Sprintf("b%d", i+1), "b", 0, 1000, 10)
			}
			queued := 2 + tt.bQueued
			ta.a.watchedRoom("m", false, 1)
			if tt.want == "" {
				if d := ta.depth(); d != queued {
					t.Fatalf("depth %d on room for one, want %d (kept)", d, queued)
				}
				return
			}
			r := ta.next()
			if r.err != nil || r.name != tt.want {
				t.Fatalf("released %s (%v), want %s", r.name, r.err, tt.want)
			}
			if d := ta.depth(); d != queued-1 {
				t.Fatalf("depth %d after room for one, want %d", d, queued-1)
			}
			// b's request takes room held back from a's backlog: within
			// the limits; a's is the backlog's own, not crowding anyone.
			if want := tt.want == "b1"; r.tk.withinLimit != want || r.tk.backlog {
				t.Fatalf("%s routed within the limit: %v, as a crowding backlog's: %v; want %v, false", r.name, r.tk.withinLimit, r.tk.backlog, want)
			}
		})
	}
}

// TestKeptRooms: the rooms kept from a flood for the tenants it crowds,
// whose requests are a share rho of the fleet's, so that 90% of theirs
// find one free on arrival: k = ceil(ln 0.1 / ln rho), at least 1, at
// most the fleet's capacity less one (1 when it is not known).
func TestKeptRooms(t *testing.T) {
	tests := []struct {
		name     string
		rho      float64
		capacity int
		want     int
	}{
		// ln 0.1 / ln 0.2 = -2.303 / -1.609 = 1.43.
		{"a fifth: two", 0.2, 8, 2},
		// ln 0.1 / ln 0.5 = 3.32.
		{"a half: four", 0.5, 8, 4},
		// 0.1^1 is 0.1 itself: one is enough.
		{"a tenth: one", 0.1, 8, 1},
		// ln 0.1 / ln 0.05 = 0.77.
		{"a twentieth: one", 0.05, 8, 1},
		{"no share yet: one", 0, 8, 1},
		{"all of it: the capacity less one", 1, 8, 7},
		{"a half on a fleet of room 4: three", 0.5, 4, 3},
		{"a fifth on a fleet of room 2: one", 0.2, 2, 1},
		{"a fifth, capacity not known: one", 0.2, 0, 1},
		{"a fleet of room 1: one", 0.5, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keptRooms(tt.rho, tt.capacity); got != tt.want {
				t.Fatalf("keptRooms(%g, %d) = %d, want %d", tt.rho, tt.capacity, got, tt.want)
			}
		})
	}
}

// TestAdmissionKeptRooms: a flood's backlog (tenant a, 800 tokens let go)
// is held that many rooms short of what the router counts, for tenant b
// (its service lately bServed tokens, a share of the fleet's; a's own
// released requests, a token each, change it by less than a rounding), as
// keptRooms says of b's share and the fleet's capacity: of room rooms,
// room less the kept go to a.
func TestAdmissionKeptRooms(t *testing.T) {
	tests := []struct {
		name     string
		bServed  uint64
		bAgo     time.Duration
		bPrio    int32
		capacity uint32
		room     uint32
		// released are a's requests let go on room.
		released int
	}{
		// 200 of 1,000: rho 0.2, two kept.
		{"a fifth, room for three of four: two kept", 200, 0, 0, 4, 3, 1},
		{"a fifth, room for two: both kept", 200, 0, 0, 4, 2, 0},
		// 800 of 1,600: four, capped at three.
		{"a half, on a fleet of room 4: three kept", 800, 0, 0, 4, 4, 1},
		{"a half, on a fleet of room 8: four kept", 800, 0, 0, 8, 6, 2},
		// 40 of 840 (rho 0.048).
		{"a twentieth: one kept", 40, 0, 0, 4, 3, 2},
		{"a fleet of room 2: one kept", 200, 0, 0, 2, 2, 1},
		{"capacity not counted: one kept", 200, 0, 0, 0, 3, 2},
		{"b not active lately: none kept", 200, activeWindow + time.Second, 0, 4, 2, 2},
		{"b in a higher band: two kept", 200, 0, 10, 4, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			now := time.Unix(1000, 0)
			ta.a.now = func() time.Time { return now }
			plenty := uint32(core.MaxRoom)
			ta.a.watchedFleet("m", false, plenty, tt.capacity)
			// a's request in flight has its first token: a's backlog is
			// held by the kept rooms alone (TestAdmissionFloodHeld).
			atk := ta.inflight("a", 800)
			ta.a.decidedRoom(withTicket(context.Background(), atk), "m", false, plenty)
			atk.firstToken()
			now = now.Add(-tt.bAgo)
			tk, err := ta.a.admit(context.Background(), "m", "b", tt.bPrio, tt.bServed, 10)
			if err != nil {
				t.Fatal(err)
			}
			ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
			tk.done()
			now = now.Add(tt.bAgo)
			ta.a.watchedFleet("m", true, 0, tt.capacity)
			// Enough that what is left after the releases is still a
			// backlog.
			const queued = 6
			for i := range queued {
				ta.queue(context.Background(), fmt.Sprintf("a%d", i+1), "a", 0, 1, 10)
			}
			ta.a.watchedFleet("m", false, tt.room, tt.capacity)
			if got := queued - ta.depth(); got != tt.released {
				t.Fatalf("released %d of a's on room for %d, want %d", got, tt.room, tt.released)
			}
		})
	}
}

// TestAdmissionFloodHeld: while rooms are kept from a flood (b, a fifth
// of the service, expected), the flood's next request goes only while it
// has fewer prompts without a first token than the fleet's capacity less
// the rooms kept, whatever room the router counts; its first token lets
// the next go.
func TestAdmissionFloodHeld(t *testing.T) {
	tests := []struct {
		name     string
		capacity uint32
		room     uint32
		// prefilling and decoding are a's requests in flight without and
		// with a first token; bAgo how long ago b sent.
		prefilling, decoding int
		bAgo                 time.Duration
		// released are a's requests let go on the room; then, after the
		// first token of one of a's prefilling, released too.
		released, thenReleased int
	}{
		// Two workers, one prompt each within the threshold: capacity 2,
		// one kept. Room 2 with a's prompt in prefill is its worker's
		// room behind it (the prompt near done) and the idle worker:
		// a's next would queue behind its own.
		{"capacity 2, one kept, a's prompt in prefill, room 2: held until its first token", 2, 2, 1, 0, 0, 0, 1},
		{"capacity 2, one kept, a's prompt decoding, room 2: one", 2, 2, 0, 1, 0, 1, 0},
		// Capacity 4, a fifth: two kept; a may have two prompts in
		// prefill.
		{"capacity 4, two kept, one in prefill, room 4: one", 4, 4, 1, 0, 0, 1, 1},
		{"capacity 4, two kept, two in prefill, room 4: held", 4, 4, 2, 0, 0, 0, 1},
		// b not expected: nothing kept, a goes as the room says.
		{"b not active lately: nothing held, room 2: two", 2, 2, 1, 0, activeWindow + time.Second, 2, 0},
		{"capacity not known: one kept, nothing held, room 3: two", 0, 3, 1, 0, 0, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			now := time.Unix(1000, 0)
			ta.a.now = func() time.Time { return now }
			plenty := uint32(core.MaxRoom)
			ta.a.watchedFleet("m", false, plenty, tt.capacity)
			// a: 800 tokens served lately, over its requests in flight.
			var prefilling []*ticket
			n := tt.prefilling + tt.decoding
			for i := range n {
				tk := ta.inflight("a", 800/uint64(n))
				ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
				if i < tt.decoding {
					tk.firstToken()
				} else {
					prefilling = append(prefilling, tk)
				}
			}
			// b: 200 of the 1,000 tokens served lately, rho 0.2.
			now = now.Add(-tt.bAgo)
			tk, err := ta.a.admit(context.Background(), "m", "b", 0, 200, 10)
			if err != nil {
				t.Fatal(err)
			}
			ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
			tk.done()
			now = now.Add(tt.bAgo)
			ta.a.watchedFleet("m", true, 0, tt.capacity)
			const queued = 6
			for i := range queued {
				ta.queue(context.Background(), fmt.Sprintf("a%d", i+1), "a", 0, 1, 10)
			}
			ta.a.watchedFleet("m", false, tt.room, tt.capacity)
			if got := queued - ta.depth(); got != tt.released {
				t.Fatalf("released %d of a's on room for %d, want %d", got, tt.room, tt.released)
			}
			if len(prefilling) == 0 {
				return
			}
			prefilling[0].firstToken()
			if got := queued - ta.depth(); got != tt.released+tt.thenReleased {
				t.Fatalf("released %d of a's after a first token, want %d", got, tt.released+tt.thenReleased)
			}
		})
	}
}

// TestExpectFor: a tenant sending rate requests a second is expected for
// ln(100)/rate after its last request (a gap that long comes once in a
// hundred), at most activeWindow; a tenant of unknown rate for the whole
// window.
func TestExpectFor(t *testing.T) {
	tests := []struct {
		name string
		rate float64
		want time.Duration
	}{
		{"unknown", 0, activeWindow},
		{"not a number", math.NaN(), activeWindow},
		// 4.60517 / 0.6.
		{"0.6 a second: 7.68 s", 0.6, 7675283643 * time.Nanosecond},
		// 4.60517 / 10.
		{"10 a second: 461 ms", 10, 460517018 * time.Nanosecond},
		// 4.60517 / 0.1 = 46 s, past the window.
		{"0.1 a second: the window", 0.1, activeWindow},
		{"one a minute: the window", 1.0 / 60, activeWindow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expectFor(tt.rate); (got - tt.want).Abs() > time.Microsecond {
				t.Errorf("expectFor(%g) = %v, want %v", tt.rate, got, tt.want)
			}
		})
	}
}

// TestRequestRate: a tenant's rate from its arrivals, the gaps between
// them aged e^(-age/30 s) by the time since each ended, over their time
// plus expectPrior (30 s / ln 100 = 6.51442 s). Worked by hand:
//
//   - 0, 2 s: 1 gap of 2 s: 1 / 8.51442 = 0.117448.
//   - 0, 1, 3 s: the 1 s gap aged by the 2 s one, e^(-2/30) = 0.935507:
//     1.935507 gaps over 2.935507 s: 1.935507 / 9.449924 = 0.204817.
//   - 0, 1, 2 s: e^(-1/30) = 0.967216: 1.967216 over 1.967216 s:
//     1.967216 / 8.481633 = 0.231938.
//   - 13 evenly at 0.6 a second (20 s): 12 gaps of 5/3 s, d = e^(-1/18):
//     (1-d^12)/(1-d) = 9.004036 gaps over 15.006726 s: 0.418381.
//   - two at once: 1 gap of 0 s: 1 / 6.51442 = 0.153506.
//   - a gap past activeWindow starts afresh: 0, 31 s is one request;
//     0, 40, 41 s is 1 gap of 1 s: 1 / 7.51442 = 0.133078.
func TestRequestRate(t *testing.T) {
	evenly := make([]float64, 13)
	for i := range evenly {
		evenly[i] = float64(i) * 5 / 3
	}
	tests := []struct {
		name string
		at   []float64 // seconds
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{0}, 0},
		{"two, 2 s apart", []float64{0, 2}, 0.117448},
		{"gaps of 1 and 2 s", []float64{0, 1, 3}, 0.204817},
		{"gaps of 1 s", []float64{0, 1, 2}, 0.231938},
		{"0.6 a second for 20 s", evenly, 0.418381},
		{"two at once", []float64{5, 5}, 0.153506},
		{"a silence past the window", []float64{0, 31}, 0},
		{"a silence past the window, then a gap of 1 s", []float64{0, 40, 41}, 0.133078},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := time.Unix(1000, 0)
			var gaps, gapTime float64
			var last time.Time
			for _, s := range tt.at {
				at := base.Add(time.Duration(s * float64(time.Second)))
				gaps, gapTime = addGap(gaps, gapTime, last, at)
				last = at
			}
			if got := requestRate(gaps, gapTime); math.Abs(got-tt.want) > 1e-6 {
				t.Errorf("rate %.6f, want %.6f (gaps %g over %g s)", got, tt.want, gaps, gapTime)
			}
		})
	}
}

// TestAdmissionExpected: the last room of a fleet of capacity 2 (k = 1) is
// kept from a's flood while b's next request is expected: for
// expectFor(b's rate) after b's last request, the whole activeWindow when
// b sent one request; once b is not expected, the flood takes both rooms.
func TestAdmissionExpected(t *testing.T) {
	evenly := make([]float64, 13)
	for i := range evenly {
		evenly[i] = float64(i) * 5 / 3
	}
	tests := []struct {
		name string
		// b are b's arrivals in seconds; ago is how long before the room
		// the last of them came.
		b   []float64
		ago time.Duration
		// released are a's requests let go on room for two.
		released int
	}{
		{"one request 29 s ago: kept", []float64{0}, 29 * time.Second, 1},
		{"one request 31 s ago: none kept", []float64{0}, 31 * time.Second, 2},
		// Rate 0.418381: expected for 11.007 s.
		{"0.6 a second, 10 s ago: kept", evenly, 10 * time.Second, 1},
		{"0.6 a second, 12 s ago: none kept", evenly, 12 * time.Second, 2},
		// Rate 0.231938: expected for 19.855 s.
		{"gaps of 1 s, 19 s ago: kept", []float64{0, 1, 2}, 19 * time.Second, 1},
		{"gaps of 1 s, 21 s ago: none kept", []float64{0, 1, 2}, 21 * time.Second, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, AdmissionConfig{})
			room := time.Unix(1000, 0)
			last := time.Duration(tt.b[len(tt.b)-1] * float64(time.Second))
			start := room.Add(-tt.ago - last)
			now := start
			ta.a.now = func() time.Time { return now }
			plenty := uint32(core.MaxRoom)
			for _, s := range tt.b {
				now = start.Add(time.Duration(s * float64(time.Second)))
				tk, err := ta.a.admit(context.Background(), "m", "b", 0, 20, 10)
				if err != nil {
					t.Fatal(err)
				}
				ta.a.decidedRoom(withTicket(context.Background(), tk), "m", false, plenty)
				tk.done()
			}
			now = room
			ta.a.watchedFleet("m", false, plenty, 2)
			// a's request in flight is decoding: only the kept room holds
			// a's backlog (TestAdmissionFloodHeld).
			atk := ta.inflight("a", 800)
			ta.a.decidedRoom(withTicket(context.Background(), atk), "m", false, plenty)
			atk.firstToken()
			ta.a.watchedFleet("m", true, 0, 2)
			const queued = 6
			for i := range queued {
				ta.queue(context.Background(), fmt.Sprintf("a%d", i+1), "a", 0, 1, 10)
			}
			ta.a.watchedFleet("m", false, 2, 2)
			if got := queued - ta.depth(); got != tt.released {
				t.Fatalf("released %d of a's on room for 2, want %d", got, tt.released)
			}
		})
	}
}
