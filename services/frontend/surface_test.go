package frontend_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

const toolsJSON = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`

// TestOpenAISurface checks responses against OpenAI's schema, streamed and
// not, with tools, reasoning and logprobs, and the HTTP conventions: request
// ids, 413, 405, GET /v1/models/{id}, and the metrics' bounded labels.
func TestOpenAISurface(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{plane: transport.PlaneTCP})
	s.addMocker(0)
	s.waitInstances(1)
	chat := func(extra string) string {
		return `{"model":"` + testModel + `","max_tokens":40,"messages":[{"role":"user","content":"Weather in Paris?"}]` + extra + `}`
	}

	t.Run("chat schema", func(t *testing.T) {
		for _, tc := range []struct{ name, extra, finish string }{
			{"text", "", "length"},
			{"no thinking", `,"chat_template_kwargs":{"enable_thinking":false}`, "length"},
			{"tools", `,"tools":` + toolsJSON, "tool_calls"},
			{"logprobs", `,"logprobs":true,"top_logprobs":2`, "length"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := s.rawPost("/v1/chat/completions", chat(tc.extra), nil)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				o := checkChatCompletion(t, body)
				ch := o["choices"].([]any)[0].(obj)
				if ch["finish_reason"] != tc.finish {
					t.Fatalf("finish_reason %v, want %s", ch["finish_reason"], tc.finish)
				}
				if tc.name == "logprobs" {
					lp := ch["logprobs"].(obj)["content"].([]any)
					if len(lp) != 40 || len(lp[0].(obj)["top_logprobs"].([]any)) != 2 {
						t.Fatalf("logprobs = %v", ch["logprobs"])
					}
				}
			})
		}
	})

	t.Run("chat stream schema", func(t *testing.T) {
		for _, tc := range []struct{ name, extra, finish string }{
			{"text", "", "length"},
			{"tools", `,"tools":` + toolsJSON, "tool_calls"},
			{"logprobs and usage", `,"logprobs":true,"stream_options":{"include_usage":true}`, "length"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := s.rawPost("/v1/chat/completions", chat(`,"stream":true`+tc.extra), nil)
				if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				data, _ := sseEvents(t, body)
				if len(data) < 3 || data[len(data)-1] != "[DONE]" {
					t.Fatalf("events %q", data)
				}
				var finish string
				var reasoning, content strings.Builder
				logprobs := 0
				for _, d := range data[:len(data)-1] {
					o := checkChatChunk(t, []byte(d))
					for _, c := range o["choices"].([]any) {
						c := c.(obj)
						if f, ok := c["finish_reason"].(string); ok {
							finish = f
						}
						delta := c["delta"].(obj)
						if r, ok := delta["reasoning_content"].(string); ok {
							reasoning.WriteString(r)
						}
						if x, ok := delta["content"].(string); ok {
							content.WriteString(x)
						}
						if lp, ok := c["logprobs"].(obj); ok {
							logprobs += len(lp["content"].([]any))
						}
					}
				}
				if finish != tc.finish || reasoning.String() != "A short answer will do." || strings.Contains(content.String(), "<") {
					t.Fatalf("finish %q reasoning %q content %q", finish, reasoning.String(), content.String())
				}
				if strings.HasPrefix(tc.name, "logprobs") && logprobs != 40 {
					t.Fatalf("%d logprobs streamed, want 40", logprobs)
				}
			})
		}
	})

	t.Run("completion schema", func(t *testing.T) {
		body := `{"model":"` + testModel + `","prompt":"Once upon a time","max_tokens":5,"logprobs":2}`
		resp, b := s.rawPost("/v1/completions", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		o := checkCompletion(t, b)
		lp := o["choices"].([]any)[0].(obj)["logprobs"].(obj)
		if len(lp["tokens"].([]any)) != 5 || len(lp["top_logprobs"].([]any)[0].(obj)) == 0 {
			t.Fatalf("logprobs %v", lp)
		}
		resp, b = s.rawPost("/v1/completions", strings.Replace(body, `"max_tokens":5`, `"max_tokens":5,"stream":true`, 1), nil)
		data, _ := sseEvents(t, b)
		if resp.StatusCode != 200 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		for _, d := range data[:len(data)-1] {
			checkCompletion(t, []byte(d))
		}
	})

	t.Run("n choices", func(t *testing.T) {
		// A seed makes the answers reproducible: unseeded, each choice
		// gets a random seed, and the mocker's answers (read from one
		// short text at an offset the seed picks) coincide by chance
		// in a few percent of requests. Seeds 7, 8, 9 start at different
		// offsets.
		resp, body := s.rawPost("/v1/chat/completions", chat(`,"n":3,"seed":7,"chat_template_kwargs":{"enable_thinking":false}`), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		o := checkChatCompletion(t, body)
		choices := o["choices"].([]any)
		seen := map[string]bool{}
		for i, c := range choices {
			c := c.(obj)
			if c["index"] != float64(i) {
				t.Fatalf("choice %d has index %v", i, c["index"])
			}
			seen[c["message"].(obj)["content"].(string)] = true
		}
		u := o["usage"].(obj)
		if len(choices) != 3 || len(seen) != 3 || u["completion_tokens"] != float64(120) || u["total_tokens"] != u["prompt_tokens"].(float64)+120 {
			t.Fatalf("n=3: %d choices, %d distinct (%v), usage %v", len(choices), len(seen), seen, u)
		}
		resp, body = s.rawPost("/v1/chat/completions", chat(`,"n":3,"stream":true,"stream_options":{"include_usage":true}`), nil)
		data, _ := sseEvents(t, body)
		if resp.StatusCode != 200 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		finished := map[float64]string{}
		var usage obj
		for _, d := range data[:len(data)-1] {
			o := checkChatChunk(t, []byte(d))
			for _, c := range o["choices"].([]any) {
				c := c.(obj)
				if f, ok := c["finish_reason"].(string); ok {
					finished[c["index"].(float64)] = f
				}
			}
			if u, ok := o["usage"].(obj); ok {
				usage = u
			}
		}
		if len(finished) != 3 || usage["completion_tokens"] != float64(120) || !strings.HasPrefix(data[len(data)-2], `{"id"`) {
			t.Fatalf("streamed n=3: finished %v usage %v", finished, usage)
		}
		resp, body = s.rawPost("/v1/completions", `{"model":"`+testModel+`","prompt":"Once","max_tokens":4,"n":2}`, nil)
		if o := checkCompletion(t, body); resp.StatusCode != 200 || len(o["choices"].([]any)) != 2 {
			t.Fatalf("completions n=2: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("x-request-id", func(t *testing.T) {
		resp, _ := s.rawPost("/v1/chat/completions", chat(""), map[string]string{"X-Request-Id": "trace-42"})
		if got := resp.Header.Get("X-Request-Id"); got != "trace-42" {
			t.Fatalf("X-Request-Id %q, want the client's echoed", got)
		}
		resp, _ = s.rawPost("/v1/chat/completions", `{}`, nil)
		if got := resp.Header.Get("X-Request-Id"); len(got) < 16 {
			t.Fatalf("X-Request-Id %q, want a generated one on errors too", got)
		}
	})

	t.Run("413 and 405", func(t *testing.T) {
		// A body declared over the 32 MiB limit is refused before it is
		// sent (the chunked path is TestReadBodyLimit's, at a small limit:
		// 33 MiB through this process under the race detector stalled it
		// for seconds).
		code, body := declaredTooLarge(t, s.url, 33<<20)
		if e := errorObject(t, body); code != http.StatusRequestEntityTooLarge || e["code"] != "request_too_large" {
			t.Fatalf("big body: %d %v", code, body)
		}
		resp, err := s.http.Get(s.url + "/v1/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		var eb map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if e := errorObject(t, eb); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || e["code"] != "method_not_allowed" {
			t.Fatalf("GET on a POST route: %d %v", resp.StatusCode, eb)
		}
		if code, _ := s.post("/v1/nope", "{}", nil); code != 404 {
			t.Fatalf("unknown path: %d", code)
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("CORS header without --cors-origins")
		}
	})

	t.Run("models by id", func(t *testing.T) {
		m, err := s.client.Models.Get(testCtx(t), testModel)
		if err != nil || m.ID != testModel || m.Object != "model" || m.OwnedBy == "" {
			t.Fatalf("model %+v, %v", m, err)
		}
		if _, err := s.client.Models.Get(testCtx(t), "no-such-model"); statusOf(err) != 404 {
			t.Fatalf("unknown model: %v", err)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for _, m := range []string{"no-such-model", "nope"} {
			if code, _ := s.post("/v1/chat/completions", `{"model":"`+m+`","messages":[{"role":"user","content":"hi"}]}`, nil); code != 404 {
				t.Fatalf("model %s: %d", m, code)
			}
		}
		for labels := range s.metrics("switchyard_frontend_requests_total") {
			if strings.Contains(labels, "no-such-model") || strings.Contains(labels, "nope") {
				t.Fatalf("a client's model name became a label: %s", labels)
			}
		}
		if s.metric("switchyard_frontend_requests_total", `model="unknown"`) < 2 {
			t.Fatal("requests for unknown models are not counted as model=\"unknown\"")
		}
		// One request of its own: a worker's series goes with the worker,
		// so one that re-registered since the earlier requests has none.
		if code, body := s.post("/v1/chat/completions", `{"model":"`+testModel+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, nil); code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		if s.metric("switchyard_frontend_worker_requests_total", "worker_instance=") == 0 {
			t.Fatal("no per-worker counter with the worker_instance label")
		}
		model := `model="` + testModel + `"`
		for _, name := range []string{"switchyard_frontend_prompt_tokens_total", "switchyard_frontend_generation_tokens_total",
			"switchyard_frontend_request_duration_seconds_count"} {
			if s.metric(name, model) == 0 {
				t.Errorf("%s{%s} is 0", name, model)
			}
		}
		if _, ok := s.metrics("switchyard_frontend_cached_prompt_tokens_total")["{"+model+"}"]; !ok {
			t.Error("no switchyard_frontend_cached_prompt_tokens_total series")
		}
	})
}

// declaredTooLarge sends a chat request whose headers declare a body of n
// bytes and sends only its first byte, then reads the answer.
func declaredTooLarge(t *testing.T, url string, n int) (int, map[string]any) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: frontend\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", n); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, body
}
