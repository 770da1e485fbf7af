package frontend_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/router"
)

// startReplica starts another frontend on s's registry, router and
// eventbus, configured as s's with configure applied.
func startReplica(t *testing.T, s *stack, configure func(*frontend.Config)) (*frontend.Service, string) {
	t.Helper()
	var cfg frontend.Config
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.RegistryAddr, cfg.EventbusAddr, cfg.RouterAddr = s.regAddr, s.bus.Addr().String(), s.router.Addr().String()
	cfg.Namespace = testNamespace
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Transport = planeConfig(s.opts.plane, s.nats.ClientURL())
	if configure != nil {
		configure(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fe, err := frontend.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := fe.Wait(); err != nil {
			t.Errorf("frontend: %v", err)
		}
	})
	return fe, "http://" + fe.Addr().String()
}

// answer is what a client got.
type answer struct {
	name       string
	code       int
	retryAfter string
	errCode    string
	// content is the first choice's finish reason.
	content string
	err     error
}

// chat sends a chat completion with admission headers.
func chat(ctx context.Context, c *http.Client, url, name string, prio int, tenant string) answer {
	// A prompt of several blocks: the router counts queued prefill in
	// whole blocks.
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello %s %s"}],"max_tokens":3}`, testModel, name, strings.Repeat("word ", 200))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return answer{name: name, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Switchyard-Priority", fmt.Sprint(prio))
	req.Header.Set("X-Switchyard-Fairness-Id", tenant)
	resp, err := c.Do(req)
	if err != nil {
		return answer{name: name, err: err}
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Error struct{ Code string } `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	a := answer{name: name, code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), errCode: out.Error.Code, err: err}
	if len(out.Choices) > 0 {
		a.content = out.Choices[0].FinishReason
	}
	return a
}

// metricOf sums a metric's samples at a frontend.
func metricOf(t *testing.T, c *http.Client, url, name, match string) float64 {
	t.Helper()
	s := &stack{t: t, http: c, url: url}
	return s.metric(name, match)
}

// TestAdmissionFlood: a short flood while the fleet is saturated, through
// one frontend and through two. The router says saturated as soon as a
// prompt is queued (--queue-prefill-budget 1); the first request is held
// after its route decision, so the fleet stays saturated while the flood
// arrives. Each frontend queues at most 3 requests per band: tenant A's
// eight band-0 requests shed the oldest past 3 at each frontend (a second
// frontend, with nothing in flight, first sends one on as a probe); the
// sheddable and high bands queue; a client that goes away leaves the
// queue at once. When the first request goes on, every queued one is
// released as capacity frees and completes. Nothing is lost: each answer
// is a complete response or a 503 with Retry-After and code overloaded.
func TestAdmissionFlood(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d frontends", replicas), func(t *testing.T) {
			admission := func(c *frontend.Config) { c.Admission.QueueMaxRequests = 3 }
			s := startStack(t, stackOpts{configure: admission, configureRouter: func(c *router.Config) {
				c.Core.QueueTTFTThreshold, c.Core.QueuePrefillBudget = 0, 1
			}})
			s.addMocker(0)
			s.waitInstances(1)
			urls, fes := []string{s.url}, []*frontend.Service{s.fe}
			if replicas == 2 {
				fe, u := startReplica(t, s, admission)
				urls, fes = append(urls, u), append(fes, fe)
			}
			// Each frontend's first request is held after its decision:
			// the first one's keeps the fleet saturated; the second
			// frontend's is its probe (a replica with nothing in flight
			// sends one request on to learn whether there is room).
			entered, release := make(chan struct{}), make(chan struct{})
			for i, fe := range fes {
				var once sync.Once
				fe.SetTestHook(func(point string) {
					if point == "routed" {
						once.Do(func() {
							if i == 0 {
								close(entered)
							}
							<-release
						})
					}
				})
			}
			released := false
			defer func() {
				if !released {
					close(release)
				}
			}()
			ctx := testCtx(t)
			answers := make(chan answer, 64)
			var wg sync.WaitGroup
			send := func(ctx context.Context, url, name string, prio int, tenant string) {
				wg.Go(func() { answers <- chat(ctx, s.http, url, name, prio, tenant) })
			}
			send(ctx, s.url, "first", 0, "A")
			<-entered
			for _, u := range urls {
				for deadline := time.Now().Add(20 * time.Second); metricOf(t, s.http, u, "switchyard_frontend_saturated", testModel) != 1; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s never saw the fleet saturated", u)
					}
				}
			}
			depth := func() (queued, shed float64) {
				for _, u := range urls {
					queued += metricOf(t, s.http, u, "switchyard_frontend_queue_depth", "")
					shed += metricOf(t, s.http, u, "switchyard_frontend_shed_total", "queue_full")
				}
				return queued, shed
			}
			waitDepth := func(wantQueued, wantShed float64) {
				t.Helper()
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					q, sh := depth()
					if q == wantQueued && sh == wantShed {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("queued %v shed %v, want %v and %v", q, sh, wantQueued, wantShed)
					}
				}
			}
			// A's eight band-0 requests, spread over the frontends: the
			// first frontend keeps 3 of its share and sheds the rest; the
			// second sends one on as its probe and queues 3.
			for i := range 8 {
				send(ctx, urls[i%replicas], fmt.Sprint("A", i), 0, "A")
			}
			for i := range 2 {
				send(ctx, urls[0], fmt.Sprint("S", i), -1, "A")
			}
			send(ctx, urls[0], "B", 5, "B")
			wantQueued, wantShed, probes := 6.0, 5.0, 0
			if replicas == 2 {
				wantQueued, wantShed, probes = 9, 1, 1
			}
			waitDepth(wantQueued, wantShed)
			// The status page shows the queue and its tenants.
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
			if len(rep.Admission) != 1 || !rep.Admission[0].Saturated || rep.Admission[0].Queued != 3+3 || len(rep.Admission[0].TopTenants) != 2 {
				t.Fatalf("status: %+v", rep.Admission)
			}
			// A client that goes away while queued leaves at once.
			gone, cancel := context.WithCancel(ctx)
			send(gone, urls[0], "gone", 1, "C")
			waitDepth(wantQueued+1, wantShed)
			cancel()
			waitDepth(wantQueued, wantShed)

			close(release)
			released = true
			wg.Wait()
			close(answers)
			var ok, shed int
			for a := range answers {
				switch {
				case a.name == "gone":
				case a.err == nil && a.code == http.StatusOK && a.content != "":
					ok++
				case a.err == nil && a.code == http.StatusServiceUnavailable && a.retryAfter != "" && a.errCode == "overloaded":
					shed++
				default:
					t.Errorf("%s: %d %q %q %v", a.name, a.code, a.retryAfter, a.errCode, a.err)
				}
			}
			if ok != int(wantQueued)+1+probes || shed != int(wantShed) {
				t.Fatalf("%d complete and %d shed, want %v and %v", ok, shed, int(wantQueued)+1+probes, wantShed)
			}
			if q, _ := depth(); q != 0 {
				t.Fatalf("%v still queued", q)
			}
		})
	}
}
