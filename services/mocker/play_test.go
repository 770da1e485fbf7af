package mocker

import (
	"encoding/json"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
)

func TestPlayerScript(t *testing.T) {
	dir := t.TempDir()
	if _, err := qwen3.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	tok, cfg, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(cfg.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	weather := json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["city"]}}}`)
	other := json.RawMessage(`{"type":"function","function":{"name":"other","parameters":{"type":"object","properties":{}}}}`)
	user := chattemplate.Message{Role: "user", Content: "What is the weather in Paris?"}
	call := chattemplate.Message{Role: "assistant", ToolCalls: []chattemplate.ToolCall{{Type: "function",
		Function: chattemplate.FunctionCall{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}}}
	result := chattemplate.Message{Role: "tool", Content: `{"temperature": 21}`, ToolCallID: "call_1"}
	const wantCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"switchyard\",\"days\":1,\"unit\":\"celsius\"}}\n</tool_call>"
	for _, tc := range []struct {
		name     string
		in       chattemplate.Input
		want     string
		wantEnds bool
	}{
		{"thinks by default", chattemplate.Input{Messages: []chattemplate.Message{user}}, thinkText, false},
		{"no thinking", chattemplate.Input{Messages: []chattemplate.Message{user}, Extra: map[string]any{"enable_thinking": false}}, "", false},
		{"calls the first tool", chattemplate.Input{Messages: []chattemplate.Message{user}, Tools: []json.RawMessage{weather, other}}, thinkText + wantCall, true},
		{"calls without thinking", chattemplate.Input{Messages: []chattemplate.Message{user}, Tools: []json.RawMessage{weather},
			Extra: map[string]any{"enable_thinking": false}}, wantCall, true},
		{"answers a tool result in words", chattemplate.Input{Messages: []chattemplate.Message{user, call, result}, Tools: []json.RawMessage{weather}}, thinkText, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.AddGenerationPrompt = true
			text, err := tmpl.Render(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			ids, ends := newPlayer(tok).script(tok.Encode(text))
			if got := tok.Decode(ids); got != tc.want || ends != tc.wantEnds {
				t.Errorf("script = %q, %v; want %q, %v", got, ends, tc.want, tc.wantEnds)
			}
		})
	}
	// A prompt that is not a chat turn gets no script.
	if ids, ends := newPlayer(tok).script(tok.Encode("Once upon a time")); ids != nil || ends {
		t.Errorf("completion prompt: script %v, %v", ids, ends)
	}
}

func TestLogprobs(t *testing.T) {
	lps := logprobs([]uint32{5, 9}, 3, 2, 100)
	if len(lps) != 2 {
		t.Fatalf("%d entries", len(lps))
	}
	for i, lp := range lps {
		if lp.Logprob > 0 || len(lp.Top) != 2 || lp.Top[0].TokenId != []uint32{5, 9}[i] || lp.Top[0].Logprob != lp.Logprob || lp.Top[1].Logprob >= lp.Logprob {
			t.Errorf("entry %d: %v", i, lp)
		}
	}
}
