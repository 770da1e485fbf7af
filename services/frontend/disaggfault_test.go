package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/frontend"
)

// injection is one injected fault's state, shared by its hooks.
type injection struct {
	// cancel ends the client's request (the client leaves).
	cancel context.CancelFunc
	// fired: the fault was injected; done: what it started has ended.
	fired atomic.Bool
	done  chan struct{}
}

// fire marks the fault injected once; it reports whether this call did.
func (in *injection) fire() bool { return in.fired.CompareAndSwap(false, true) }

// disaggFault is a fault of a two-leg request, injected at a point of one
// request (X-Request-Id) while a client loop runs beside it.
type disaggFault struct {
	name string
	// clientLeaves: the client ends the request itself (its error is
	// expected; only a hang or stranded KV counts).
	clientLeaves bool
	// leg is called at the frontend's leg points of the request, chunk
	// after each content chunk the client reads.
	leg   func(s *pdStack, in *injection, point string, prefill uint64)
	chunk func(s *pdStack, in *injection, r *chatResult)
	// replace restarts what the fault stopped, once the request ended.
	replace func(s *pdStack, in *injection)
}

// faultRow counts a fault's injections: requests that hung (no answer
// within hangBound), client-visible errors (of the injected requests and
// of the client loop beside them), and injections after which KV stayed
// held past the mocker's --handoff-timeout; worst is the slowest injected
// request and release the slowest return of the held-blocks gauge to 0.
type faultRow struct {
	name                                      string
	injected, hung, errors, loopErrs, strands int
	loop                                      int
	worst, release                            time.Duration
}

// hangBound is how long an injected request may take before it counts as
// hung: past every bound the frontend states (--handoff-deadline, the
// migration of a stream, the mocker's --kv-pull-timeout).
const hangBound = 60 * time.Second

// killAsync stops the worker of instance id from a hook (which runs on a
// request's path, so it does not wait) and closes in.done once it stopped.
func killAsync(s *pdStack, in *injection, id uint64) {
	go func() {
		defer close(in.done)
		s.kill(id)
	}()
}

// replaceWith waits for the killed worker to stop, then starts another of
// role and waits until the router and the frontend see it.
func replaceWith(role string) func(s *pdStack, in *injection) {
	return func(s *pdStack, in *injection) {
		<-in.done
		prefill, decode := s.live()
		s.waitInstances(len(prefill) + len(decode))
		s.add(role)
		s.waitInstances(len(prefill) + len(decode) + 1)
	}
}

var disaggFaults = []disaggFault{
	{name: "client leaves during the prefill leg", clientLeaves: true,
		leg: func(_ *pdStack, in *injection, point string, _ uint64) {
			if point == frontend.PointPrefill && in.fire() {
				in.cancel()
			}
		}},
	{name: "client leaves between the legs", clientLeaves: true,
		leg: func(_ *pdStack, in *injection, point string, _ uint64) {
			if point == frontend.PointHandoff && in.fire() {
				in.cancel()
				// The frontend learns of it when the connection closes:
				// wait a moment so that the decode leg starts after, or
				// is cancelled early (either way it must not strand KV).
				time.Sleep(100 * time.Millisecond)
			}
		}},
	{name: "client leaves during the decode leg", clientLeaves: true,
		chunk: func(_ *pdStack, in *injection, _ *chatResult) {
			if in.fire() {
				in.cancel()
			}
		}},
	{name: "prefill worker killed during its leg",
		leg: func(s *pdStack, in *injection, point string, prefill uint64) {
			if point == frontend.PointPrefill && in.fire() {
				killAsync(s, in, prefill)
			}
		},
		replace: replaceWith("prefill")},
	{name: "prefill worker killed before the decode leg pulls its KV",
		leg: func(s *pdStack, in *injection, point string, prefill uint64) {
			if point == frontend.PointHandoff && in.fire() {
				// Stopped before the decode leg is sent: its pull finds
				// nobody (kv_handoff_failed).
				killAsync(s, in, prefill)
				<-in.done
			}
		},
		replace: replaceWith("prefill")},
	{name: "decode worker killed mid-stream",
		chunk: func(s *pdStack, in *injection, r *chatResult) {
			if r.chunks == 2 && in.fire() {
				id, err := strconv.ParseUint(r.header.Get(frontend.HeaderWorker), 16, 64)
				if err != nil {
					close(in.done)
					return
				}
				killAsync(s, in, id)
			}
		},
		replace: replaceWith("decode")},
}

