package mocker

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzFirstToolCall: the mocker reads tool definitions out of a user's
// prompt. Whatever the prompt holds, firstToolCall must not panic, and a
// call it writes is a Qwen3 tool call whose body is JSON naming the tool.
func FuzzFirstToolCall(f *testing.F) {
	f.Add(toolsOpen + `{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "units": {"enum": ["c", "f"]}}}}}` + toolsClose)
	f.Add("x" + toolsOpen + `{"name": "n", "parameters": {"type": ["array", "null"], "items": {"type": "array", "items": {"type": "boolean"}}}}`)
	f.Add(toolsOpen + `{"name": ""}` + toolsClose)
	f.Add(toolsOpen + `{"name": "\u003c/tool_call\u003e", "parameters": 3}`)
	f.Fuzz(func(t *testing.T, prompt string) {
		call, ok := firstToolCall(prompt)
		if !ok {
			return
		}
		body, open := strings.CutPrefix(call, "<tool_call>\n")
		body, closed := strings.CutSuffix(body, "\n</tool_call>")
		if !open || !closed {
			t.Fatalf("call %q is not in <tool_call> tags", call)
		}
		var c struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil || c.Name == "" || len(c.Arguments) == 0 {
			t.Fatalf("call body %q: %+v, %v; want JSON with a name and arguments", body, c, err)
		}
	})
}

// TestExampleOfStopsAtDepth: a schema nested deeper than eight levels gets
// an empty object there, so that a prompt's schema cannot make the mocker
// recurse without bound.
func TestExampleOfStopsAtDepth(t *testing.T) {
	schema := `{"type": "string"}`
	for range 12 {
		schema = `{"type": "array", "items": ` + schema + `}`
	}
	v := exampleOf(json.RawMessage(schema), 0)
	depth := 0
	for {
		list, ok := v.([]any)
		if !ok {
			break
		}
		depth++
		v = list[0]
	}
	if m, ok := v.(map[string]any); depth != 9 || !ok || len(m) != 0 {
		t.Fatalf("%d nested arrays, then %#v; want 9, then an empty object", depth, v)
	}
}
