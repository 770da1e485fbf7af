package adapter

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

func readEvents(t *testing.T, r io.Reader) ([]sseEvent, *sseReader) {
	t.Helper()
	sr := newSSEReader(r)
	var out []sseEvent
	for range 1000 {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return out, sr
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, ev)
	}
	t.Fatal("no end of stream after 1000 events")
	return nil, nil
}

// TestSSEReader follows the event stream parsing of the WHATWG HTML
// standard (section 9.2.6), with its own examples among the cases.
func TestSSEReader(t *testing.T) {
	msg := func(data string) sseEvent { return sseEvent{Type: "message", Data: data} }
	tests := []struct {
		name  string
		in    string
		want  []sseEvent
		retry time.Duration
	}{
		{name: "one data line", in: "data: hi\n\n", want: []sseEvent{msg("hi")}},
		{name: "multi-line data joined with LF", in: "data: YHOO\ndata: +2\ndata: 10\n\n", want: []sseEvent{msg("YHOO\n+2\n10")}},
		{name: "one space after the colon is removed, no more", in: "data:test\n\ndata:  two\n\n", want: []sseEvent{msg("test"), msg(" two")}},
		{name: "empty data lines count", in: "data\n\ndata\ndata\n\ndata:\n\n", want: []sseEvent{msg(""), msg("\n"), msg("")}},
		{name: "comments are ignored", in: ": keep-alive\ndata: a\n: between\ndata: b\n\n:\n\n", want: []sseEvent{msg("a\nb")}},
		{name: "event without data is not dispatched", in: "event: ping\n\ndata: x\n\n", want: []sseEvent{msg("x")}},
		{name: "event type", in: "event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\ndata: 1\n\n",
			want: []sseEvent{{Type: "add", Data: "73857293"}, {Type: "remove", Data: "2153"}, msg("1")}},
		{name: "id carries over, NUL ignored", in: "id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid\ndata: d\n\n",
			want: []sseEvent{{Type: "message", Data: "a", ID: "1"}, {Type: "message", Data: "b", ID: "1"}, {Type: "message", Data: "c", ID: "1"}, msg("d")}},
		{name: "retry digits only", in: "retry: 2500\ndata: a\n\nretry: 3s\ndata: b\n\n", want: []sseEvent{msg("a"), msg("b")}, retry: 2500 * time.Millisecond},
		{name: "unknown fields are ignored", in: "foo: bar\ndata: a\nDATA: b\n\n", want: []sseEvent{msg("a")}},
		{name: "CRLF", in: "data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n", want: []sseEvent{msg("a\nb"), msg("c")}},
		{name: "CR", in: "data: a\rdata: b\r\rdata: c\r\r", want: []sseEvent{msg("a\nb"), msg("c")}},
		{name: "mixed endings", in: "data: a\r\ndata: b\rdata: c\n\r\n", want: []sseEvent{msg("a\nb\nc")}},
		{name: "BOM at the start only", in: "\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\n", want: []sseEvent{msg("a")}},
		{name: "unterminated event at EOF is discarded", in: "data: a\n\ndata: b\n", want: []sseEvent{msg("a")}},
		{name: "no trailing newline", in: "data: a\n\ndata: b", want: []sseEvent{msg("a")}},
		{name: "colon in the value", in: "data: {\"a\":1}\n\n", want: []sseEvent{msg(`{"a":1}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, sr := readEvents(t, strings.NewReader(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			if sr.Retry != tt.retry {
				t.Fatalf("retry %v, want %v", sr.Retry, tt.retry)
			}
			// The same stream one byte at a time: a CR at the end of what
			// has arrived ends its line, and the LF after it is skipped.
			got, _ = readEvents(t, iotest.OneByteReader(strings.NewReader(tt.in)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("events read byte by byte (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSSEReaderDoesNotWaitAfterCR: an event whose blank line ends in CR is
// dispatched without waiting for the byte after it.
func TestSSEReaderDoesNotWaitAfterCR(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() { _, _ = pw.Write([]byte("data: a\r\r")) }()
	ev, err := newSSEReader(pr).Next()
	if err != nil || ev.Data != "a" {
		t.Fatalf("Next = %+v, %v", ev, err)
	}
}

// The error chunks of the engines, as their OpenAI servers write them in
// the middle of a stream (then data: [DONE]):
//   - vLLM (serving_engine.py create_streaming_error_response) dumps its
//     ErrorResponse, {"error": {"message", "type", "param", "code"}};
//     releases before 0.10 had "object": "error" inside the error object.
//   - SGLang (serving_base.py create_streaming_error_response) writes
//     {"error": ErrorResponse}, whose ErrorResponse has object "error"; a
//     request it aborts with a status (timeout, OOM) carries the status's
//     name as the type, and the usage chunk may still follow.
const (
	vllmErrorChunk      = `{"error": {"message": "The decoder prompt (length 9000) is longer than the maximum model length of 8192.", "type": "BadRequestError", "param": null, "code": 400}}`
	vllmOldErrorChunk   = `{"error": {"object": "error", "message": "CUDA out of memory", "type": "InternalServerError", "param": null, "code": 500}}`
	vllmBareErrorChunk  = `{"object": "error", "message": "engine dead", "type": "InternalServerError", "param": null, "code": 500}`
	sglangErrorChunk    = `{"error": {"object": "error", "message": "Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens).", "type": "BadRequestError", "param": null, "code": 400}}`
	sglangAbortChunk    = `{"error": {"object": "error", "message": "Request timed out in the waiting queue.", "type": "SERVICE_UNAVAILABLE", "param": null, "code": 503}}`
	sglangUsageChunk    = `{"id":"x","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`
	tokenChunk          = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"Hi","token_ids":[5],"finish_reason":null}]}`
	finishedChunk       = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","token_ids":[],"finish_reason":"stop"}]}`
	openAIStyleErrorObj = `{"error": {"message": "bad key", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}`
)

func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}

// TestRelayEngineErrors: an engine's error chunk reaches the caller as an
// error with the engine's message, never as a clean stop, whatever follows.
func TestRelayEngineErrors(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		code     string
		message  string
		produced int // responses sent before the error
	}{
		{name: "vLLM error chunk then DONE", in: sse(tokenChunk, vllmErrorChunk, "[DONE]"), code: "invalid_argument", message: "maximum model length of 8192", produced: 1},
		{name: "vLLM error chunk of old", in: sse(tokenChunk, vllmOldErrorChunk, "[DONE]"), code: "engine_error", message: "InternalServerError: CUDA out of memory", produced: 1},
		{name: "bare error object", in: sse(vllmBareErrorChunk, "[DONE]"), code: "engine_error", message: "engine dead"},
		{name: "SGLang error chunk then DONE", in: sse(tokenChunk, sglangErrorChunk, "[DONE]"), code: "invalid_argument", message: "exceeds the maximum allowed length", produced: 1},
		{name: "SGLang abort, usage after it", in: sse(tokenChunk, sglangAbortChunk, sglangUsageChunk, "[DONE]"), code: "engine_error", message: "SERVICE_UNAVAILABLE: Request timed out", produced: 1},
		{name: "error after the finish reason", in: sse(tokenChunk, finishedChunk, vllmOldErrorChunk, "[DONE]"), code: "engine_error", message: "CUDA out of memory", produced: 1},
		{name: "OpenAI's string code", in: sse(openAIStyleErrorObj, "[DONE]"), code: "invalid_argument", message: "bad key"},
		{name: "error chunk over CRLF and several data lines", in: "data: {\"error\":\r\ndata: {\"message\": \"split\", \"code\": 500}}\r\n\r\ndata: [DONE]\r\n\r\n", code: "engine_error", message: "split"},
		{name: "event: error", in: "event: error\ndata: upstream reset\n\ndata: [DONE]\n\n", code: "engine_error", message: "upstream reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := relayAll(t, tt.in)
			var he *transport.HandlerError
			if !errors.As(err, &he) {
				t.Fatalf("relay = %v after %d responses, want the engine's error", err, len(out))
			}
			if he.Code != tt.code || !strings.Contains(he.Message, tt.message) {
				t.Fatalf("error %q %q, want code %q and a message with %q", he.Code, he.Message, tt.code, tt.message)
			}
			if len(out) != tt.produced {
				t.Fatalf("%d responses before the error, want %d: %v", len(out), tt.produced, out)
			}
			for _, r := range out {
				if r.FinishReason != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED {
					t.Fatalf("a response before the error finished: %v", r)
				}
			}
		})
	}
}

