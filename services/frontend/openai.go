package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// maxStops is OpenAI's limit on stop sequences.
const maxStops = 4

// maxTopLogprobs is OpenAI's limit on top_logprobs (chat); completions
// allow up to 5 in logprobs.
const maxTopLogprobs, maxCompletionLogprobs = 20, 5

// maxChoices bounds n: each choice is a generation of its own.
const maxChoices = 8

// chatRequest is the body of POST /v1/chat/completions. Fields it does
// not hold are refused by name unless they ask for nothing (fields.go).
type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	MaxCompletionTokens *int64            `json:"max_completion_tokens"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int64            `json:"top_logprobs"`
	ResponseFormat      json.RawMessage   `json:"response_format"`
	commonRequest

	// tools is the validated Tools and ToolChoice.
	tools toolSpec
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	Logprobs *int64          `json:"logprobs"`
	commonRequest
}

// commonRequest holds what both endpoints share: streaming, lengths,
// sampling and stop conditions.
type commonRequest struct {
	Stream            bool            `json:"stream"`
	StreamOptions     *streamOptions  `json:"stream_options"`
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

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one message as OpenAI clients send it; content is a string,
// an array of text parts, or null.
type chatMessage struct {
	Role             string                  `json:"role"`
	Content          json.RawMessage         `json:"content"`
	Name             string                  `json:"name"`
	ToolCallID       string                  `json:"tool_call_id"`
	ToolCalls        []chattemplate.ToolCall `json:"tool_calls"`
	ReasoningContent *string                 `json:"reasoning_content"`

	// text is Content flattened, set by decodeChat (content is decoded
	// once: a long chat's messages are most of its body).
	text    string
	hasText bool
}

// genParams is a validated request, independent of its endpoint.
type genParams struct {
	model        string
	stream       bool
	includeUsage bool
	// maxTokens is 0 when the client set none.
	maxTokens    uint32
	sampling     *workerv1.SamplingParameters
	stopStrings  []string
	stopTokenIDs []uint32
	ignoreEOS    bool
	minTokens    uint32
	// logprobs, when set, asks for log probabilities with this many top
	// alternatives.
	logprobs *uint32
	// echo puts the prompt before the generated text (completions);
	// promptLogprobs, set with echo and logprobs, asks the worker for the
	// prompt's log probabilities with this many top alternatives.
	echo           bool
	promptLogprobs *uint32
	// n is how many choices to generate.
	n int
	// guided is the output's required structure (structured.go); nil
	// for free text.
	guided *workerv1.GuidedDecoding
	// cacheSalt is the tenant's cache salt, empty for none: the router
	// and the worker hash the prompt's first block with it.
	cacheSalt string
	// lora is the LoRA adapter the client named as its model, empty for
	// the base model: serve sets it, and model to the adapter's base, once
	// the request's sinks have the name the client gave.
	lora string
	// session is the conversation's session id (the x-session-id or
	// X-Dynamo-Session-ID header), empty for none: the router keeps its
	// turns on one worker (sessions.go).
	session string
}

// paramError is a client error about one request field.
type paramError struct {
	param string
	code  string
	msg   string
}

func (e *paramError) Error() string { return e.msg }

func (e *paramError) Unwrap() error { return ErrInvalidRequest }

func invalid(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

// decodeJSON decodes a request body into v, naming the field of a type error.
func decodeJSON(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return invalid("", "the request body is empty; it must be a JSON object")
	}
	if body[0] != '{' {
		return invalid("", "the request body must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := jsonField(te.Field)
			return invalid(field, "invalid type for %q: expected %s, got %s", field, jsonTypeName(te.Type), jsonValueName(te.Value))
		}
		return invalid("", "malformed JSON body: %v", err)
	}
	return nil
}

// jsonField is the JSON path of a field a type error names, without the
// Go names of the embedded structs it passed through.
func jsonField(f string) string {
	parts := strings.Split(f, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "commonRequest" {
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

// decodeChat decodes and validates a chat completion request.
func decodeChat(body []byte) (*chatRequest, genParams, error) {
	var r chatRequest
	if !decodeChatFast(body, &r) {
		r = chatRequest{}
		if err := decodeJSON(body, &r); err != nil {
			return nil, genParams{}, err
		}
	}
	if err := chatPolicy.check(body); err != nil {
		return nil, genParams{}, err
	}
	if r.MaxCompletionTokens != nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	p, err := r.commonRequest.params(r.Model)
	if err != nil {
		var pe *paramError
		if r.MaxCompletionTokens != nil && errors.As(err, &pe) && pe.param == "max_tokens" {
			// The client named the length max_completion_tokens.
			pe.param, pe.msg = "max_completion_tokens", strings.Replace(pe.msg, "max_tokens", "max_completion_tokens", 1)
		}
		return nil, genParams{}, err
	}
	if len(r.Messages) == 0 {
		return nil, genParams{}, invalid("messages", "messages must hold at least one message")
	}
	if p.guided, err = parseFormat(r.ResponseFormat, "response_format", true); err != nil {
		return nil, genParams{}, err
	}
	if r.tools, err = parseTools(r.Tools, r.ToolChoice, r.ParallelToolCalls); err != nil {
		return nil, genParams{}, err
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > maxTopLogprobs {
			return nil, genParams{}, invalid("top_logprobs", "top_logprobs must be between 0 and %d", maxTopLogprobs)
		}
		if r.Logprobs == nil || !*r.Logprobs {
			return nil, genParams{}, invalid("top_logprobs", "top_logprobs needs logprobs true")
		}
	}
	if r.Logprobs != nil && *r.Logprobs {
		top := uint32(0)
		if r.TopLogprobs != nil {
			top = uint32(*r.TopLogprobs)
		}
		p.logprobs = &top
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, genParams{}, invalid(fmt.Sprintf("messages[%d].role", i), "invalid role %q: valid roles are system, developer, user, assistant, tool", m.Role)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return nil, genParams{}, invalid(fmt.Sprintf("messages[%d].content", i), "%v", err)
		}
		r.Messages[i].text, r.Messages[i].hasText = text, true
	}
	return &r, p, nil
}

// messages converts the request's messages for the chat template.
func (r *chatRequest) messages() []chattemplate.Message {
	out := make([]chattemplate.Message, len(r.Messages))
	for i, m := range r.Messages {
		text := m.text
		if !m.hasText {
			text, _ = messageText(m.Content)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		out[i] = chattemplate.Message{Role: role, Content: text, ReasoningContent: m.ReasoningContent,
			ToolCalls: m.ToolCalls, Name: m.Name, ToolCallID: m.ToolCallID}
	}
	return out
}

// messageText flattens a message's content: a string, null, or an array of
// {"type":"text","text":...} parts. raw is a value of a JSON document that
// was decoded, so it is valid JSON.
func messageText(raw json.RawMessage) (string, error) {
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

// decodeCompletion decodes and validates a completion request. The prompt
// is a string, an array of one string, an array of token ids or an array of
// one array of token ids; it returns the text or the token ids.
func decodeCompletion(body []byte) (*completionRequest, genParams, string, []uint32, error) {
	var r completionRequest
	if !decodeCompletionFast(body, &r) {
		r = completionRequest{}
		if err := decodeJSON(body, &r); err != nil {
			return nil, genParams{}, "", nil, err
		}
	}
	if err := completionPolicy.check(body); err != nil {
		return nil, genParams{}, "", nil, err
	}
	p, err := r.commonRequest.params(r.Model)
	if err != nil {
		return nil, genParams{}, "", nil, err
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, genParams{}, "", nil, invalid("suffix", "suffix is not supported")
	}
	if r.Logprobs != nil {
		if *r.Logprobs < 0 || *r.Logprobs > maxCompletionLogprobs {
			return nil, genParams{}, "", nil, invalid("logprobs", "logprobs must be between 0 and %d", maxCompletionLogprobs)
		}
		top := uint32(*r.Logprobs)
		p.logprobs = &top
		if r.Echo {
			p.promptLogprobs = &top
		}
	}
	p.echo = r.Echo
	text, ids, err := promptOf(r.Prompt)
	if err != nil {
		return nil, genParams{}, "", nil, err
	}
	return &r, p, text, ids, nil
}

func promptOf(raw json.RawMessage) (string, []uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil, invalid("prompt", "prompt is required")
	}
	if raw[0] == '[' {
		if ids, ok := fastTokenIDs(raw); ok && len(ids) > 0 {
			return "", ids, nil
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "", nil, invalid("prompt", "prompt must not be empty")
		}
		return s, nil, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) != 1 || ss[0] == "" {
			return "", nil, invalid("prompt", "a prompt array must hold exactly one non-empty string (batches are not supported)")
		}
		return ss[0], nil, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return "", nil, invalid("prompt", "prompt must not be empty")
		}
		return "", ids, nil
	}
	var batch [][]uint32
	if json.Unmarshal(raw, &batch) == nil && len(batch) == 1 && len(batch[0]) > 0 {
		return "", batch[0], nil
	}
	return "", nil, invalid("prompt", "prompt must be a string, an array of one string, or an array of token ids")
}

// params validates what both endpoints share.
func (r *commonRequest) params(model string) (genParams, error) {
	if model == "" {
		return genParams{}, invalid("model", "model is required")
	}
	p := genParams{model: model, stream: r.Stream, ignoreEOS: r.IgnoreEOS, stopTokenIDs: r.StopTokenIDs,
		sampling: &workerv1.SamplingParameters{Temperature: 1, TopP: 1}}
	if r.StreamOptions != nil {
		if !r.Stream {
			return genParams{}, invalid("stream_options", "stream_options is only allowed with stream true")
		}
		p.includeUsage = r.StreamOptions.IncludeUsage
	}
	if r.CacheSalt != nil {
		if *r.CacheSalt == "" || len(*r.CacheSalt) > core.MaxCacheSaltLen {
			return genParams{}, invalid("cache_salt", "cache_salt must be a non-empty string of at most %d bytes when given", core.MaxCacheSaltLen)
		}
		p.cacheSalt = *r.CacheSalt
	}
	p.n = 1
	if r.N != nil {
		if *r.N < 1 || *r.N > maxChoices {
			return genParams{}, invalid("n", "n must be between 1 and %d, got %d", maxChoices, *r.N)
		}
		p.n = int(*r.N)
	}
	if r.MaxTokens != nil {
		if *r.MaxTokens < 1 || *r.MaxTokens > math.MaxUint32 {
			return genParams{}, invalid("max_tokens", "max_tokens must be between 1 and %d, got %d", uint32(math.MaxUint32), *r.MaxTokens)
		}
		p.maxTokens = uint32(*r.MaxTokens)
	}
	if r.MinTokens != nil {
		if *r.MinTokens < 0 || *r.MinTokens > math.MaxUint32 || (p.maxTokens > 0 && uint32(*r.MinTokens) > p.maxTokens) {
			return genParams{}, invalid("min_tokens", "min_tokens must be between 0 and max_tokens")
		}
		p.minTokens = uint32(*r.MinTokens)
	}
	type bound struct {
		name     string
		v        *float64
		lo, hi   float64
		dst      *float32
		exclLow  bool
		describe string
	}
	s := p.sampling
	for _, b := range []bound{
		{"temperature", r.Temperature, 0, 2, &s.Temperature, false, "between 0 and 2"},
		{"top_p", r.TopP, 0, 1, &s.TopP, true, "in (0, 1]"},
		{"min_p", r.MinP, 0, 1, &s.MinP, false, "between 0 and 1"},
		{"frequency_penalty", r.FrequencyPenalty, -2, 2, &s.FrequencyPenalty, false, "between -2 and 2"},
		{"presence_penalty", r.PresencePenalty, -2, 2, &s.PresencePenalty, false, "between -2 and 2"},
		{"repetition_penalty", r.RepetitionPenalty, 0, 2, &s.RepetitionPenalty, true, "in (0, 2]"},
	} {
		if b.v == nil {
			continue
		}
		v := *b.v
		if math.IsNaN(v) || v < b.lo || v > b.hi || (b.exclLow && v == b.lo) {
			return genParams{}, invalid(b.name, "%s must be %s, got %v", b.name, b.describe, v)
		}
		*b.dst = float32(v)
	}
	if r.TopK != nil {
		if *r.TopK < -1 || *r.TopK > math.MaxInt32 {
			return genParams{}, invalid("top_k", "top_k must be -1, 0 or positive, got %d", *r.TopK)
		}
		if *r.TopK > 0 {
			s.TopK = int32(*r.TopK)
		}
	}
	if r.Seed != nil {
		seed := uint64(*r.Seed)
		s.Seed = &seed
	}
	stops, err := stopStrings(r.Stop)
	if err != nil {
		return genParams{}, err
	}
	p.stopStrings = stops
	return p, nil
}

// stopStrings reads stop: null, a string, or an array of up to four strings.
func stopStrings(raw json.RawMessage) ([]string, error) {
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
			return nil, invalid("stop", "stop must be a string or an array of strings")
		}
	}
	if len(list) > maxStops {
		return nil, invalid("stop", "stop may hold at most %d sequences, got %d", maxStops, len(list))
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

// Response bodies, in OpenAI's shapes.

type usageJSON struct {
	PromptTokens        uint32               `json:"prompt_tokens"`
	CompletionTokens    uint32               `json:"completion_tokens"`
	TotalTokens         uint32               `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokensDetails struct {
	CachedTokens uint32 `json:"cached_tokens"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	FinishReason *string             `json:"finish_reason"`
	Logprobs     *completionLogprobs `json:"logprobs"`
}

type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usageJSON         `json:"usage,omitempty"`
}

type modelJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root and Parent are set for a LoRA adapter, as vLLM lists one: its
	// path (when its worker gave one) and its base model.
	Root   string `json:"root,omitempty"`
	Parent string `json:"parent,omitempty"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelJSON `json:"data"`
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// workerFinishLength is the worker's finish reason for a length limit.
const workerFinishLength = workerv1.FinishReason_FINISH_REASON_LENGTH

// sink writes one request's output in its endpoint's shape, streamed or not.
type sink interface {
	requestID() string
	// header is the header of what the sink writes to, before it is out.
	header() http.Header
	// tokens records generated tokens and their log probabilities (when
	// asked for), before their text is passed to delta. more says that
	// further tokens are already waiting: streamed events are then written
	// without a flush, which the next batch's last event does.
	tokens(ids []uint32, lps []*workerv1.TokenLogprob, more bool)
	// delta sends generated text.
	delta(text string) error
	// end finishes the response.
	end(finish string, u usageJSON) error
	// fail ends the response with err: an error status before anything was
	// streamed, an SSE error event and [DONE] after.
	fail(err error)
}

// promptSink is a sink that takes the prompt's log probabilities (a
// completion with echo and logprobs).
type promptSink interface {
	promptLogprobs(lps []*workerv1.TokenLogprob)
}

// sse writes server-sent events.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	// batch holds events in the server's write buffer (it still writes
	// when full) until an event is sent with batch false.
	batch bool
	buf   []byte
}

