package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"
)

// MaxStops is OpenAI's limit on stop sequences.
const MaxStops = 4

// ChatRequest is the body of POST /v1/chat/completions: the fields the
// frontend reads. Members it does not hold are left to the caller's field
// policy.
type ChatRequest struct {
	Model               string            `json:"model"`
	Messages            []ChatMessage     `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	MaxCompletionTokens *int64            `json:"max_completion_tokens"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int64            `json:"top_logprobs"`
	ResponseFormat      json.RawMessage   `json:"response_format"`
	CommonRequest
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	Logprobs *int64          `json:"logprobs"`
	CommonRequest
}

// CommonRequest holds what both endpoints share: streaming, lengths,
// sampling and stop conditions. A nil pointer is a field the client did not
// set (or set to null).
type CommonRequest struct {
	Stream            bool            `json:"stream"`
	StreamOptions     *StreamOptions  `json:"stream_options"`
	MaxTokens         *int64          `json:"max_tokens"`
	N                 *int64          `json:"n"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int64          `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	Seed              *int64          `json:"seed"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []uint32        `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	MinTokens         *int64          `json:"min_tokens"`
	// CacheSalt isolates the request's prefix cache (vLLM's cache_salt):
	// only requests with the same salt share cached blocks.
	CacheSalt *string `json:"cache_salt"`

	// opt holds the optional fields' values when the fast decoder
	// (decode.go) decoded the request.
	opt optStore
}

// StreamOptions is a streamed request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one message as OpenAI clients send it; content is a
// string, an array of text parts, or null (ContentText flattens it).
type ChatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCallID       string          `json:"tool_call_id"`
	ToolCalls        []ToolCall      `json:"tool_calls"`
	ReasoningContent *string         `json:"reasoning_content"`
}

// ToolCall is a tool call of an assistant message a client sends back in
// the conversation.
type ToolCall struct {
	// ID is the call id.
	ID string `json:"id,omitempty"`
	// Type is "function".
	Type string `json:"type,omitempty"`
	// Function is the called function.
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a ToolCall called.
type FunctionCall struct {
	// Name is the function name.
	Name string `json:"name"`
	// Arguments is the arguments as the client sent them: OpenAI clients
	// send a JSON string holding a JSON object, others the object itself.
	Arguments json.RawMessage `json:"arguments"`
}

// DecodeChat decodes a chat completion body into r, as Decode would.
func DecodeChat(body []byte, r *ChatRequest) error {
	if decodeChatFast(body, r) {
		return nil
	}
	*r = ChatRequest{}
	return Decode(body, r)
}

// DecodeCompletion decodes a completion body into r, as Decode would.
func DecodeCompletion(body []byte, r *CompletionRequest) error {
	if decodeCompletionFast(body, r) {
		return nil
	}
	*r = CompletionRequest{}
	return Decode(body, r)
}

// Decode decodes a request body into v with encoding/json. Its errors are
// ParamErrors a client can act on: an empty body or one that is not an
// object, malformed JSON, or a value of the wrong type, naming the field
// by its JSON path and the JSON it takes.
func Decode(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return Invalid("", "the request body is empty; it must be a JSON object")
	}
	if body[0] != '{' {
		return Invalid("", "the request body must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := jsonField(te.Field)
			return Invalid(field, "invalid type for %q: expected %s, got %s", field, jsonTypeName(te.Type), jsonValueName(te.Value))
		}
		return Invalid("", "malformed JSON body: %v", err)
	}
	return nil
}

// jsonField is the JSON path of a field a type error names, without the
// Go names of the embedded structs it passed through.
func jsonField(f string) string {
	parts := strings.Split(f, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "CommonRequest" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// jsonTypeName names the JSON a Go type takes, for a client that never saw
// the Go type: an integer (with its range), a number, an array...
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return fmt.Sprintf("an integer from %d to %d", math.MinInt64, math.MaxInt64)
	case reflect.Int32:
		return fmt.Sprintf("an integer from %d to %d", math.MinInt32, math.MaxInt32)
	case reflect.Int8, reflect.Int16:
		return "a small integer"
	case reflect.Uint, reflect.Uint64:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64))
	case reflect.Uint32:
		return fmt.Sprintf("an integer from 0 to %d", math.MaxUint32)
	case reflect.Uint8, reflect.Uint16:
		return "a small non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// jsonValueName names what a type error found ("number 1e30" is a number
// out of range or not whole).
func jsonValueName(v string) string {
	switch v {
	case "number", "string":
		return "a " + v
	case "array", "object":
		return "an " + v
	case "bool":
		return "a boolean"
	}
	return v
}

// ContentText flattens a message's content: a string, null, or an array of
// {"type":"text","text":...} parts. raw is a value of a JSON document that
// was decoded, so it is valid JSON.
func ContentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if raw[0] == '"' {
		// Most content has no escapes: then the text is the bytes between
		// the quotes, as raw is valid JSON (invalid UTF-8, which json
		// replaces, takes the slow path).
		if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
			return string(raw[1 : len(raw)-1]), nil
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errors.New("content must be a string or an array of text parts")
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string or an array of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part type %q is not supported; only text is", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// Prompt reads a completion's prompt: a string, an array of one string, an
// array of token ids or an array of one array of token ids. It returns the
// text or the token ids; batches of several prompts are refused.
func Prompt(raw json.RawMessage) (string, []uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil, Invalid("prompt", "prompt is required")
	}
	if raw[0] == '[' {
		if ids, ok := fastTokenIDs(raw); ok && len(ids) > 0 {
			return "", ids, nil
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "", nil, Invalid("prompt", "prompt must not be empty")
		}
		return s, nil, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) != 1 || ss[0] == "" {
			return "", nil, Invalid("prompt", "a prompt array must hold exactly one non-empty string (batches are not supported)")
		}
		return ss[0], nil, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return "", nil, Invalid("prompt", "prompt must not be empty")
		}
		return "", ids, nil
	}
	var batch [][]uint32
	if json.Unmarshal(raw, &batch) == nil && len(batch) == 1 && len(batch[0]) > 0 {
		return "", batch[0], nil
	}
	return "", nil, Invalid("prompt", "prompt must be a string, an array of one string, or an array of token ids")
}

// StopSequences reads stop: null, a string, or an array of up to MaxStops
// strings. Empty strings are dropped; nil means no stop sequence.
func StopSequences(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	list, ok := fastStrings(raw)
	if !ok {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			list = []string{one}
		} else if err := json.Unmarshal(raw, &list); err != nil {
			return nil, Invalid("stop", "stop must be a string or an array of strings")
		}
	}
	if len(list) > MaxStops {
		return nil, Invalid("stop", "stop may hold at most %d sequences, got %d", MaxStops, len(list))
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
