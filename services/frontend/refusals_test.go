package frontend_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// TestFieldLimitsAndTypes checks how the frontend refuses what it cannot
// serve: max_tokens past 2^32-1 and an integer past int64 are named with
// their JSON field and the JSON type expected (never a Go type), and token
// ids outside the model's vocabulary are a 400 (the last id is served).
func TestFieldLimitsAndTypes(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	s.addMocker(0)
	s.waitInstances(1)
	raw, err := qwen3.ReadFile("tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	// The tokenizer every frontend of this test binary shares (built once,
	// in TestMain), not one more build of its own: that takes seconds of
	// CPU under the race detector.
	tok, err := preprocess.LoadTokenizer(raw)
	if err != nil {
		t.Fatal(err)
	}
	last := strconv.Itoa(tok.VocabSize() - 1)
	past := strconv.Itoa(tok.VocabSize())
	chat := func(extra string) string {
		return `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	completion := func(prompt, extra string) string {
		return `{"model":"` + testModel + `","prompt":` + prompt + `,"max_tokens":2` + extra + `}`
	}
	for _, tc := range []struct {
		name, path, body string
		code             int
		param            string
		// has must be in the message; the message never names a Go type.
		has string
	}{
		{"max_tokens at 2^32-1", "/v1/chat/completions", chat(`,"max_tokens":4294967295`), 400, "max_tokens", "context length"},
		{"max_tokens 2^32", "/v1/chat/completions", chat(`,"max_tokens":4294967296`), 400, "max_tokens", "between 1 and 4294967295"},
		{"max_completion_tokens 2^40", "/v1/chat/completions", chat(`,"max_completion_tokens":1099511627776`), 400, "max_completion_tokens", "max_completion_tokens must be between 1 and 4294967295"},
		{"max_tokens past int64", "/v1/completions", completion(`"hi"`, `,"max_tokens":1e30`), 400, "max_tokens", "expected an integer"},
		{"max_tokens a string", "/v1/chat/completions", chat(`,"max_tokens":"8"`), 400, "max_tokens", "got a string"},
		{"messages a string", "/v1/chat/completions", `{"model":"` + testModel + `","messages":"hi"}`, 400, "messages", "expected an array, got a string"},
		{"temperature an object", "/v1/chat/completions", chat(`,"temperature":{}`), 400, "temperature", "expected a number, got an object"},
		{"last token id", "/v1/completions", completion(`[1,`+last+`]`, ""), 200, "", ""},
		{"token id past the vocabulary", "/v1/completions", completion(`[1,`+past+`]`, ""), 400, "prompt", "outside the model's vocabulary"},
		{"token id 2^32-1", "/v1/completions", completion(`[4294967295]`, ""), 400, "prompt", "outside the model's vocabulary"},
		{"stop token id past the vocabulary", "/v1/chat/completions", chat(`,"max_tokens":2,"stop_token_ids":[` + past + `]`), 400, "stop_token_ids", "outside the model's vocabulary"},
		{"stop token id at the last", "/v1/chat/completions", chat(`,"max_tokens":2,"stop_token_ids":[` + last + `]`), 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := s.post(tc.path, tc.body, nil)
			if code != tc.code {
				t.Fatalf("%s: %d %v, want %d", tc.body, code, body, tc.code)
			}
			if tc.code == 200 {
				return
			}
			e := errorObject(t, body)
			msg, _ := e["message"].(string)
			if e["param"] != tc.param || !strings.Contains(msg, tc.has) {
				t.Fatalf("error %v, want param %q and %q in the message", e, tc.param, tc.has)
			}
			for _, goName := range []string{"CommonRequest", "commonRequest", "frontend.", "openai.", "[]", "int64", "float64", "uint32"} {
				if strings.Contains(msg, goName) {
					t.Fatalf("message %q names a Go type (%s)", msg, goName)
				}
			}
		})
	}
}

// TestWorkerSeriesGoWithTheWorker checks that the per-worker request
// counter keeps a series only for workers that are there: once a worker
// that served requests leaves, its series is gone, the other's stays.
func TestWorkerSeriesGoWithTheWorker(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{mode: "round-robin"})
	a, b := s.addMocker(0), s.addMocker(0)
	s.waitInstances(2)
	for range 4 {
		if code, body := s.post("/v1/completions", `{"model":"`+testModel+`","prompt":"hi","max_tokens":1}`, nil); code != 200 {
			t.Fatalf("%d %v", code, body)
		}
	}
	series := func(m *mockerHandle) float64 {
		return s.metric("switchyard_frontend_worker_requests_total", `worker_instance="`+strconv.FormatUint(m.w.InstanceID(), 16)+`"`)
	}
	if series(a) == 0 || series(b) == 0 {
		t.Fatalf("round-robin over two workers: %v", s.metrics("switchyard_frontend_worker_requests_total"))
	}
	gone := strconv.FormatUint(a.w.InstanceID(), 16)
	a.kill()
	s.waitInstances(1)
	// The frontend drops the series as it hears the worker left, which the
	// health answer may show a moment before.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.metrics("switchyard_frontend_worker_requests_total")
		if len(got) == 1 && series(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after worker %s left: %v, want only the other's series", gone, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
