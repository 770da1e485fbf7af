package frontend_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// httpFuzzPaths are the generation endpoints FuzzHTTPHandler drives.
var httpFuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/responses"}

// fuzzBody builds a request for path from the fuzzer's fields, then lays
// the members of extra (when it is a JSON object) over them, so that the
// fuzzer reaches every field with values of every type.
func fuzzBody(path string, stream bool, n uint8, maxTokens uint16, stop, stop2 string, extra []byte) []byte {
	b := map[string]any{"model": testModel, "stream": stream, "max_tokens": int(maxTokens % 64)}
	switch path {
	case "/v1/chat/completions":
		b["messages"] = []any{map[string]any{"role": "user", "content": "Tell me a story about " + stop}}
		b["chat_template_kwargs"] = map[string]any{"enable_thinking": n%2 == 0}
	case "/v1/completions":
		b["prompt"] = "Once upon a time " + stop2
	default:
		b["input"] = "Tell me about trains " + stop
		b["max_output_tokens"] = int(maxTokens%64) + 1
		delete(b, "max_tokens")
	}
	if path != "/v1/responses" {
		b["n"] = int(n%3) + 1
		switch n % 4 {
		case 0:
			b["stop"] = stop
		case 1:
			b["stop"] = []string{stop, stop2}
		case 2:
			b["stop"] = []string{stop2}
		}
		if stream && n%5 == 0 {
			b["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	var over map[string]json.RawMessage
	if json.Unmarshal(extra, &over) == nil {
		for k, v := range over {
			b[k] = v
		}
	}
	out, _ := json.Marshal(b)
	return out
}

// FuzzHTTPHandler drives the frontend's HTTP handlers (chat, completions
// and responses, streamed and not, every field the fuzzer reaches, stop
// sequences included) against a live stack. After each request it checks
// that an answer arrived (an OpenAI error body, a JSON body, or a stream
// that ends as its endpoint ends one), that no request failed inside the
// frontend (500 internal_error is a panic it recovered), and that nothing
// is left counted as running in the router or the frontend.
func FuzzHTTPHandler(f *testing.F) {
	s := startStack(f, stackOpts{})
	s.addMocker(0)
	s.addMocker(0)
	s.waitInstances(2)
	seeds := []struct {
		path        uint8
		stream      bool
		n           uint8
		maxTokens   uint16
		stop, stop2 string
		extra       string
	}{
		{0, false, 0, 8, "\n", ".", ``},
		{0, true, 1, 16, ".", "\n", ``},
		{0, true, 2, 30, "a", "the", `{"temperature":0.7,"top_p":0.9,"seed":7}`},
		{0, false, 3, 12, "é", "🙂", `{"logprobs":true,"top_logprobs":3}`},
		{0, true, 4, 20, "", "", `{"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"tool_choice":"auto"}`},
		{0, false, 5, 8, "x", "y", `{"max_completion_tokens":5,"min_tokens":2,"ignore_eos":true,"stop_token_ids":[13]}`},
		{0, false, 6, 8, "", "", `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{0, true, 7, 8, "", "", `{"response_format":{"type":"text"},"n":2}`},
		{1, false, 0, 8, "\n", ".", `{"echo":false,"logprobs":2}`},
		{1, true, 1, 16, ".", ",", `{"prompt":[1,2,3,4]}`},
		{1, false, 2, 1, "", "", `{"prompt":[[1,2,3,4]],"echo":true,"logprobs":1,"temperature":0}`},
		{1, true, 2, 3, "\n", "", `{"echo":true,"logprobs":3}`},
		{1, false, 2, 4, "", "", `{"prompt":["a","b"],"suffix":null,"frequency_penalty":0.5,"presence_penalty":0.1,"repetition_penalty":1.1}`},
		{1, true, 3, 4, "", "", `{"max_tokens":4294967296}`},
		{2, false, 0, 8, "", "", ``},
		{2, true, 1, 30, "", "", `{"instructions":"Answer briefly.","input":[{"role":"user","content":"Hello!"}]}`},
		{2, true, 2, 8, "", "", `{"reasoning":{"effort":"low"},"temperature":0.2}`},
		{2, false, 3, 8, "", "", `{"text":{"format":{"type":"text"}}}`},
		{0, false, 0, 8, "", "", `{"model":"nope"}`},
		{0, false, 0, 8, "", "", `{"messages":"hi"}`},
	}
	for _, sd := range seeds {
		f.Add(sd.path, sd.stream, sd.n, sd.maxTokens, sd.stop, sd.stop2, []byte(sd.extra))
	}
	f.Fuzz(func(t *testing.T, pathIdx uint8, stream bool, n uint8, maxTokens uint16, stop, stop2 string, extra []byte) {
		path := httpFuzzPaths[int(pathIdx)%len(httpFuzzPaths)]
		body := fuzzBody(path, stream, n, maxTokens, stop, stop2, extra)
		req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s: no answer: %v", path, body, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: the answer broke off: %v (read %q)", path, body, err, got)
		}
		checkAnswer(t, path, body, resp, got)
		s.waitIdleFor(t, path, body)
	})
}

// checkAnswer checks that one answer is complete in its endpoint's shape.
func checkAnswer(t *testing.T, path string, body []byte, resp *http.Response, got []byte) {
	t.Helper()
	if resp.StatusCode != 200 {
		var e struct {
			Error *struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(got, &e) != nil || e.Error == nil || e.Error.Message == "" {
			t.Fatalf("%s %s: %d without an OpenAI error body: %q", path, body, resp.StatusCode, got)
		}
		if e.Error.Code != nil && *e.Error.Code == "internal_error" {
			t.Fatalf("%s %s: the frontend failed inside: %s", path, body, got)
		}
		return
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if !json.Valid(got) {
			t.Fatalf("%s %s: 200 with a body that is not JSON: %q", path, body, got)
		}
		return
	}
	data, events := sseEvents(t, got)
	if len(data) == 0 {
		t.Fatalf("%s %s: an empty stream", path, body)
	}
	lastData := data[len(data)-1]
	if path == "/v1/responses" {
		last := events[len(events)-1]
		if last != "response.completed" && last != "response.incomplete" && last != "response.failed" && last != "error" {
			t.Fatalf("%s %s: the stream ends with %q", path, body, last)
		}
	} else if lastData != "[DONE]" {
		t.Fatalf("%s %s: the stream does not end with [DONE]: %q", path, body, got)
	}
	if strings.Contains(string(got), `"internal_error"`) {
		t.Fatalf("%s %s: the frontend failed inside: %s", path, body, got)
	}
}

// waitIdleFor is waitIdle for one fuzz input: the router hears of the
// request's end on its Report stream, after the client has its answer.
func (s *stack) waitIdleFor(t *testing.T, path string, body []byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, fe := s.inFlight(t)
		if r == 0 && fe == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: still counted as running after the answer: %d in the router, %d in the frontend", path, body, r, fe)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
