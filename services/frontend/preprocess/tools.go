package preprocess

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// ErrToolChoice is a generation that did not call a tool although
// tool_choice required one (required, or a named function): the answer is an
// error, never a silent text answer.
var ErrToolChoice = errors.New("the model's answer does not satisfy tool_choice")

// Tool choice modes.
const (
	toolChoiceAuto     = "auto"
	toolChoiceNone     = "none"
	toolChoiceRequired = "required"
	toolChoiceFunction = "function"
)

// Tools are a chat request's validated tools and tool_choice: which tools
// the chat template shows the model, and what its answer must call.
type Tools struct {
	// tools are the definitions as sent, and names their function names.
	tools []json.RawMessage
	names []string
	// choice is a tool choice mode; named is the function of "function".
	choice string
	named  string
	// single keeps only the first call (parallel_tool_calls false).
	single bool
}

// ParseTools validates tools, tool_choice and parallel_tool_calls. Its
// errors are openai.ParamErrors naming the field.
func ParseTools(tools []json.RawMessage, choice json.RawMessage, parallel *bool) (Tools, error) {
	ts := Tools{tools: tools, choice: toolChoiceAuto, single: parallel != nil && !*parallel}
	for i, raw := range tools {
		typ, name, hasFunction, ok := openai.ToolFunctionName(raw)
		if !ok {
			var t struct {
				Type     string `json:"type"`
				Function *struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(raw, &t); err != nil {
				typ, hasFunction = "", false
			} else if typ, hasFunction = t.Type, t.Function != nil; hasFunction {
				name = t.Function.Name
			}
		}
		if typ != "function" || !hasFunction || name == "" {
			return Tools{}, openai.Invalid(fmt.Sprintf("tools[%d]", i), `each tool must be {"type":"function","function":{"name":...}}`)
		}
		ts.names = append(ts.names, name)
	}
	choice = bytes.TrimSpace(choice)
	if len(choice) == 0 || bytes.Equal(choice, []byte("null")) {
		if len(tools) == 0 {
			ts.choice = toolChoiceNone
		}
		return ts, nil
	}
	var mode string
	if json.Unmarshal(choice, &mode) == nil {
		switch mode {
		case toolChoiceAuto, toolChoiceNone, toolChoiceRequired:
			ts.choice = mode
		default:
			return Tools{}, openai.Invalid("tool_choice", "tool_choice must be none, auto, required or a function, got %q", mode)
		}
	} else {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(choice, &named) != nil || named.Type != "function" || named.Function.Name == "" {
			return Tools{}, openai.Invalid("tool_choice", `tool_choice must be none, auto, required or {"type":"function","function":{"name":...}}`)
		}
		ts.choice, ts.named = toolChoiceFunction, named.Function.Name
	}
	if ts.choice != toolChoiceNone && len(tools) == 0 {
		return Tools{}, openai.Invalid("tool_choice", "tool_choice %s needs tools", ts.choice)
	}
	if ts.choice == toolChoiceFunction {
		found := false
		for _, n := range ts.names {
			found = found || n == ts.named
		}
		if !found {
			return Tools{}, openai.Invalid("tool_choice", "tool_choice names the function %q, which is not among the tools", ts.named)
		}
	}
	return ts, nil
}

// Template returns the tools the chat template shows the model: none with
// tool_choice none (the model cannot call what it is not offered), only the
// named one for a named function, all of them otherwise.
func (ts Tools) Template() []json.RawMessage {
	switch ts.choice {
	case toolChoiceNone:
		return nil
	case toolChoiceFunction:
		for i, n := range ts.names {
			if n == ts.named {
				return ts.tools[i : i+1]
			}
		}
	}
	return ts.tools
}

// Check reports whether calls satisfy the tool choice: an error wrapping
// ErrToolChoice when they do not.
func (ts Tools) Check(calls []openai.ToolCallOut) error {
	switch ts.choice {
	case toolChoiceRequired:
		if len(calls) == 0 {
			return fmt.Errorf("%w: tool_choice is required and the model called no tool", ErrToolChoice)
		}
	case toolChoiceFunction:
		if len(calls) == 0 {
			return fmt.Errorf("%w: tool_choice names %q and the model called no tool", ErrToolChoice, ts.named)
		}
		for _, c := range calls {
			if c.Function.Name != ts.named {
				return fmt.Errorf("%w: tool_choice names %q and the model called %q", ErrToolChoice, ts.named, c.Function.Name)
			}
		}
	}
	return nil
}

// Offered reports whether the model may call tools: tool_choice is not
// none.
func (ts Tools) Offered() bool { return ts.choice != toolChoiceNone }

// Single reports whether only the answer's first call is kept
// (parallel_tool_calls false).
func (ts Tools) Single() bool { return ts.single }

// Names returns the tools' function names, in the order of the tools.
func (ts Tools) Names() []string { return ts.names }