// TestDisaggFaults injects each fault of a two-leg request into a live
// stack of 2 prefill and 2 decode mockers (the router pairing every
// request) while a client loop sends chats beside it, and counts what was
// lost: requests that hung, client-visible errors (none but the leaving
// client's own), and KV left held for a handoff (the prefill workers'
// held-blocks gauge must come back to 0, and well before their
// --handoff-timeout since the frontend releases what was not taken). Each
// fault is injected twice; make test-long injects each 10 times.
func TestDisaggFaults(t *testing.T) {
	t.Parallel()
	times := 2
	if !testing.Short() {
		times = 10
	}
	// The faults' own bounds are per request (hangBound); the loops and
	// the tokenizer's first load on a loaded machine take longer than
	// testCtx's minute.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	// Slowed (a tenth of real time) so that a leg lasts long enough for a
	// fault to land inside it.
	s := startPD(t, 2, 2, 0.1, stackOpts{configure: func(c *frontend.Config) { c.HandoffDeadline = 2 * time.Second }},
		"--handoff-timeout", "30s")
	var hooks sync.Map // X-Request-Id -> func(point string, prefill uint64)
	s.fe.SetLegHook(func(_ context.Context, point, rid string, prefill uint64) {
		if f, ok := hooks.Load(rid); ok {
			f.(func(string, uint64))(point, prefill)
		}
	})
	// The first request loads the tokenizer: not part of what is counted.
	if _, err := s.chat(ctx, "", "warm up", 2, false, nil); err != nil {
		t.Fatal(err)
	}
	var rows []faultRow
	for _, f := range disaggFaults {
		row := faultRow{name: f.name}
		stop := make(chan struct{})
		loopDone := make(chan tally, 1)
		go func() { loopDone <- s.clientLoop(ctx, t, stop, 0, "beside "+f.name) }()
		for i := range times {
			rid := fmt.Sprintf("fault-%d-%d", len(rows), i)
			ictx, cancel := context.WithTimeout(ctx, hangBound)
			in := &injection{cancel: cancel, done: make(chan struct{})}
			if f.leg != nil {
				hooks.Store(rid, func(point string, prefill uint64) { f.leg(s, in, point, prefill) })
			}
			var onChunk func(*chatResult)
			if f.chunk != nil {
				onChunk = func(r *chatResult) { f.chunk(s, in, r) }
			}
			// A prompt of its own, so that no cache shortens its prefill.
			prompt := fmt.Sprintf("Fault %d, try %d. %s", len(rows), i, strings.Repeat("Tell me about trains and their timetables. ", 30))
			start := time.Now()
			r, err := s.chat(ictx, rid, prompt, 8, true, onChunk)
			took := time.Since(start)
			hung := errors.Is(ictx.Err(), context.DeadlineExceeded)
			cancel()
			hooks.Delete(rid)
			if !in.fired.Load() {
				t.Errorf("%s, try %d: the fault was not injected (%v)", f.name, i, err)
				continue
			}
			row.injected++
			row.worst = max(row.worst, took)
			switch {
			case hung:
				row.hung++
				t.Errorf("%s, try %d: no answer within %v", f.name, i, hangBound)
			case f.clientLeaves:
			case err != nil:
				row.errors++
				t.Errorf("%s, try %d: %v", f.name, i, err)
			case r.completion != 8:
				row.errors++
				t.Errorf("%s, try %d: %d tokens, want 8", f.name, i, r.completion)
			}
			if f.replace != nil {
				f.replace(s, in)
			}
			released, ok := s.waitReleased(35 * time.Second)
			row.release = max(row.release, released)
			if !ok {
				row.strands++
				t.Errorf("%s, try %d: KV still held %v after the request", f.name, i, released)
			}
		}
		close(stop)
		tl := <-loopDone
		// Both legs of every request ended in the router's and the
		// frontend's counts.
		s.waitIdle(f.name)
		row.loop, row.loopErrs = tl.tried, tl.tried-tl.ok
		if tl.first != nil {
			t.Errorf("%s: the client loop beside it: %v", f.name, tl)
		}
		rows = append(rows, row)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-58s %8s %4s %6s %9s %8s %9s %9s\n", "fault", "injected", "hung", "errors", "stranded", "loop", "slowest", "released")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-58s %8d %4d %6d %9d %4d/%-3d %9v %9v\n", r.name, r.injected, r.hung, r.errors, r.strands,
			r.loop-r.loopErrs, r.loop, r.worst.Round(time.Millisecond), r.release.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "fallbacks %v, releases %v", s.metrics("switchyard_frontend_disagg_fallbacks_total"), s.metrics("switchyard_frontend_kv_handoff_releases_total"))
	t.Logf("faults of two-leg requests:\n%s", b.String())
}

