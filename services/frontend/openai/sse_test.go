package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSSE: the stream's status and headers, the events' bytes, and the
// flushes Batch holds back.
func TestSSE(t *testing.T) {
	w := httptest.NewRecorder()
	e := SSE{W: w}
	if e.Started() {
		t.Fatal("started before the first event")
	}
	e.Batch = true
	if err := e.Send(map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if w.Flushed {
		t.Fatal("a batched event was flushed")
	}
	e.Batch = false
	if err := e.SendFrame(append(e.Frame(), `{"b":2}`...)); err != nil {
		t.Fatal(err)
	}
	if !w.Flushed {
		t.Fatal("an event sent with Batch false was not flushed")
	}
	if err := e.Done(); err != nil {
		t.Fatal(err)
	}
	if !e.Started() || w.Code != http.StatusOK {
		t.Fatalf("started %v, status %d", e.Started(), w.Code)
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Connection": "keep-alive"} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if got, want := w.Body.String(), "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n"; got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
}

// TestErrors: a ParamError wraps ErrInvalidRequest, and an ErrorBody has
// OpenAI's shape, param and code null when not set.
func TestErrors(t *testing.T) {
	err := Invalid("messages[0].role", "invalid role %q", "robot")
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Param != "messages[0].role" || err.Error() != `invalid role "robot"` || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Invalid gave %#v", err)
	}
	code := "model_not_found"
	for _, tt := range []struct {
		body ErrorBody
		want string
	}{
		{ErrorBody{Error: ErrorDetail{Message: "m", Type: "invalid_request_error"}},
			`{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
		{ErrorBody{Error: ErrorDetail{Message: "m", Type: "invalid_request_error", Param: &pe.Param, Code: &code}},
			`{"error":{"message":"m","type":"invalid_request_error","param":"messages[0].role","code":"model_not_found"}}`},
	} {
		b, err := json.Marshal(tt.body)
		if err != nil || string(b) != tt.want {
			t.Errorf("%s (%v), want %s", b, err, tt.want)
		}
	}
}
