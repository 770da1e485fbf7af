package frontend_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/discovery"
)

// ghost registers, on a lease the test keeps alive, a copy of mocker m's
// instance and model card, then stops m: the registry goes on listing a
// worker whose address refuses connections, as after a kill -9 whose lease
// has not expired yet (or cannot expire, etcd being away). It returns the
// ghost's instance id.
func (s *stack) ghost(m *mockerHandle) uint64 {
	t := s.t
	t.Helper()
	ctx := testCtx(t.(*testing.T))
	dc, err := discovery.Dial([]string{s.regAddr}, discovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	sess, err := discovery.NewSession(ctx, dc, discovery.SessionOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(ctx) })
	in := proto.Clone(m.w.Instance()).(*registryv1.Instance)
	in.InstanceId = 0
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	cards, err := dc.RPC().ListModels(ctx, &registryv1.ListModelsRequest{})
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
	m.kill()
	return sess.ID()
}

// TestUnreachableWorkerIsFenced: of two registered workers one refuses
// connections (killed, its lease still alive). The first request sent to it
// migrates and fences it: every request succeeds, and the dead worker gets
// one attempt, plus at most one probe per fence period, never one per
// request. With the live worker gone too, the answer is a 503 saying that no
// worker is reachable.
func TestUnreachableWorkerIsFenced(t *testing.T) {
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
type tally struct{ tried, ok int }

func (t tally) String() string { return fmt.Sprintf("%d/%d", t.ok, t.tried) }

// TestEtcdOutage stops etcd under a live fleet (two mockers, the router
// service, the frontend) while a client loop sends chats, then brings it
// back on its data. No worker exits; requests keep succeeding during the
// outage, since serving them needs no etcd; afterwards every worker is
// registered (etcd extends its leases when it restarts, so with the same
// instance id) and every request succeeds. With -short: 3 s and 6 s, past a
// 2 s lease TTL; make test-long: 3, 15, 45 and 120 s with the default TTL.
func TestEtcdOutage(t *testing.T) {
	outages, ttl := []time.Duration{3 * time.Second, 15 * time.Second, 45 * time.Second, 120 * time.Second}, 10*time.Second
	if testing.Short() {
		outages, ttl = []time.Duration{3 * time.Second, 6 * time.Second}, 2*time.Second
	}
	// Longer than testCtx's minute: the long form's outages alone take three.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startStack(t, stackOpts{mode: "kv", migrationLimit: 2, leaseTTL: ttl})
	workers := []*mockerHandle{s.addMocker(0), s.addMocker(0)}
	s.waitInstances(2)
	ids := func() []uint64 { return []uint64{workers[0].w.InstanceID(), workers[1].w.InstanceID()} }
	loop := func(stop <-chan struct{}, n int) tally {
		var tl tally
		for i := 0; n == 0 || i < n; i++ {
			select {
			case <-stop:
				return tl
			default:
			}
			tl.tried++
			if _, err := s.client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("outage question %d", i), 2)); err == nil {
				tl.ok++
			} else if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
		}
		return tl
	}
	if tl := loop(nil, 2); tl.ok != 2 { // loads the tokenizer
		t.Fatalf("before any outage: %v requests succeeded", tl)
	}
	for _, d := range outages {
		before := ids()
		s.etcd.Stop()
		stop := make(chan struct{})
		got := make(chan tally, 1)
		go func() { got <- loop(stop, 0) }()
		time.Sleep(d) // the outage itself
		close(stop)
		during := <-got
		s.etcd.Start()
		// Registered again within two TTLs of etcd's return: every worker's
		// keep-alive answered, the frontend sees both.
		deadline := time.Now().Add(2*ttl + 5*time.Second)
		for workers[0].w.Session().Expired() || workers[1].w.Session().Expired() || s.health().Instances != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%v outage: workers not registered within two TTLs of etcd's return (frontend sees %d)", d, s.health().Instances)
			}
			time.Sleep(50 * time.Millisecond)
		}
		after := loop(nil, 20)
		lost := 0
		for _, w := range workers {
			select {
			case err := <-w.done:
				lost++
				w.done <- err // for kill at cleanup
				t.Errorf("%v outage: a worker exited: %v", d, err)
			default:
			}
		}
		t.Logf("FAULT etcd down %v: during %v ok, after %v ok, workers lost %d, instance ids %x -> %x", d, during, after, lost, before, ids())
		if after.ok != after.tried {
			t.Errorf("%v outage: after recovery %v requests succeeded, want all", d, after)
		}
		if during.ok != during.tried {
			t.Errorf("%v outage: during it %v requests succeeded, want all (they need no etcd)", d, during)
		}
	}
}
