// Package chattemplate renders a model's Jinja chat template (the
// chat_template field of a Hugging Face tokenizer_config.json) into the
// prompt string the model was trained on.
//
// Rendering follows Hugging Face's Jinja2 semantics (loop.index0,
// namespace(), |tojson with Python's separators, string methods such as
// .startswith and .split, raise_exception) so that the prompt is byte for
// byte what transformers' apply_chat_template produces. The engine is
// github.com/ardanlabs/jinja; this package adds the conversion from typed
// messages to template values, with JSON objects keeping their key order as
// Python dicts do.
package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ardanlabs/jinja"
)

// ErrTemplate is returned, wrapped, when a template fails to compile.
var ErrTemplate = errors.New("chattemplate: invalid template")

// ErrRender is returned, wrapped, when rendering fails: the template raised
// an exception (raise_exception) or evaluated an invalid expression on the
// given messages. A frontend answers such an error with 400 Bad Request.
var ErrRender = errors.New("chattemplate: render failed")

// ErrInput is returned, wrapped, when an input value cannot be converted to
// a template value (for example tool call arguments that are not valid JSON
// where JSON is required).
var ErrInput = errors.New("chattemplate: invalid input")

// Message is one chat message as the templates of Hugging Face models
// expect it. Optional fields that are empty are left undefined in the
// template, so `message.reasoning_content is defined` behaves as it does in
// transformers when the key is absent.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string `json:"role"`
	// Content is the message text.
	Content string `json:"content"`
	// ReasoningContent, when non-nil, is the assistant's reasoning text
	// (rendered by Qwen3-style templates inside <think> tags).
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	// ToolCalls are the assistant's function calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Name is the optional participant or tool name.
	Name string `json:"name,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// ToolCall is one function call made by the assistant.
type ToolCall struct {
	// ID is the call id.
	ID string `json:"id,omitempty"`
	// Type is "function".
	Type string `json:"type,omitempty"`
	// Function is the called function.
	Function FunctionCall `json:"function"`
}

// FunctionCall names a function and its arguments.
type FunctionCall struct {
	// Name is the function name.
	Name string `json:"name"`
	// Arguments is the JSON object of arguments. OpenAI clients send it as a
	// JSON string; like vLLM and transformers, a string holding a JSON
	// object is parsed so that templates applying |tojson re-serialise it
	// with Python's separators. Any other string is passed through as a
	// string.
	Arguments json.RawMessage `json:"arguments"`
}

// Input is everything a chat template can read.
type Input struct {
	// Messages is the conversation.
	Messages []Message
	// AddGenerationPrompt appends the header of the assistant's turn.
	AddGenerationPrompt bool
	// Tools are the tool (function) definitions as raw JSON objects, in the
	// OpenAI format; nil or empty means no tools (the variable is None in
	// the template, as in transformers).
	Tools []json.RawMessage
	// BOSToken and EOSToken are the tokenizer's special token strings.
	BOSToken string
	EOSToken string
	// Extra holds further template variables such as enable_thinking
	// (chat_template_kwargs). Values are plain Go values: nil, bool, int,
	// int64, float64, string, []any, map[string]any (keys sorted) or
	// json.RawMessage (key order kept).
	Extra map[string]any
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tmpl *jinja.Template
}

// Parse compiles a Jinja chat template. It returns an error wrapping
// ErrTemplate when the source does not parse.
func Parse(source string) (tmpl *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tmpl, err = nil, fmt.Errorf("%w: %v", ErrTemplate, r)
		}
	}()
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	// The same template with its macro calls counted (see MaxMacroCalls);
	// should the rewriting not compile, which no template seen does, the
	// template is kept as it is.
	if guarded, err := jinja.Compile(guardMacros(source)); err == nil {
		t = guarded
	}
	return &Template{tmpl: t}, nil
}

// Render renders the template for in. It returns an error wrapping ErrInput
// for inconvertible inputs and ErrRender when the template raises or fails
// on the given messages.
func (t *Template) Render(in Input) (out string, err error) {
	vars, err := in.values()
	if err != nil {
		return "", err
	}
	// The engine is not ours; a panic on an odd input must become a 400,
	// not take the frontend down.
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: %v", ErrRender, r)
		}
	}()
	vars[guardName] = macroGuard()
	s, err := t.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRender, err)
	}
	return s, nil
}

func (in Input) values() (map[string]jinja.Value, error) {
	vars := make(map[string]jinja.Value, 6+len(in.Extra))
	for k, v := range in.Extra {
		jv, err := goValue(v)
		if err != nil {
			return nil, fmt.Errorf("%w: extra variable %q: %w", ErrInput, k, err)
		}
		vars[k] = jv
	}
	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := m.value()
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrInput, i, err)
		}
		msgs[i] = v
	}
	vars["messages"] = jinja.NewList(msgs)
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	vars["bos_token"] = jinja.NewString(in.BOSToken)
	vars["eos_token"] = jinja.NewString(in.EOSToken)
	// Like transformers' apply_chat_template, tools and documents are
	// always passed, as None when absent: templates test both
	// `tools is not none` and `if tools`.
	vars["tools"] = jinja.None()
	vars["documents"] = jinja.None()
	if len(in.Tools) > 0 {
		tools := make([]jinja.Value, len(in.Tools))
		for i, raw := range in.Tools {
			v, err := jsonValue(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: tool %d: %w", ErrInput, i, err)
			}
			tools[i] = v
		}
		vars["tools"] = jinja.NewList(tools)
	}
	return vars, nil
}

func (m Message) value() (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	dict.Set("content", jinja.NewString(m.Content))
	if m.ReasoningContent != nil {
		dict.Set("reasoning_content", jinja.NewString(*m.ReasoningContent))
	}
	if m.Name != "" {
		dict.Set("name", jinja.NewString(m.Name))
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			args, err := argumentsValue(tc.Function.Arguments)
			if err != nil {
				return jinja.Value{}, fmt.Errorf("tool call %d arguments: %w", i, err)
			}
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(tc.Function.Name))
			fn.AsDict().Set("arguments", args)
			call := jinja.NewDict()
			if tc.ID != "" {
				call.AsDict().Set("id", jinja.NewString(tc.ID))
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			call.AsDict().Set("type", jinja.NewString(typ))
			call.AsDict().Set("function", fn)
			calls[i] = call
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	return d, nil
}

// argumentsValue turns OpenAI-style arguments (a JSON string holding an
// object, or an object) into a template value.
func argumentsValue(raw json.RawMessage) (jinja.Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return jinja.NewDict(), nil
	}
	v, err := jsonValue(raw)
	if err != nil {
		return jinja.Value{}, err
	}
	if v.IsString() {
		inner := v.AsString()
		if obj, err := jsonValue(json.RawMessage(inner)); err == nil && obj.IsDict() {
			return obj, nil
		}
	}
	return v, nil
}

// jsonValue decodes one JSON value keeping object key order.
func jsonValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("decode JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("decode JSON: trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Value{}, fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return d, nil
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		}
		return jinja.Value{}, fmt.Errorf("unexpected delimiter %v", t)
	default:
		return jinja.FromGoValue(tok), nil
	}
}

// goValue converts a plain Go value (as documented on Input.Extra).
func goValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return jsonValue(x)
	case int32:
		return jinja.NewInt(int64(x)), nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	case nil, bool, int, int64, float64, string, []any, map[string]any, json.Number:
		return jinja.FromGoValue(x), nil
	}
	return jinja.Value{}, fmt.Errorf("unsupported type %T", v)
}