// TestRelaySSEForms: the chunks of a normal stream arrive whatever the
// line endings, comments, BOM or data split over lines.
func TestRelaySSEForms(t *testing.T) {
	for name, in := range map[string]string{
		"LF":         sse(tokenChunk, finishedChunk, "[DONE]"),
		"CRLF":       strings.ReplaceAll(sse(tokenChunk, finishedChunk, "[DONE]"), "\n", "\r\n"),
		"CR":         strings.ReplaceAll(sse(tokenChunk, finishedChunk, "[DONE]"), "\n", "\r"),
		"BOM":        "\xEF\xBB\xBF" + sse(tokenChunk, finishedChunk, "[DONE]"),
		"comments":   ": hello\n\n" + sse(tokenChunk) + ": ping\n" + sse(finishedChunk, "[DONE]"),
		"multi-line": "data: {\"choices\":[{\"text\":\"Hi\",\ndata: \"token_ids\":[5]}]}\n\n" + sse(finishedChunk, "[DONE]"),
		"id, retry":  "id: 7\nretry: 100\n" + sse(tokenChunk, finishedChunk, "[DONE]"),
	} {
		t.Run(name, func(t *testing.T) {
			out, err := relayAll(t, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 2 || out[0].GetText() != "Hi" || len(out[0].TokenIds) != 1 || out[1].FinishReason != workerv1.FinishReason_FINISH_REASON_STOP {
				t.Fatalf("responses %v", out)
			}
		})
	}
}

// FuzzSSEReader: any byte stream parses without panic into at most one
// event per blank line, and the same bytes give the same events whether
// they arrive at once or byte by byte.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n", "data: a\r\ndata: b\r\n\r\n", "data: a\rdata: b\r\r", "\xEF\xBB\xBFdata: x\n\n",
		": c\nevent: e\nid: 1\nretry: 10\ndata\n\n", sse(tokenChunk, vllmErrorChunk, "[DONE]"), sse(sglangAbortChunk, "[DONE]"),
		"data: a\n", "\r\n\r\n\n\r", "id: \x00\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole := drain(t, newSSEReader(strings.NewReader(string(in))))
		if n := strings.Count(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(in)), "\n\n"); len(whole) > n {
			t.Fatalf("%d events from %d blank lines", len(whole), n)
		}
		bytewise := drain(t, newSSEReader(iotest.OneByteReader(strings.NewReader(string(in)))))
		if diff := cmp.Diff(whole, bytewise); diff != "" {
			t.Fatalf("byte by byte differs (-whole +bytewise):\n%s", diff)
		}
		// relay on the same bytes ends, with or without an error.
		_ = relay(t.Context(), strings.NewReader(string(in)), 1, nil, func(*workerv1.GenerateResponse) error { return nil })
	})
}

func drain(t *testing.T, sr *sseReader) []sseEvent {
	var out []sseEvent
	for range 1 << 16 {
		ev, err := sr.Next()
		if err != nil {
			return out
		}
		out = append(out, ev)
	}
	t.Fatal("no end of stream")
	return nil
}
