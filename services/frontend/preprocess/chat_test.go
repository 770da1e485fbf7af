package preprocess

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// TestMessageTexts: roles are checked and contents flattened, and the
// template's messages are built from them.
func TestMessageTexts(t *testing.T) {
	reasoning := "think"
	for _, tt := range []struct {
		name      string
		msgs      []openai.ChatMessage
		wantParam string
		want      []chattemplate.Message
	}{
		{name: "roles and contents", msgs: []openai.ChatMessage{
			{Role: "developer", Content: json.RawMessage(`"be brief"`)},
			{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`)},
			{Role: "assistant", Content: json.RawMessage(`null`), ReasoningContent: &reasoning, ToolCalls: []openai.ToolCall{
				{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "f", Arguments: json.RawMessage(`"{}"`)}}}},
			{Role: "tool", Content: json.RawMessage(`"18"`), ToolCallID: "c1", Name: "f"},
		}, want: []chattemplate.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "ab"},
			{Role: "assistant", ReasoningContent: &reasoning, ToolCalls: []chattemplate.ToolCall{
				{ID: "c1", Type: "function", Function: chattemplate.FunctionCall{Name: "f", Arguments: json.RawMessage(`"{}"`)}}}},
			{Role: "tool", Content: "18", ToolCallID: "c1", Name: "f"},
		}},
		{name: "unknown role", msgs: []openai.ChatMessage{{Role: "user"}, {Role: "robot"}}, wantParam: "messages[1].role"},
		{name: "image part", msgs: []openai.ChatMessage{{Role: "user", Content: json.RawMessage(`[{"type":"image_url"}]`)}},
			wantParam: "messages[0].content"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			texts, err := MessageTexts(tt.msgs)
			if tt.wantParam != "" {
				var pe *openai.ParamError
				if !errors.As(err, &pe) || pe.Param != tt.wantParam {
					t.Fatalf("error %v, want one about %s", err, tt.wantParam)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, ChatMessages(tt.msgs, texts)); d != "" {
				t.Errorf("ChatMessages (-want +got):\n%s", d)
			}
			// Without texts the contents are flattened on the way.
			if d := cmp.Diff(tt.want, ChatMessages(tt.msgs, nil)); d != "" {
				t.Errorf("ChatMessages without texts (-want +got):\n%s", d)
			}
		})
	}
}
