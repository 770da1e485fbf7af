package frontend_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/frontend"
)

// inFlight is what the fleet counts as running: the router service's
// requests over its workers and the frontend's own in-flight count per
// worker (its status page).
func (s *stack) inFlight(t testing.TB) (router, fe int) {
	t.Helper()
	for _, w := range s.router.Core().Stats().GetWorkers() {
		router += int(w.GetRequests())
	}
	resp, err := s.http.Get(s.url + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep frontend.StatusReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	for _, w := range rep.Workers {
		fe += w.InFlight
	}
	return router, fe
}

// waitIdle waits until nothing is counted as running (the router hears of a
// request's end on its Report stream, after the client has its answer),
// and fails the test if something still is after a bound.
func (s *stack) waitIdle(what string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, f := s.inFlight(s.t)
		if r == 0 && f == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: still counted as running: %d in the router, %d in the frontend", what, r, f)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statusErrors is the status page's error count over its window.
func (s *stack) statusErrors() int {
	s.t.Helper()
	resp, err := s.http.Get(s.url + "/status.json")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep frontend.StatusReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		s.t.Fatal(err)
	}
	return rep.Errors
}

// TestPanicOnTheRequestPathFreesTheRequest injects a panic at each point of
// a request's path (decoded, routed, a token arrived, generation over) on
// every endpoint, streamed and not, with one choice and with two (whose
// generations run on goroutines of their own). Every time the router and
// the frontend count nothing running afterwards, the request is counted
// with status 500 in the metrics and as an error on the status page, and
// the client has an OpenAI-shaped answer: a 500 internal_error body when
// nothing was sent yet, an error event ending the stream otherwise.
func TestPanicOnTheRequestPathFreesTheRequest(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	var armed atomic.Pointer[string]
	s.fe.SetTestHook(func(point string) {
		if p := armed.Load(); p != nil && *p == point {
			panic("injected at " + point)
		}
	})
	s.addMocker(0)
	s.addMocker(0)
	s.waitInstances(2)

	chat := func(extra string) string {
		return `{"model":"` + testModel + `","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":8` + extra + `}`
	}
	completion := func(extra string) string {
		return `{"model":"` + testModel + `","prompt":"Once upon a time","max_tokens":8` + extra + `}`
	}
	responses := func(extra string) string {
		return `{"model":"` + testModel + `","input":"Tell me about trains.","max_output_tokens":8` + extra + `}`
	}
	type answer int
	const (
		jsonError   answer = iota // a 500 with OpenAI's error body
		streamError               // a 200 stream that ends with an error event
	)
	cases := []struct {
		point, path, endpoint, body string
		want                        answer
	}{
		{frontend.PointServe, "/v1/chat/completions", "chat_completions", chat(""), jsonError},
		{frontend.PointServe, "/v1/chat/completions", "chat_completions", chat(`,"stream":true`), jsonError},
		{frontend.PointRouted, "/v1/chat/completions", "chat_completions", chat(`,"stream":true`), jsonError},
		{frontend.PointRouted, "/v1/completions", "completions", completion(""), jsonError},
		{frontend.PointToken, "/v1/chat/completions", "chat_completions", chat(""), jsonError},
		// At the first token nothing is out yet, streamed or not.
		{frontend.PointToken, "/v1/chat/completions", "chat_completions", chat(`,"stream":true,"stop":["\n"]`), jsonError},
		{frontend.PointToken, "/v1/completions", "completions", completion(`,"stream":true`), jsonError},
		{frontend.PointToken, "/v1/responses", "responses", responses(`,"stream":true`), jsonError},
		{frontend.PointToken, "/v1/responses", "responses", responses(""), jsonError},
		// At the end a stream has sent its text.
		{frontend.PointEnd, "/v1/chat/completions", "chat_completions", chat(`,"stream":true,"stop":["."]`), streamError},
		{frontend.PointEnd, "/v1/completions", "completions", completion(`,"stream":true`), streamError},
		{frontend.PointEnd, "/v1/responses", "responses", responses(`,"stream":true`), streamError},
		{frontend.PointEnd, "/v1/completions", "completions", completion(""), jsonError},
		{frontend.PointToken, "/v1/chat/completions", "chat_completions", chat(`,"n":2`), jsonError},
		{frontend.PointEnd, "/v1/chat/completions", "chat_completions", chat(`,"n":2,"stream":true`), streamError},
		{frontend.PointRouted, "/v1/completions", "completions", completion(`,"n":3,"stream":true`), jsonError},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d %s %s", i, tc.point, tc.path), func(t *testing.T) {
			failedBefore := s.metric("switchyard_frontend_requests_total", `endpoint="`+tc.endpoint+`",model="`+testModel+`",status="500"`)
			errsBefore := s.statusErrors()
			armed.Store(&tc.point)
			resp, body := s.rawPost(tc.path, tc.body, nil)
			armed.Store(nil)
			switch tc.want {
			case jsonError:
				var out map[string]any
				if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != 500 {
					t.Fatalf("answer %d %q, want a 500 JSON error", resp.StatusCode, body)
				}
				if e := errorObject(t, out); e["type"] != "server_error" || e["code"] != "internal_error" {
					t.Fatalf("error %v", e)
				}
			case streamError:
				data, events := sseEvents(t, body)
				if resp.StatusCode != 200 || len(data) == 0 {
					t.Fatalf("answer %d %q, want a stream", resp.StatusCode, body)
				}
				if tc.endpoint == "responses" {
					if events[len(events)-1] != "error" || !strings.Contains(data[len(data)-1], `"internal_error"`) {
						t.Fatalf("stream does not end with an error event: %q", body)
					}
				} else if len(data) < 2 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], `"internal_error"`) {
					t.Fatalf("stream does not end with an error event and [DONE]: %q", body)
				}
			}
			s.waitIdle(tc.point)
			if got := s.metric("switchyard_frontend_requests_total", `endpoint="`+tc.endpoint+`",model="`+testModel+`",status="500"`) - failedBefore; got != 1 {
				t.Fatalf("requests counted with status 500: %v, want 1", got)
			}
			if got := s.statusErrors() - errsBefore; got != 1 {
				t.Fatalf("status page errors: +%d, want +1", got)
			}
		})
	}
	// After all that the fleet serves as before.
	resp, body := s.rawPost("/v1/chat/completions", chat(""), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("after the panics: %d %s", resp.StatusCode, body)
	}
	checkChatCompletion(t, body)
	s.waitIdle("after")
}
