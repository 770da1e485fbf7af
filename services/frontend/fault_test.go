package frontend_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/ctl"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
)

// ghost registers, on a lease the test keeps alive, a copy of mocker m's
// instance and model card, then stops m: the registry goes on listing a
// worker whose address refuses connections, as after a kill -9 whose lease
// has not expired yet (or cannot expire, etcd being away). It returns the
// ghost's instance id.
func (s *stack) ghost(m *mockerHandle) uint64 {
	s.t.Helper()
	id := s.ghostAs(m, nil)
	m.kill()
	return id
}

// ghostAs registers a copy of mocker m's instance and model card, changed
// by change when set, on a lease the test keeps alive, and returns the
// copy's instance id; m runs on.
func (s *stack) ghostAs(m *mockerHandle, change func(*registryv1.Instance)) uint64 {
	t := s.t
	t.Helper()
	ctx := testCtx(t.(*testing.T))
	dc, err := registryclient.Dial([]string{s.regAddr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	sess, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(ctx) })
	in := proto.Clone(m.w.Instance()).(*registryv1.Instance)
	in.InstanceId = 0
	if change != nil {
		change(in)
	}
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cards.Cards {
		if c.InstanceId == m.w.InstanceID() {
			c = proto.Clone(c).(*registryv1.ModelCard)
			c.InstanceId = 0
			if err := sess.RegisterModel(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sess.ID()
}

// TestUnreachableWorkerIsFenced: of two registered workers one refuses
// connections (killed, its lease still alive). The first request sent to it
// migrates and fences it: every request succeeds, and the dead worker gets
// one attempt, plus at most one probe per fence period, never one per
// request. With the live worker gone too, the answer is a 503 saying that no
// worker is reachable.
func TestUnreachableWorkerIsFenced(t *testing.T) {
	t.Parallel()
	modes := []string{"kv"} // through the router service
	if !testing.Short() {
		modes = append(modes, "round-robin") // in process
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			s := startStack(t, stackOpts{mode: mode, migrationLimit: 2})
			live := s.addMocker(0)
			doomed := s.addMocker(0)
			s.waitInstances(2)
			// The first request loads the model's tokenizer: not part of
			// what is measured.
			if _, err := s.client.Chat.Completions.New(ctx, chatParams("warm up", 1)); err != nil {
				t.Fatal(err)
			}
			dead := s.ghost(doomed)
			s.waitInstances(2)

			const requests = 30
			start := time.Now()
			for i := range requests {
				if _, err := s.client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("question %d", i), 4)); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			elapsed := time.Since(start)
			tried := s.metric("switchyard_frontend_worker_requests_total", fmt.Sprintf(`instance="%x"`, dead))
			// Fenced for at least 500 ms after each failure.
			bound := 1 + float64(elapsed/(500*time.Millisecond))
			if tried < 1 || tried > bound || tried >= requests/2 {
				t.Fatalf("the unreachable worker got %v of %d attempts in %v, want 1 to %v", tried, requests, elapsed, bound)
			}
			t.Logf("%s: %d requests, all answered; %v attempt(s) on the unreachable worker in %v", mode, requests, tried, elapsed.Round(time.Millisecond))
			s.checkFenced(ctx, dead, live.w.InstanceID())

			live.kill()
			s.waitInstances(1)
			code, body := s.post("/v1/chat/completions", `{"model":"`+testModel+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, nil)
			e := errorObject(t, body)
			if msg, _ := e["message"].(string); code != 503 || !strings.Contains(msg, "no reachable worker for model "+testModel) {
				t.Fatalf("with only the unreachable worker left: %d %v, want 503 no reachable worker", code, e)
			}
		})
	}
}

// tally counts a client loop's requests.
// tally counts a client loop's requests; first is the first failure's error.
type tally struct {
	tried, ok int
	first     error
}

func (t tally) String() string {
	if t.first != nil {
		return fmt.Sprintf("%d/%d (first failure: %v)", t.ok, t.tried, t.first)
	}
	return fmt.Sprintf("%d/%d", t.ok, t.tried)
}

// eventTally counts KV events at both ends: what the workers queued, what
// the eventbus acknowledged and what they gave up on, and what the router
// service applied.
type eventTally struct{ queued, published, givenUp, applied uint64 }