// blackHole is a TCP listener that accepts connections and never answers
// on them, as a worker that hangs does; it closes at the test's end.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestDecodeTokenAtHandoffDeadline: the decode leg's first tokens arrive
// just as its handoff deadline passes (the hook holds them until the
// deadline has cancelled the leg). The deadline wins: the tokens go
// nowhere, the request is routed again to the other decode worker with its
// prefill local and answered in full, once; nothing reaches the client twice and nothing
// ends as a cancelled request. Tokens taken just before the deadline are
// the other side of the race: the leg is no longer late, and every other
// request of the test is one.
func TestDecodeTokenAtHandoffDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s := startPD(t, 1, 2, 0, stackOpts{configure: func(c *frontend.Config) { c.HandoffDeadline = 500 * time.Millisecond }})
	// Routed again, a request's prefill is local: its one decode leg is
	// the first.
	s.fe.SetLegHook(func(lctx context.Context, point, rid string, _ uint64) {
		if point != frontend.PointDecodeToken || !strings.HasPrefix(rid, "late-") {
			return
		}
		select {
		case <-lctx.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("%s: the decode leg was not cancelled at its handoff deadline", rid)
		}
	})
	// The first request loads the tokenizer: not part of what is checked.
	if _, err := s.chat(ctx, "", "warm up", 2, false, nil); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		rid    string
		stream bool
	}{{"late-whole", false}, {"late-stream", true}} {
		r, err := s.chat(ctx, tc.rid, fmt.Sprintf("question %d about trains and their timetables", i), 8, tc.stream, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.rid, err)
		}
		if r.completion != 8 || r.header.Get(frontend.HeaderPrefillWorker) != "" {
			t.Errorf("%s: %d tokens, prefill worker %q; want 8 with a local prefill", tc.rid, r.completion, r.header.Get(frontend.HeaderPrefillWorker))
		}
		if tc.stream && r.chunks > 8 {
			t.Errorf("%s: %d content chunks for 8 tokens: the late leg's tokens reached the client", tc.rid, r.chunks)
		}
	}
	if n := s.metric("switchyard_frontend_disagg_fallbacks_total", `reason="handoff_timeout"`); n != 2 {
		t.Errorf("handoff_timeout fallbacks %v, want 2", n)
	}
	if n := s.metric("switchyard_frontend_requests_total", `status="499"`); n != 0 {
		t.Errorf("%v requests ended as cancelled by their client", n)
	}
}

// TestSilentPrefillWorker: the only prefill workers, two, accept the
// prefill leg and never answer (nor their WorkerService). Every request is
// answered in full: its prefill leg tried on one, then the other, each
// given up after --handoff-deadline, then the prompt computed locally on
// the decode worker (no hang, no error, no prefill header), and the
// frontend tried to free the handoffs the silent workers might hold.
func TestSilentPrefillWorker(t *testing.T) {
	t.Parallel()
	// The tokenizer's first load on a loaded machine may take most of
	// testCtx's minute.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const deadline = time.Second
	s := startPD(t, 1, 1, 0, stackOpts{configure: func(c *frontend.Config) { c.HandoffDeadline = deadline }})
	// The first request loads the tokenizer: not part of what is measured.
	// It is a two-leg request; on a loaded machine its decode leg may miss
	// this test's 1 s deadline (the default is 5 s), and with the one decode
	// worker left out it has nowhere to go (503): it is tried up to three
	// times.
	for try := 1; ; try++ {
		_, err := s.chat(ctx, "", "warm up", 2, false, nil)
		if err == nil {
			break
		}
		if try == 3 {
			t.Fatal(err)
		}
		t.Logf("warm-up %d: %v", try, err)
	}
	// Two silent prefill workers: a request tries one, then the other,
	// then (maxPrefillFailures) computes its prompt locally.
	var silent []uint64
	for range 2 {
		hole := blackHole(t)
		silent = append(silent, s.ghostAs(s.prefill[0], func(in *registryv1.Instance) {
			in.Transport = &commonv1.Transport{Tcp: hole}
			in.Metadata[wire.MetadataWorkerAPI] = hole
		}))
	}
	s.kill(s.prefill[0].w.InstanceID())
	s.waitInstances(3)
	decode := hexID(s.decode[0].w.InstanceID())
	const requests = 3
	var slowest time.Duration
	for i := range requests {
		start := time.Now()
		r, err := s.chat(ctx, "", fmt.Sprintf("question %d about trains", i), 4, i%2 == 1, nil)
		took := time.Since(start)
		slowest = max(slowest, took)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if r.completion != 4 || r.header.Get(frontend.HeaderWorker) != decode || r.header.Get(frontend.HeaderPrefillWorker) != "" {
			t.Fatalf("request %d: %d tokens, worker %q, prefill worker %q; want 4 from %s with a local prefill", i, r.completion,
				r.header.Get(frontend.HeaderWorker), r.header.Get(frontend.HeaderPrefillWorker), decode)
		}
	}
	if n := s.metric("switchyard_frontend_disagg_fallbacks_total", `reason="prefill_timeout"`); n != 2*requests {
		t.Errorf("prefill_timeout fallbacks %v, want %d", n, 2*requests)
	}
	for _, id := range silent {
		if n := s.metric("switchyard_frontend_worker_requests_total", fmt.Sprintf(`instance="%s"`, hexID(id))); n != requests {
			t.Errorf("prefill legs sent to silent worker %x: %v, want %d", id, n, requests)
		}
	}
	t.Logf("%d requests with two silent prefill workers and --handoff-deadline %v: all answered, the slowest in %v", requests, deadline,
		slowest.Round(time.Millisecond))
}