func (e *sse) start() {
	if e.started {
		return
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	e.w.WriteHeader(http.StatusOK)
	e.rc = http.NewResponseController(e.w)
}

func (e *sse) send(v any) error {
	f := e.frame()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.sendFrame(append(f, b...))
}

// frame starts an event: the caller appends its JSON and passes the result
// to sendFrame.
func (e *sse) frame() []byte {
	e.start()
	if e.buf == nil {
		// One allocation of a typical chunk's size rather than a few
		// growing ones on the first event.
		e.buf = make([]byte, 0, 512)
	}
	return append(e.buf[:0], "data: "...)
}

// sendFrame writes the event b holds and flushes it unless batched.
func (e *sse) sendFrame(b []byte) error {
	e.buf = append(b, "\n\n"...)
	if _, err := e.w.Write(e.buf); err != nil {
		return err
	}
	if e.batch {
		return nil
	}
	return e.rc.Flush()
}

func (e *sse) done() error {
	if err := e.last(); err != nil {
		return err
	}
	return e.rc.Flush()
}

// last writes data: [DONE] as a response's last event, without a flush: the
// handler returns right after it, and net/http then flushes what is
// buffered together with the chunked body's end, in one write (a flush
// here would cost a write of its own, and a wake-up of the client, for the
// five bytes of that end).
func (e *sse) last() error {
	e.start()
	_, err := io.WriteString(e.w, "data: [DONE]\n\n")
	return err
}

func (e *sse) fail(err error) {
	if !e.started && !started(e.w) {
		writeError(e.w, err)
		return
	}
	_, body := errorStatus(err)
	_ = e.send(errorBody{Error: body})
	_ = e.done()
}

// completionSink writes text completions.
type completionSink struct {
	w            http.ResponseWriter
	sse          sse
	stream       bool
	includeUsage bool
	id, model    string
	fingerprint  string
	created      int64
	index        int
	group        *choiceGroup
	logprobs     *logprobOut // nil without logprobs
	text         strings.Builder
	// echo, when set, is the prompt to put before the generated text (and
	// its tokens' entries before theirs in logprobs); it goes out with the
	// first text or at the end, whichever comes first.
	echo *echoPrompt
}

// echoPrompt is a completion's prompt as echo returns it.
type echoPrompt struct {
	text string
	ids  []uint32
	// logprobs are the worker's for ids[1:], when asked for.
	logprobs []*workerv1.TokenLogprob
	sent     bool
}

// promptLogprobs takes the worker's log probabilities of the prompt.
func (c *completionSink) promptLogprobs(lps []*workerv1.TokenLogprob) {
	if c.echo != nil {
		c.echo.logprobs = lps
	}
}

// echoed returns text with the prompt before it the first time, after
// putting the prompt's logprobs entries before the pending ones.
func (c *completionSink) echoed(text string) string {
	e := c.echo
	if e == nil || e.sent {
		return text
	}
	e.sent = true
	if c.logprobs != nil {
		generated := c.logprobs.pending
		c.logprobs.pending = nil
		c.logprobs.addPrompt(e.ids, e.logprobs)
		c.logprobs.pending = append(c.logprobs.pending, generated...)
	}
	return e.text + text
}

func (c *completionSink) requestID() string { return c.id }

func (c *completionSink) header() http.Header { return c.w.Header() }

func (c *completionSink) tokens(ids []uint32, lps []*workerv1.TokenLogprob, more bool) {
	c.logprobs.add(ids, lps)
	c.sse.batch = more
}

func (c *completionSink) chunk(text string, finish *string) completion {
	ch := completion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model, SystemFingerprint: c.fingerprint,
		Choices: []completionChoice{{Index: c.index, Text: text, FinishReason: finish}}}
	if c.logprobs != nil {
		ch.Choices[0].Logprobs = c.logprobs.takeCompletion()
	}
	return ch
}