// lost is what the workers queued and the router never applied.
func (e eventTally) lost() uint64 { return e.queued - min(e.applied, e.queued) }

func (e eventTally) String() string {
	return fmt.Sprintf("%d queued, %d acknowledged, %d given up, %d applied, %d lost", e.queued, e.published, e.givenUp, e.applied, e.lost())
}

// kvEvents waits until the router service has applied every KV event the
// workers queued (or 90 s went by, past the worker's minute of retrying a
// batch: the rest is lost) and counts both ends. It needs stackOpts.bridgeKV.
func (s *stack) kvEvents(workers []*mockerHandle) eventTally {
	s.t.Helper()
	count := func() eventTally {
		var e eventTally
		for _, w := range workers {
			q, p, l := w.w.KVEventCounts()
			e.queued += q
			e.published += p
			e.givenUp += l
		}
		e.applied = s.router.Core().Stats().GetEventsApplied()
		return e
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		e := count()
		if e.applied >= e.queued || e.published+e.givenUp == e.queued && e.givenUp > 0 || time.Now().After(deadline) {
			return e
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keepAliveMark is a worker's session and the keep-alives the registry had
// answered on it at one moment.
type keepAliveMark struct {
	w        *mockerHandle
	sess     *registryclient.Session
	answered uint64
}

func markKeepAlive(w *mockerHandle) keepAliveMark {
	sess := w.w.Session()
	p, _ := sess.Progress()
	return keepAliveMark{w: w, sess: sess, answered: p.Answered}
}

// renewed reports whether the worker's lease was refreshed since the mark,
// or replaced by a new one (granted, so registered, after the mark).
func (m keepAliveMark) renewed() bool {
	sess := m.w.w.Session()
	if sess != m.sess {
		return true
	}
	p, _ := sess.Progress()
	return p.Answered > m.answered
}

// checkWorkers fails t for every worker that exited and returns how many.
func checkWorkers(t *testing.T, fault string, workers []*mockerHandle) int {
	t.Helper()
	lost := 0
	for _, w := range workers {
		select {
		case err := <-w.done:
			lost++
			w.done <- err // for kill at cleanup
			t.Errorf("%s: a worker exited: %v", fault, err)
		default:
		}
	}
	return lost
}

// clientLoop sends chats until stop closes (or n were sent, n > 0) and
// counts them.
func (s *stack) clientLoop(ctx context.Context, t *testing.T, stop <-chan struct{}, n int, what string) tally {
	var tl tally
	for i := 0; n == 0 || i < n; i++ {
		select {
		case <-stop:
			return tl
		default:
		}
		tl.tried++
		_, err := s.client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("%s question %d", what, i), 2))
		if err == nil {
			tl.ok++
		} else if tl.first == nil {
			tl.first = err
		}
		if err != nil && ctx.Err() != nil {
			t.Error(ctx.Err())
			return tl
		}
	}
	return tl
}

// TestEtcdOutage stops etcd under a live fleet (two mockers, the router
// service, the frontend) while a client loop sends chats, then brings it
// back on its data. No worker exits; requests keep succeeding during the
// outage, since serving them needs no etcd; afterwards every worker is
// registered (etcd extends its leases when it restarts, so with the same
// instance id) and every request succeeds. The router service follows the
// workers' KV events meanwhile (they need no etcd): every event the workers
// published is applied. With -short: 3 s and 6 s, either side of a 5 s lease
// TTL; make test-long: 3, 15, 45 and 120 s with the default TTL.
//
// Beside the package's other stacks the tokenizer is already parsed in the
// process, so etcd may stop within a second of the workers' registrations,
// before their first refresh: the registry keeps its etcd keep-alive stream
// open from its start and checks the lease tokens it knows without etcd, so
// the leases live through etcd's graceful stop too
// (pkg/registryclient TestSessionKeepsLeaseThroughGracefulEtcdStop).
func TestEtcdOutage(t *testing.T) {
	t.Parallel()
	outages, ttl := []time.Duration{3 * time.Second, 15 * time.Second, 45 * time.Second, 120 * time.Second}, 10*time.Second
	if testing.Short() {
		// One outage shorter than the TTL and one longer (etcd gives every
		// lease its TTL again when it returns). Not shorter: with every
		// service in this one process under the race detector on a loaded
		// machine, a keep-alive's round trip has taken over a second, and
		// a 2 s lease (refreshed at half its TTL) expired before any outage.
		outages, ttl = []time.Duration{3 * time.Second, 6 * time.Second}, 5*time.Second
	}
	// Longer than testCtx's minute: the long form's outages alone take three.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startStack(t, stackOpts{mode: "kv", migrationLimit: 2, leaseTTL: ttl, bridgeKV: true})
	workers := []*mockerHandle{s.addMocker(0), s.addMocker(0)}
	s.waitInstances(2)
	ids := func() []uint64 { return []uint64{workers[0].w.InstanceID(), workers[1].w.InstanceID()} }
	loop := func(stop <-chan struct{}, n int) tally { return s.clientLoop(ctx, t, stop, n, "etcd outage") }
	if tl := loop(nil, 2); tl.ok != 2 { // loads the tokenizer
		t.Fatalf("before any outage: %v requests succeeded", tl)
	}
	for _, d := range outages {
		before := ids()
		// The times say, beside the services' logs a failure prints, what
		// happened inside the outage and what after it.
		stopping := time.Now()
		s.etcd.Stop()
		stopped := time.Now()
		stop := make(chan struct{})
		got := make(chan tally, 1)
		go func() { got <- loop(stop, 0) }()
		time.Sleep(d) // the outage itself
		close(stop)
		during := <-got
		marks := []keepAliveMark{markKeepAlive(workers[0]), markKeepAlive(workers[1])}
		s.etcd.Start()
		t.Logf("%v outage: etcd stopping at %s, stopped at %s, started again at %s", d, stopping.Format(time.StampMilli), stopped.Format(time.StampMilli), time.Now().Format(time.StampMilli))
		// Registered again within two TTLs of etcd's return: every worker's
		// keep-alive answered since etcd came back, the frontend sees both.
		// Until a refresh is answered the lease's TTL runs from etcd's
		// return, and the next outage's graceful stop (which takes seconds)
		// would let etcd expire it: the next outage starts from a renewed
		// fleet, not from one still counting down.
		deadline := time.Now().Add(2*ttl + 5*time.Second)
		for !marks[0].renewed() || !marks[1].renewed() ||
			workers[0].w.Session().Expired() || workers[1].w.Session().Expired() || s.health().Instances != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%v outage: workers not registered within two TTLs of etcd's return (frontend sees %d)", d, s.health().Instances)
			}
			time.Sleep(50 * time.Millisecond)
		}
		after := loop(nil, 20)
		lost := checkWorkers(t, fmt.Sprintf("%v etcd outage", d), workers)
		events := s.kvEvents(workers)
		t.Logf("FAULT etcd down %v: during %v ok, after %v ok, workers lost %d, instance ids %x -> %x, KV events %v", d, during, after, lost, before, ids(), events)
		if events.lost() != 0 {
			t.Errorf("%v outage: KV events %v, want none lost", d, events)
		}
		if after.ok != after.tried {
			t.Errorf("%v outage: after recovery %v requests succeeded, want all", d, after)
		}
		if during.ok != during.tried {
			t.Errorf("%v outage: during it %v requests succeeded, want all (they need no etcd)", d, during)
		}
	}
}

