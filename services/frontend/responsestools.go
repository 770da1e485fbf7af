package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/switchyard-llm/switchyard/services/frontend/openai"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// The Responses API's function tools, converted to the chat request's: its
// tools are flat ({"type":"function","name":...,"parameters":...}), a
// named tool_choice is {"type":"function","name":...}, a call the model made
// comes back as a function_call input item and its result as a
// function_call_output item.

// responsesTool is one tool of a Responses request.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// responsesTools validates a Responses request's tools, tool_choice and
// parallel_tool_calls, as the chat request's preprocess.Tools.
func responsesTools(tools []json.RawMessage, choice json.RawMessage, parallel *bool) (preprocess.Tools, error) {
	chat := make([]json.RawMessage, len(tools))
	for i, raw := range tools {
		var t responsesTool
		if err := json.Unmarshal(raw, &t); err != nil || t.Type != "function" || t.Name == "" {
			if t.Type != "" && t.Type != "function" {
				return preprocess.Tools{}, invalid(fmt.Sprintf("tools[%d].type", i), "tool type %q is not supported; only function tools are", t.Type)
			}
			return preprocess.Tools{}, invalid(fmt.Sprintf("tools[%d]", i), `each tool must be {"type":"function","name":...}`)
		}
		fn := map[string]any{"name": t.Name}
		if t.Description != nil {
			fn["description"] = *t.Description
		}
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			fn["parameters"] = t.Parameters
		}
		if t.Strict != nil {
			fn["strict"] = *t.Strict
		}
		chat[i], _ = json.Marshal(map[string]any{"type": "function", "function": fn})
	}
	choice = bytes.TrimSpace(choice)
	// The Responses API (unlike chat) takes auto or none without tools.
	if len(tools) == 0 && (bytes.Equal(choice, []byte(`"auto"`)) || bytes.Equal(choice, []byte(`"none"`))) {
		choice = nil
	}
	if len(choice) > 0 && choice[0] == '{' {
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(choice, &named) != nil || named.Type != "function" || named.Name == "" {
			return preprocess.Tools{}, invalid("tool_choice", `tool_choice must be none, auto, required or {"type":"function","name":...}`)
		}
		choice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	}
	return preprocess.ParseTools(chat, choice, parallel)
}

// responsesItem is one item of a Responses request's input list: a message,
// a function call the model made, a function call's output, or reasoning.
type responsesItem struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// appendCall adds a function_call item to the conversation: to the
// assistant message before it when there is one (a turn with text and
// calls, or with several calls), as a new assistant message otherwise.
func appendCall(msgs []openai.ChatMessage, it responsesItem, i int) ([]openai.ChatMessage, error) {
	if len(bytes.TrimSpace([]byte(it.Arguments))) == 0 {
		it.Arguments = "{}"
	}
	switch {
	case it.Name == "":
		return nil, invalid(fmt.Sprintf("input[%d].name", i), "a function_call item needs the function's name")
	case it.CallID == "":
		return nil, invalid(fmt.Sprintf("input[%d].call_id", i), "a function_call item needs its call_id")
	case !json.Valid([]byte(it.Arguments)):
		return nil, invalid(fmt.Sprintf("input[%d].arguments", i), "arguments must be a JSON string of the call's arguments")
	}
	call := openai.ToolCall{ID: it.CallID, Type: "function",
		Function: openai.FunctionCall{Name: it.Name, Arguments: json.RawMessage(it.Arguments)}}
	if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
		msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
		return msgs, nil
	}
	return append(msgs, openai.ChatMessage{Role: "assistant", Content: json.RawMessage(`null`), ToolCalls: []openai.ToolCall{call}}), nil
}

// functionOutput is a function_call_output item as the tool message of the
// chat conversation: its output is a string or a list of text parts.
func functionOutput(it responsesItem, i int) (openai.ChatMessage, error) {
	if it.CallID == "" {
		return openai.ChatMessage{}, invalid(fmt.Sprintf("input[%d].call_id", i), "a function_call_output item needs the call_id of its call")
	}
	text, err := responsesContent(it.Output)
	if err != nil {
		return openai.ChatMessage{}, invalid(fmt.Sprintf("input[%d].output", i), "%v", err)
	}
	c, _ := json.Marshal(text)
	return openai.ChatMessage{Role: "tool", Content: c, ToolCallID: it.CallID}, nil
}
