package toolcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, parser, text string
		content            string
		calls              []Call
	}{
		{"plain text", Qwen3, "Hello, world.\n", "Hello, world.\n", nil},
		{"parser none keeps tags", None, `<tool_call>{"name":"f","arguments":{}}</tool_call>`, `<tool_call>{"name":"f","arguments":{}}</tool_call>`, nil},
		{"one call", Qwen3, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
			[]Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{"content then calls", Hermes, "Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
			"Let me check.", []Call{{Name: "a", Arguments: `{"x":1}`}, {Name: "b", Arguments: `{}`}}},
		{"arguments as a string", Qwen3, `<tool_call>{"name": "f", "arguments": "{\"q\": \"x\"}"}</tool_call>`, "",
			[]Call{{Name: "f", Arguments: `{"q":"x"}`}}},
		{"parameters for arguments", Qwen3, `<tool_call>{"name": "f", "parameters": {"q": 2}}</tool_call>`, "",
			[]Call{{Name: "f", Arguments: `{"q":2}`}}},
		{"no arguments", Qwen3, `<tool_call>{"name": "f"}</tool_call>`, "", []Call{{Name: "f", Arguments: `{}`}}},
		{"malformed JSON is content", Qwen3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
			"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>", nil},
		{"arguments not an object is content", Qwen3, `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`,
			`<tool_call>{"name": "f", "arguments": [1]}</tool_call>`, nil},
		{"no name is content", Qwen3, `<tool_call>{"arguments": {}}</tool_call>`, `<tool_call>{"arguments": {}}</tool_call>`, nil},
		{"unclosed call is content", Qwen3, "ok <tool_call>\n{\"name\": \"f\"", "ok <tool_call>\n{\"name\": \"f\"", nil},
		{"text after a call", Qwen3, "<tool_call>{\"name\": \"f\"}</tool_call>\n\nDone.", "Done.", []Call{{Name: "f", Arguments: `{}`}}},
		{"partial tag at the end is content", Qwen3, "a <tool_ca", "a <tool_ca", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls, err := Parse(tc.parser, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if content != tc.content {
				t.Errorf("content %q, want %q", content, tc.content)
			}
			if diff := cmp.Diff(tc.calls, calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			// Streamed one byte at a time, the result is the same.
			gotContent, gotCalls := streamed(t, tc.parser, tc.text, 1)
			if gotContent != content || !cmp.Equal(gotCalls, calls) {
				t.Errorf("streamed: %q %v, whole: %q %v", gotContent, gotCalls, content, calls)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, n := range append(Names(), "") {
		if err := Validate(n); err != nil {
			t.Errorf("Validate(%q) = %v", n, err)
		}
	}
	if _, err := New("mistral"); err == nil || !strings.Contains(err.Error(), "hermes") {
		t.Errorf("New(mistral) = %v, want an error naming the valid values", err)
	}
}

// streamed feeds text in pieces of step bytes.
func streamed(t testing.TB, parser, text string, step int) (string, []Call) {
	p, err := New(parser)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var calls []Call
	collect := func(evs []Event) {
		for _, e := range evs {
			if e.Call != nil {
				calls = append(calls, *e.Call)
			} else {
				b.WriteString(e.Text)
			}
		}
	}
	for i := 0; i < len(text); i += step {
		collect(p.Add(text[i:min(i+step, len(text))]))
	}
	collect(p.Flush())
	if p.Calls() != len(calls) {
		t.Fatalf("Calls() = %d, returned %d", p.Calls(), len(calls))
	}
	return b.String(), calls
}

// FuzzParser checks that no text makes the parser fail, that any split of
// the text parses as the whole does, that text without a call tag comes
// back unchanged, and that every call's arguments are a JSON object.
func FuzzParser(f *testing.F) {
	f.Add("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>", uint8(3))
	f.Add("hi <tool_call>{\"name\": \"f\"}</tool_call> <tool_call>{bad}</tool_call> bye", uint8(1))
	f.Add("<tool_call><tool_call></tool_call></tool_call>", uint8(2))
	f.Add("  \n<tool_", uint8(5))
	f.Fuzz(func(t *testing.T, text string, step uint8) {
		content, calls, err := Parse(Qwen3, text)
		if err != nil {
			t.Fatal(err)
		}
		gotContent, gotCalls := streamed(t, Qwen3, text, int(step%16)+1)
		if gotContent != content || !cmp.Equal(gotCalls, calls) {
			t.Fatalf("split by %d: %q %v, whole: %q %v", step%16+1, gotContent, gotCalls, content, calls)
		}
		if len(calls) == 0 && content != text {
			t.Fatalf("text without a call changed: %q -> %q", text, content)
		}
		for _, c := range calls {
			var obj map[string]any
			if c.Name == "" || json.Unmarshal([]byte(c.Arguments), &obj) != nil {
				t.Fatalf("call %+v: want a name and an object", c)
			}
		}
	})
}