// TestNATSRestart stops the nats-server under a live fleet (two mockers, the
// router service following their KV events, the frontend) while a client
// loop sends chats, then starts it again on its port and store. Requests keep
// succeeding (the request plane is TCP, and routing needs no NATS: KV events
// wait); afterwards every KV event the workers published is applied by the
// router, none lost, and no worker exited. With -short: 3 s; make test-long:
// 3 s and 20 s.
func TestNATSRestart(t *testing.T) {
	t.Parallel()
	outages := []time.Duration{3 * time.Second, 20 * time.Second}
	if testing.Short() {
		outages = outages[:1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStack(t, stackOpts{mode: "kv", migrationLimit: 2, bridgeKV: true})
	workers := []*mockerHandle{s.addMocker(0), s.addMocker(0)}
	s.waitInstances(2)
	loop := func(stop <-chan struct{}, n int) tally { return s.clientLoop(ctx, t, stop, n, "nats restart") }
	if tl := loop(nil, 2); tl.ok != 2 { // loads the tokenizer
		t.Fatalf("before any outage: %v requests succeeded", tl)
	}
	port := s.nats.Addr().(*net.TCPAddr).Port
	for _, d := range outages {
		eventbustest.StopNATS(s.nats)
		stop := make(chan struct{})
		got := make(chan tally, 1)
		go func() { got <- loop(stop, 0) }()
		time.Sleep(d) // the outage itself
		close(stop)
		during := <-got
		s.nats = eventbustest.StartNATSAt(t, port, s.natsStore)
		after := loop(nil, 20)
		lost := checkWorkers(t, fmt.Sprintf("%v NATS outage", d), workers)
		events := s.kvEvents(workers)
		t.Logf("FAULT NATS down %v: during %v ok, after %v ok, workers lost %d, KV events %v", d, during, after, lost, events)
		if events.lost() != 0 {
			t.Errorf("%v NATS outage: KV events %v, want none lost", d, events)
		}
		if during.ok != during.tried || after.ok != after.tried {
			t.Errorf("%v NATS outage: %v requests succeeded during it and %v after, want all", d, during, after)
		}
	}
}

// buildMocker builds the mocker command into a temporary dir.
func buildMocker(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the kill -9 test builds the mocker and needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mocker")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/switchyard-llm/switchyard/services/mocker/cmd/mocker").CombinedOutput(); err != nil {
		t.Fatalf("go build mocker: %v\n%s", err, out)
	}
	return bin
}

// TestMockerKill9 runs one of two mockers as its own process, streams chats
// through the frontend, and kills that process with SIGKILL while some of
// the streams are on it. Its lease (30 s) outlives the test, so the registry
// goes on listing it: only fencing keeps requests off it. Every stream that
// was on it continues on the other worker (migration) and ends normally;
// afterwards every request succeeds and the dead worker gets at most its
// first failed attempt per fence period (no 502 loop). Counted: streams
// started, on the victim, migrated, failed.
func TestMockerKill9(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startStack(t, stackOpts{mode: "kv", migrationLimit: 2})
	live := s.addMocker(1)
	cmd := exec.Command(buildMocker(t), "--namespace", testNamespace, "--registry-addr", s.regAddr,
		"--eventbus-addr", s.bus.Addr().String(), "--context-length", "4096", "--speedup-ratio", "1", "--lease-ttl", "30s")
	cmd.Env = append(os.Environ(), "DYN_REQUEST_PLANE=tcp", "DYN_TCP_RPC_HOST=127.0.0.1", "DYN_TCP_RPC_PORT=0")
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
		}
		<-exited
	})
	s.waitInstances(2)
	var victim uint64
	for _, w := range s.router.Core().Stats().GetWorkers() {
		if w.InstanceId != live.w.InstanceID() {
			victim = w.InstanceId
		}
	}
	if _, err := s.client.Chat.Completions.New(ctx, chatParams("warm up", 1)); err != nil { // loads the tokenizer
		t.Fatal(err)
	}
	victimRequests := func() uint32 {
		for _, w := range s.router.Core().Stats().GetWorkers() {
			if w.InstanceId == victim {
				return w.Requests
			}
		}
		return 0
	}

	// Rounds of concurrent streams until one has streams on the victim.
	type result struct {
		text, finish string
		err          error
	}
	const streams = 8
	var results []result
	onVictim := uint32(0)
	for round := 0; onVictim == 0; round++ {
		if round == 5 {
			t.Fatal("5 rounds of streams and none went to the mocker process")
		}
		// The warm-up (or an earlier round) may have gone to the victim,
		// and the router counts a request in flight until its free
		// arrives, a moment after the answer: wait until the victim has
		// none, so that what it has next is this round's. (Subtracting
		// a count taken before the round wrapped around below zero when
		// the warm-up's free came during the round: CI at 51801b1 killed
		// with "4294967295 on it" and nothing there.)
		for deadline := time.Now().Add(10 * time.Second); victimRequests() > 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the mocker process still has %d requests in flight 10s after the last answer", victimRequests())
			}
		}
		out := make(chan result, streams)
		for i := range streams {
			go func() {
				text, finish, _, err := streamChat(ctx, s.client, chatParams(fmt.Sprintf("round %d stream %d: tell a long story", round, i), 96))
				out <- result{text, finish, err}
			}()
		}
		// Wait until the streams are routed; kill while they generate.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if onVictim = victimRequests(); onVictim > 0 {
				break
			}
		}
		if onVictim > 0 {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
			<-exited
			exited <- nil // for the cleanup
		}
		for range streams {
			results = append(results, <-out)
		}
	}
	failed := 0
	for i, r := range results {
		if r.err != nil || r.finish != "length" || r.text == "" {
			failed++
			t.Errorf("stream %d: finish %q, %d bytes, err %v", i, r.finish, len(r.text), r.err)
		}
	}
	migrated := s.metric("switchyard_frontend_migrations_total", "")
	triedBefore := s.metric("switchyard_frontend_worker_requests_total", fmt.Sprintf(`instance="%x"`, victim))

	// After the kill: every request succeeds, and the dead worker, still
	// registered, gets at most one probe per fence period.
	const after = 20
	start := time.Now()
	for i := range after {
		if _, err := s.client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("after the kill %d", i), 4)); err != nil {
			t.Fatalf("request %d after the kill: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	probes := s.metric("switchyard_frontend_worker_requests_total", fmt.Sprintf(`instance="%x"`, victim)) - triedBefore
	// Fenced at least 500 ms after each failure; the fence period running at
	// the start began before it.
	bound := 1 + float64(elapsed/(500*time.Millisecond))
	t.Logf("FAULT kill -9 of a mocker process: %d streams, %d on it at the kill, %v migrations, %d failed; after: %d/%d requests ok, %v attempt(s) on the dead worker in %v (still registered: %v)",
		len(results), onVictim, migrated, failed, after, after, probes, elapsed.Round(time.Millisecond), s.health().Instances == 2)
	if migrated < 1 {
		t.Errorf("no stream migrated, though %d were on the killed worker", onVictim)
	}
	if probes > bound || probes >= after/2 {
		t.Errorf("the dead worker got %v of %d requests after the kill in %v, want at most %v", probes, after, elapsed, bound)
	}
}

// checkFenced: the fenced worker shows as fenced, the live one as live, in
// the frontend's metrics, its /status.json and `switchyard status` (which
// asks the frontend).
func (s *stack) checkFenced(ctx context.Context, dead, live uint64) {
	t := s.t
	t.Helper()
	if n := s.metric("switchyard_frontend_fenced_total", ""); n < 1 {
		t.Errorf("switchyard_frontend_fenced_total = %v, want at least 1", n)
	}
	if n := s.metric("switchyard_frontend_fenced_instances", ""); n != 1 {
		t.Errorf("switchyard_frontend_fenced_instances = %v, want 1", n)
	}
	resp, err := s.http.Get(s.url + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep frontend.StatusReport
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, w := range rep.Workers {
		states[w.ID] = w.State
	}
	if got := states[fmt.Sprintf("%x", dead)]; got != "fenced" {
		t.Errorf("status.json: the unreachable worker is %q, want fenced (%+v)", got, rep.Workers)
	}
	if got := states[fmt.Sprintf("%x", live)]; got != "live" {
		t.Errorf("status.json: the live worker is %q, want live", got)
	}
	st, err := ctl.Gather(ctx, ctl.Config{RegistryAddr: s.regAddr, RouterAddr: s.router.Addr().String(), EventbusAddr: s.bus.Addr().String(),
		FrontendAddr: s.url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range st.Instances {
		want := "live"
		if in.ID == fmt.Sprintf("%x", dead) {
			want = "fenced"
			if len(in.FencedBy) != 1 || in.FencedBy[0] != s.url {
				t.Errorf("switchyard status: fenced by %v, want [%s]", in.FencedBy, s.url)
			}
		}
		if in.State != want {
			t.Errorf("switchyard status: instance %s is %q, want %q (%+v)", in.ID, in.State, want, in)
		}
	}
	if len(st.Problems) != 0 {
		t.Errorf("switchyard status problems: %v", st.Problems)
	}
	var out strings.Builder
	st.Print(&out)
	t.Logf("switchyard status with a fenced worker:\n%s", out.String())
}
