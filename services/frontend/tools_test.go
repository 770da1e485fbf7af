package frontend_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_weather",
		Description: openai.String("The current weather of a city."),
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}}},
			"required":   []string{"city"},
		},
	})
}

func timeTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time",
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string"}}}})
}

// reasoningOf reads the reasoning_content extension field of a message or
// delta.
func reasoningOf(t testing.TB, raw string) string {
	t.Helper()
	var v struct {
		ReasoningContent *string `json:"reasoning_content"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if v.ReasoningContent == nil {
		return ""
	}
	return *v.ReasoningContent
}

// TestToolCalls runs an agent's tool loop with the openai-go client: the
// mocker answers a request with tools by calling the first tool in Qwen3's
// <tool_call> form, and the frontend returns it as tool_calls, whole and
// streamed; the tool's result sent back gets a text answer.
func TestToolCalls(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startStack(t, stackOpts{plane: transport.PlaneTCP})
	s.addMocker(0)
	s.waitInstances(1)
	base := func() openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(200),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
			Tools:    []openai.ChatCompletionToolUnionParam{weatherTool(), timeTool()}}
	}

	t.Run("round trip", func(t *testing.T) {
		p := base()
		resp, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("choice = %s", ch.RawJSON())
		}
		call := ch.Message.ToolCalls[0]
		var args map[string]any
		if call.Type != "function" || call.Function.Name != "get_weather" || !strings.HasPrefix(call.ID, "call_") ||
			json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args["city"] != "switchyard" || args["unit"] != "celsius" {
			t.Fatalf("tool call = %s", call.RawJSON())
		}
		if ch.Message.Content != "" || strings.Contains(ch.Message.RawJSON(), "<tool_call>") {
			t.Fatalf("content %q alongside the call", ch.Message.Content)
		}
		if reasoningOf(t, ch.Message.RawJSON()) == "" {
			t.Fatalf("no reasoning_content: %s", ch.Message.RawJSON())
		}
		// The tool's answer goes back; the model answers in words.
		p.Messages = append(p.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"temperature": 21, "unit": "celsius"}`, call.ID))
		resp, err = s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ch := resp.Choices[0]; len(ch.Message.ToolCalls) != 0 || ch.Message.Content == "" || ch.FinishReason != "length" {
			t.Fatalf("answer to the tool result = %s", ch.RawJSON())
		}
	})

	t.Run("streamed", func(t *testing.T) {
		st := s.client.Chat.Completions.NewStreaming(ctx, base())
		defer st.Close()
		var acc openai.ChatCompletionAccumulator
		var reasoning strings.Builder
		var deltas []openai.ChatCompletionChunkChoiceDeltaToolCall
		finished := 0
		for st.Next() {
			chunk := st.Current()
			if !acc.AddChunk(chunk) {
				t.Fatalf("the accumulator rejects chunk %s", chunk.RawJSON())
			}
			for _, c := range chunk.Choices {
				reasoning.WriteString(reasoningOf(t, c.Delta.RawJSON()))
				deltas = append(deltas, c.Delta.ToolCalls...)
			}
			if _, ok := acc.JustFinishedToolCall(); ok {
				finished++
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		// OpenAI's incremental form: index, id, type and name first, then
		// the arguments in fragments as the model generates them (the
		// mocker writes them token by token).
		if len(deltas) < 3 || deltas[0].ID == "" || deltas[0].Function.Name != "get_weather" || deltas[0].Function.Arguments != "" {
			t.Fatalf("tool call deltas = %+v", deltas)
		}
		var args strings.Builder
		for _, d := range deltas[1:] {
			if d.ID != "" || d.Function.Name != "" || d.Index != 0 || d.Function.Arguments == "" {
				t.Fatalf("argument delta = %+v", d)
			}
			args.WriteString(d.Function.Arguments)
		}
		ch := acc.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "get_weather" ||
			!json.Valid([]byte(ch.Message.ToolCalls[0].Function.Arguments)) || ch.Message.Content != "" ||
			ch.Message.ToolCalls[0].Function.Arguments != args.String() {
			t.Fatalf("accumulated = %+v", ch)
		}
		if reasoning.Len() == 0 || strings.Contains(reasoning.String(), "think>") {
			t.Fatalf("reasoning = %q", reasoning.String())
		}
		if finished != 1 {
			t.Fatalf("%d finished tool calls", finished)
		}
	})

	t.Run("tool_choice none", func(t *testing.T) {
		p := base()
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
		resp, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ch := resp.Choices[0]; len(ch.Message.ToolCalls) != 0 || ch.Message.Content == "" || ch.FinishReason == "tool_calls" {
			t.Fatalf("tool_choice none = %s", ch.RawJSON())
		}
	})

	t.Run("tool_choice named", func(t *testing.T) {
		p := base()
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"})
		resp, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ch := resp.Choices[0]; len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "get_time" {
			t.Fatalf("named tool_choice = %s", ch.RawJSON())
		}
	})

	t.Run("tool_choice required unsatisfied", func(t *testing.T) {
		// After a tool result the model answers in words: required cannot
		// be met, and the answer is an error, not text.
		p := base()
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
			ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: "call_1", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}}}},
			openai.ToolMessage(`{"temperature": 21}`, "call_1"))
		_, err := s.client.Chat.Completions.New(ctx, p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Code != "tool_choice_not_satisfied" || !strings.Contains(apiErr.Message, "tool_choice") {
			t.Fatalf("err = %v, want a 500 tool_choice_not_satisfied", err)
		}
		st := s.client.Chat.Completions.NewStreaming(ctx, p)
		for st.Next() {
		}
		if err := st.Err(); err == nil || !strings.Contains(err.Error(), "tool_choice") {
			t.Fatalf("streamed err = %v, want an error event naming tool_choice", err)
		}
		st.Close()
	})

	t.Run("reasoning without tools", func(t *testing.T) {
		p := base()
		p.Tools = nil
		resp, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if r := reasoningOf(t, ch.Message.RawJSON()); r != "A short answer will do." || ch.Message.Content == "" || strings.Contains(ch.Message.Content, "think>") {
			t.Fatalf("reasoning %q content %q", r, ch.Message.Content)
		}
		if resp.Usage.CompletionTokens != 200 {
			t.Fatalf("usage %+v: reasoning tokens must count", resp.Usage)
		}
	})
}
