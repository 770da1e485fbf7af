package frontend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// TestAdmissionOrder: while saturated, each request that ends releases one
// queued request, the highest band first, in arrival order within a band
// and tenant.
func TestAdmissionOrder(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	var running []*ticket
	for range 6 {
		running = append(running, ta.inflight("x", 10))
	}
	ta.a.decided("m", true)
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
	// Only the running requests end: each releases one.
	var got []string
	for _, tk := range running {
		tk.done()
		r := ta.next()
		if r.err != nil {
			t.Fatal(r.err)
		}
		got = append(got, r.name)
	}
	if g, want := strings.Join(got, " "), "top-1 high-1 high-2 low-1 low-2 shed-1"; g != want {
		t.Fatalf("released %s, want %s", g, want)
	}
	if n := testutil.CollectAndCount(ta.m.wait); n != 1 {
		t.Fatalf("wait histogram series %d", n)
	}
}

// TestAdmissionFairness: within a band, the tenant with the fewest tokens
// in flight goes first: B, sending a fifth of A's requests, gets its
// requests out before A's backlog, until it holds as many tokens as A.
func TestAdmissionFairness(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{})
	var running []*ticket
	for range 4 {
		running = append(running, ta.inflight("A", 100))
	}
	ta.a.decided("m", true)
	ctx := context.Background()
	for i := range 10 {
		ta.queue(ctx, fmt.Sprint("A", i), "A", 0, 100, 10)
		if i%5 == 0 {
			ta.queue(ctx, fmt.Sprint("B", i/5), "B", 0, 100, 10)
		}
	}
	var got []string
	for _, tk := range running {
		tk.done()
		got = append(got, ta.next().name)
	}
	// 4 released: B holds nothing, so B0, then B1 (B: 100 < A: 300),
	// then A's oldest two.
	if g := strings.Join(got, " "); g != "B0 B1 A0 A1" {
		t.Fatalf("released %s, want B0 B1 A0 A1", g)
	}
}

// TestAdmissionTimeout: a request queued past --queue-timeout is shed
// with 503 reason timeout; the queue is empty after.
func TestAdmissionTimeout(t *testing.T) {
	ta := newTestAdmission(t, AdmissionConfig{QueueTimeout: time.Millisecond})
	ta.inflight("x", 10)
	ta.a.decided("m", true)
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
// shed; past the model's (4 bands' worth) the oldest of the lowest band,
// sheddable first, and never a band above the arriving request's.
func TestAdmissionShedding(t *testing.T) {
	tests := []struct {
		name string
		cfg  AdmissionConfig
		// queued in order: name:priority:bytes
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAdmission(t, tt.cfg)
			ta.inflight("x", 10)
			ta.a.decided("m", true)
			for _, q := range tt.queue {
				var name string
				var prio int32
				var bytes int64
				if _, err := fmt.Sscanf(strings.ReplaceAll(q, ":", " "), "%s %d %d", &name, &prio, &bytes); err != nil {
					t.Fatal(err)
				}
				ta.queue(context.Background(), name, "x", prio, 1, bytes)
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
	ta.a.decided("m", true)
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
	ta.a.decided("m", true)
	for i := range 3 {
		ta.queue(context.Background(), fmt.Sprint("q", i), "x", 0, 10, 10)
	}
	ta.a.watched("m", false)
	if r := ta.next(); r.name != "q0" {
		t.Fatalf("got %s", r.name)
	}
	if d := ta.depth(); d != 2 {
		t.Fatalf("depth %d: released more than one before a decision", d)
	}
	ta.a.decided("m", false)
	if r := ta.next(); r.name != "q1" {
		t.Fatalf("got %s", r.name)
	}
	ta.a.decided("m", true)
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: released while saturated", d)
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
	ta.a.decided("m", true)
	ta.queue(context.Background(), "probe", "x", 0, 10, 10)
	r := ta.next()
	if r.name != "probe" || r.err != nil {
		t.Fatalf("got %s %v", r.name, r.err)
	}
	ta.queue(context.Background(), "waits", "x", 0, 10, 10)
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d: a second request went on before the probe's decision", d)
	}
	ta.a.decided("m", true) // the probe's decision: saturated
	if d := ta.depth(); d != 1 {
		t.Fatalf("depth %d, want 1 while saturated", d)
	}
	r.tk.done() // the probe ends: its place goes to the next
	if r := ta.next(); r.name != "waits" {
		t.Fatalf("got %s", r.name)
	}
}

// TestKeyFilePriority: a key file line's priority= is its requests' band.
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