func (c *completionSink) delta(text string) error {
	text = c.echoed(text)
	if !c.stream {
		c.text.WriteString(text)
		return nil
	}
	c.sse.w = c.w
	return c.sse.send(c.chunk(text, nil))
}

func (c *completionSink) end(finish string, u usageJSON) error {
	if c.echo != nil && !c.echo.sent {
		// Nothing was generated: the prompt alone.
		if err := c.delta(""); err != nil {
			return err
		}
	}
	if !c.stream {
		out := c.chunk(c.text.String(), &finish)
		last, all, total := c.group.addCompletion(out.Choices[0], u)
		if last {
			out.Choices, out.Usage = all, &total
			writeJSON(c.w, http.StatusOK, out)
		}
		return nil
	}
	c.sse.w = c.w
	last, total := c.group.end(u)
	if last {
		// What follows ends the response: it goes out with the response's
		// end when the handler returns (sse.last).
		c.sse.batch = true
	}
	if err := c.sse.send(c.chunk("", &finish)); err != nil {
		return err
	}
	if !last {
		return nil
	}
	defer c.group.close()
	if c.includeUsage {
		ch := c.chunk("", nil)
		ch.Choices, ch.Usage = []completionChoice{}, &total
		if err := c.sse.send(ch); err != nil {
			return err
		}
	}
	return c.sse.last()
}

func (c *completionSink) fail(err error) {
	if !c.group.fail() {
		return
	}
	c.sse.w = c.w
	c.sse.fail(err)
	c.group.close()
}
