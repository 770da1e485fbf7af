package frontend

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

const weatherTool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`

func TestDecodeChat(t *testing.T) {
	tests := []struct {
		name, body string
		param      string // "" with ok
		ok         bool
	}{
		{"minimal", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"parts", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, "", true},
		{"max_completion_tokens", `{"model":"m","max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"stop list", `{"model":"m","stop":["a","b"],"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, "model", false},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, "messages[0].role", false},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages[0].content", false},
		{"n", `{"model":"m","n":8,"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"n too many", `{"model":"m","n":9,"messages":[{"role":"user","content":"hi"}]}`, "n", false},
		{"n zero", `{"model":"m","n":0,"messages":[{"role":"user","content":"hi"}]}`, "n", false},
		{"five stops", `{"model":"m","stop":["a","b","c","d","e"],"messages":[{"role":"user","content":"hi"}]}`, "stop", false},
		{"top_p zero", `{"model":"m","top_p":0,"messages":[{"role":"user","content":"hi"}]}`, "top_p", false},
		{"stream_options without stream", `{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, "stream_options", false},
		{"tools", `{"model":"m","tools":[` + weatherTool + `],"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"tool_choice required", `{"model":"m","tools":[` + weatherTool + `],"tool_choice":"required","messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"tool_choice named", `{"model":"m","tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"tool_choice unknown function", `{"model":"m","tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"nope"}},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice", false},
		{"tool_choice bad mode", `{"model":"m","tools":[` + weatherTool + `],"tool_choice":"always","messages":[{"role":"user","content":"hi"}]}`, "tool_choice", false},
		{"tool_choice without tools", `{"model":"m","tool_choice":"required","messages":[{"role":"user","content":"hi"}]}`, "tool_choice", false},
		{"tool_choice none without tools", `{"model":"m","tool_choice":"none","messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"tool without name", `{"model":"m","tools":[{"type":"function","function":{}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0]", false},
		{"logprobs", `{"model":"m","logprobs":true,"top_logprobs":3,"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"top_logprobs without logprobs", `{"model":"m","top_logprobs":3,"messages":[{"role":"user","content":"hi"}]}`, "top_logprobs", false},
		{"top_logprobs too many", `{"model":"m","logprobs":true,"top_logprobs":21,"messages":[{"role":"user","content":"hi"}]}`, "top_logprobs", false},
		{"negative max_tokens", `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", false},
		{"cache_salt", `{"model":"m","cache_salt":"tenant-a","messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"cache_salt null", `{"model":"m","cache_salt":null,"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"cache_salt empty", `{"model":"m","cache_salt":"","messages":[{"role":"user","content":"hi"}]}`, "cache_salt", false},
		{"cache_salt too long", `{"model":"m","cache_salt":"` + strings.Repeat("s", 1025) + `","messages":[{"role":"user","content":"hi"}]}`, "cache_salt", false},
		{"cache_salt at the limit", `{"model":"m","cache_salt":"` + strings.Repeat("s", 1024) + `","messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"cache_salt number", `{"model":"m","cache_salt":7,"messages":[{"role":"user","content":"hi"}]}`, "cache_salt", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := decodeChat([]byte(tt.body))
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var pe *openai.ParamError
			if !errors.As(err, &pe) || pe.Param != tt.param || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("err = %v, want a param error on %q", err, tt.param)
			}
		})
	}
}

func TestDecodeCompletionPrompts(t *testing.T) {
	tests := []struct {
		prompt string
		text   string
		ids    int
		ok     bool
	}{
		{`"hello"`, "hello", 0, true},
		{`["hello"]`, "hello", 0, true},
		{`[1,2,3]`, "", 3, true},
		{`[[1,2]]`, "", 2, true},
		{`["a","b"]`, "", 0, false},
		{`""`, "", 0, false},
		{`{}`, "", 0, false},
		{`null`, "", 0, false},
	}
	for _, tt := range tests {
		_, _, text, ids, err := decodeCompletion([]byte(`{"model":"m","prompt":` + tt.prompt + `}`))
		if (err == nil) != tt.ok || text != tt.text || len(ids) != tt.ids {
			t.Errorf("prompt %s: text %q ids %v err %v", tt.prompt, text, ids, err)
		}
	}
}

func qwenTokenizer(t testing.TB) *tokenizer.Tokenizer {
	tok, err := qwenShared()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// qwenShared is the Qwen3 tokenizer every test of this binary shares,
// built once through the process's tokenizer set and held here for the
// whole run: the frontends the tests start fetch the same bytes from their
// eventbus, so they reuse it instead of each building their own (about
// 10 s of CPU each under the race detector).
var qwenShared = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	raw, err := qwen3.ReadFile("tokenizer.json.gz")
	if err != nil {
		return nil, err
	}
	return preprocess.LoadTokenizer(raw)
})

// TestStopStrings feeds text token by token: the output is cut before the
// first stop string, and no part of a stop string is ever released.
func TestStopStrings(t *testing.T) {
	tok := qwenTokenizer(t)
	tests := []struct {
		text  string
		stops []string
		want  string
		stop  bool
	}{
		{"Hello world, this is a test.", []string{"this"}, "Hello world, ", true},
		{"Hello world, this is a test.", []string{"zzz"}, "Hello world, this is a test.", false},
		{"Hello world, this is a test.", []string{"test", "world"}, "Hello ", true},
		{"Ünïcödé text → arrows", []string{"→"}, "Ünïcödé text ", true},
		{"no stops at all", nil, "no stops at all", false},
		{"one. two. three.", []string{"."}, "one", true},
		{"line one\nline two", []string{"\n"}, "line one", true},
		{"no newline here", []string{"\n"}, "no newline here", false},
		{"Ünïcödé → text", []string{"x", "\n"}, "Ünïcödé → te", true},
		{"Ünïcödé → text", []string{"q"}, "Ünïcödé → text", false},
		{"a→b", []string{"→", "b"}, "a", true},
	}
	for _, tt := range tests {
		out := newTextOut(tok, tt.stops)
		var got strings.Builder
		stopped := false
		for _, id := range tok.Encode(tt.text) {
			d, stop := out.add([]uint32{id})
			got.WriteString(d)
			if !utf8.ValidString(d) {
				t.Fatalf("%q: released invalid UTF-8 %q", tt.text, d)
			}
			if stop {
				stopped = true
				break
			}
		}
		if !stopped {
			d, stop := out.flush()
			got.WriteString(d)
			stopped = stop
		}
		if got.String() != tt.want || stopped != tt.stop {
			t.Errorf("%q stops %q: got %q stopped %v, want %q %v", tt.text, tt.stops, got.String(), stopped, tt.want, tt.stop)
		}
	}
}

// FuzzStopStrings feeds arbitrary text token by token through the stop
// holder with arbitrary stop strings: it never panics, never releases part
// of a stop string, and releases exactly the text before the first stop (or
// all of it).
func FuzzStopStrings(f *testing.F) {
	f.Add("one. two.", ".", "")
	f.Add("line\nnext", "\n", "x")
	f.Add("Ünïcödé → text", "→", "é")
	f.Add("abc", "", "")
	tok := qwenTokenizer(f)
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string) {
		var stops []string
		for _, s := range []string{stop1, stop2} {
			if s != "" {
				stops = append(stops, s)
			}
		}
		out := newTextOut(tok, stops)
		var got strings.Builder
		stopped := false
		for _, id := range tok.Encode(text) {
			d, stop := out.add([]uint32{id})
			got.WriteString(d)
			if stop {
				stopped = true
				break
			}
		}
		if !stopped {
			d, stop := out.flush()
			got.WriteString(d)
			stopped = stop
		}
		// The reference is the stream decoder's own text with no stops (the
		// tokenizer need not round-trip arbitrary bytes exactly).
		ref := tok.NewStreamDecoder(true)
		var whole strings.Builder
		for _, id := range tok.Encode(text) {
			whole.WriteString(ref.Add(id))
		}
		whole.WriteString(ref.Flush())
		full := whole.String()
		want, wantStop := full, false
		for _, s := range stops {
			if i := strings.Index(full, s); i >= 0 && (!wantStop || i < len(want)) {
				want, wantStop = full[:i], true
			}
		}
		if got.String() != want || stopped != wantStop {
			t.Fatalf("text %q stops %q: got %q stopped %v, want %q %v", text, stops, got.String(), stopped, want, wantStop)
		}
	})
}

// FuzzDecodeChat checks that no body panics the chat decoder and that an
// accepted request satisfies the validator's promises.
func FuzzDecodeChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stop":"x","temperature":0.5}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`))
	f.Add([]byte(`{"model":1}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, p, err := decodeChat(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not an invalid request", err)
			}
			return
		}
		if p.model == "" || len(r.Messages) == 0 || len(p.stopStrings) > openai.MaxStops {
			t.Fatalf("accepted an invalid request: %+v", p)
		}
		if s := p.sampling; s.Temperature < 0 || s.Temperature > 2 || s.TopP <= 0 || s.TopP > 1 {
			t.Fatalf("accepted sampling out of range: %+v", s)
		}
		_ = r.messages()
	})
}

// FuzzDecodeCompletion does the same for completion requests.
func FuzzDecodeCompletion(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","max_tokens":3}`))
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"stop":["a","b"]}`))
	f.Add([]byte(`{"model":"m","prompt":[[1]],"stream":true}`))
	f.Add([]byte(`{"model":"m","prompt":["a","b"]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, p, text, ids, err := decodeCompletion(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not an invalid request", err)
			}
			return
		}
		if p.model == "" || (text == "" && len(ids) == 0) {
			t.Fatalf("accepted an invalid request: %+v text %q ids %v", p, text, ids)
		}
	})
}

// FuzzDecodeResponses does the same for /v1/responses requests: an
// accepted one is a chat request with a model and at least one message,
// with max_output_tokens at least 1 when given.
func FuzzDecodeResponses(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":5,"stream":true}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"assistant","content":"b"}]}`))
	f.Add([]byte(`{"model":"m","input":"x","text":{"format":{"type":"json_schema"}}}`))
	f.Add([]byte(`{"model":"m","input":[],"tools":[{}]}`))
	f.Add([]byte(`{"input":1}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":"w"},{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"},` +
		`{"type":"function_call","call_id":"d","name":"g","arguments":""},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"r"}]},` +
		`{"type":"reasoning","summary":[]}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},` +
		`"parallel_tool_calls":false,"max_tool_calls":2}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"item_reference","id":"fc_1"}],"tool_choice":"auto"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, cr, p, err := decodeResponses(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not an invalid request", err)
			}
			return
		}
		if p.model == "" || len(cr.Messages) == 0 || (r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1) ||
			(r.MaxToolCalls != nil && *r.MaxToolCalls < 1) || (cr.tools.Offered() && len(cr.tools.Names()) == 0) {
			t.Fatalf("accepted an invalid request: %+v", p)
		}
		if s := p.sampling; s.Temperature < 0 || s.Temperature > 2 || s.TopP <= 0 || s.TopP > 1 {
			t.Fatalf("accepted sampling out of range: %+v", s)
		}
		_ = cr.messages()
	})
}
