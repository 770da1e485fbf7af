package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/reasoning"
	"github.com/switchyard-llm/switchyard/pkg/toolcall"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// responsesRequest is the body of POST /v1/responses (OpenAI's Responses
// API) for text: input is a string or a list of messages, instructions a
// system message. Fields of the API that change what is generated and that
// the frontend cannot honour are refused by name.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Stream             bool              `json:"stream"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxToolCalls       *int64            `json:"max_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	CacheSalt          *string        `json:"cache_salt"`
}

// decodeResponses validates a Responses request and turns it into the chat
// request it means.
func decodeResponses(body []byte) (*responsesRequest, *chatRequest, genParams, error) {
	var r responsesRequest
	if err := openai.Decode(body, &r); err != nil {
		return nil, nil, genParams{}, err
	}
	if err := responsesPolicy.check(body); err != nil {
		return nil, nil, genParams{}, err
	}
	switch {
	case r.PreviousResponseID != nil:
		return nil, nil, genParams{}, invalid("previous_response_id", "previous_response_id is not supported: responses are not stored; send the conversation as input")
	case r.MaxToolCalls != nil && *r.MaxToolCalls < 1:
		return nil, nil, genParams{}, invalid("max_tool_calls", "max_tool_calls must be at least 1")
	}
	cr := &chatRequest{ChatRequest: openai.ChatRequest{Model: r.Model, ChatTemplateKwargs: r.ChatTemplateKwargs}}
	cr.Stream, cr.MaxTokens, cr.Temperature, cr.TopP = r.Stream, r.MaxOutputTokens, r.Temperature, r.TopP
	cr.CacheSalt = r.CacheSalt
	if r.Instructions != nil && *r.Instructions != "" {
		c, _ := json.Marshal(*r.Instructions)
		cr.Messages = append(cr.Messages, openai.ChatMessage{Role: "system", Content: c})
	}
	msgs, err := responsesInput(r.Input)
	if err != nil {
		return nil, nil, genParams{}, err
	}
	cr.Messages = append(cr.Messages, msgs...)
	p, err := commonParams(&cr.CommonRequest, r.Model)
	if err != nil {
		return nil, nil, genParams{}, err
	}
	if cr.tools, err = responsesTools(r.Tools, r.ToolChoice, r.ParallelToolCalls); err != nil {
		return nil, nil, genParams{}, err
	}
	if r.Text != nil {
		if p.guided, err = parseFormat(r.Text.Format, "text.format", false); err != nil {
			return nil, nil, genParams{}, err
		}
	}
	if r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1 {
		return nil, nil, genParams{}, invalid("max_output_tokens", "max_output_tokens must be at least 1")
	}
	return &r, cr, p, nil
}

// responsesInput reads input: a string (one user message) or a list of
// items: messages, whose content is a string or input_text / output_text
// parts; function calls the model made and their outputs, which become the
// chat conversation's assistant tool calls and tool messages; reasoning
// items, which are left out (chat templates drop earlier turns' reasoning).
func responsesInput(raw json.RawMessage) ([]openai.ChatMessage, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, invalid("input", "input must not be empty")
		}
		c, _ := json.Marshal(s)
		return []openai.ChatMessage{{Role: "user", Content: c}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, invalid("input", "input must be a string or a non-empty list of items")
	}
	out := make([]openai.ChatMessage, 0, len(items))
	for i, it := range items {
		switch it.Type {
		case "", "message":
		case "function_call":
			var err error
			if out, err = appendCall(out, it, i); err != nil {
				return nil, err
			}
			continue
		case "function_call_output":
			m, err := functionOutput(it, i)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
			continue
		case "reasoning":
			continue
		case "item_reference":
			return nil, invalid(fmt.Sprintf("input[%d].type", i), "item_reference is not supported: responses are not stored, so send the items themselves (with store false, clients such as the Vercel AI SDK do)")
		default:
			return nil, invalid(fmt.Sprintf("input[%d].type", i), "input item type %q is not supported; messages, function_call, function_call_output and reasoning are", it.Type)
		}
		switch it.Role {
		case "user", "assistant", "system", "developer":
		default:
			return nil, invalid(fmt.Sprintf("input[%d].role", i), "invalid role %q: valid roles are user, assistant, system, developer", it.Role)
		}
		text, err := responsesContent(it.Content)
		if err != nil {
			return nil, invalid(fmt.Sprintf("input[%d].content", i), "%v", err)
		}
		c, _ := json.Marshal(text)
		out = append(out, openai.ChatMessage{Role: it.Role, Content: c})
	}
	if len(out) == 0 {
		return nil, invalid("input", "input must hold at least one message")
	}
	return out, nil
}

func responsesContent(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content must be a string or a list of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			b.WriteString(p.Text)
		default:
			return "", fmt.Errorf("content part type %q is not supported; only text is", p.Type)
		}
	}
	return b.String(), nil
}

// Responses API bodies.

type responseJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Model              string            `json:"model"`
	Output             []json.RawMessage `json:"output"`
	Usage              *responseUsage    `json:"usage,omitempty"`
	Error              any               `json:"error"`
	IncompleteDetails  *incompleteJSON   `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	MaxToolCalls       *int64            `json:"max_tool_calls"`
	Temperature        float32           `json:"temperature"`
	TopP               float32           `json:"top_p"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	Text               responseText      `json:"text"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          any               `json:"reasoning"`
	Store              bool              `json:"store"`
	Truncation         string            `json:"truncation"`
	Metadata           map[string]string `json:"metadata"`
}

// responseText echoes the request's text.format ({"type":"text"} when it
// set none).
type responseText struct {
	Format json.RawMessage `json:"format"`
}

type incompleteJSON struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		// CacheWriteTokens is 0: the engines report what their prefix
		// caches served, not what they stored.
		CacheWriteTokens int `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// echoedTool is a function tool as a response echoes it: every field
// present, null when the request left it out.
type echoedTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type reasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
	Status  string          `json:"status,omitempty"`
}

// responsesSink writes a Responses API answer: reasoning (from the model
// card's reasoning parser) as a reasoning item, then the answer's message
// and function_call items in the order the model wrote them (calls from
// the model card's tool call parser when tools are offered); streamed as
// the API's typed events.
type responsesSink struct {
	w       http.ResponseWriter
	sse     openai.SSE
	stream  bool
	req     *responsesRequest
	p       genParams
	id      string
	created int64
	reason  *reasoning.Parser
	rsID    string
	seq     int
	thought strings.Builder
	rsOpen  bool
	rsDone  bool
	// outIndex is the output index of the item being written: the
	// reasoning item's, then each answer item's in turn.
	outIndex int
	// items are the answer's message and function_call items; cur is the
	// one being written (nil between items).
	items []*answerItem
	cur   *answerItem
	// tools parses calls out of the answer (nil without tools); spec is
	// what the request allowed, maxCalls the most calls kept (0: all).
	tools    *toolcall.Parser
	spec     preprocess.Tools
	maxCalls int
	calls    int
	skipCall bool
	// space is whitespace of the answer not yet written: with tools, text
	// that is only whitespace around calls makes no message.
	space string
	// pending counts the tokens whose text has not reached the reasoning
	// parser yet (a stop sequence may hold it back); reasoningTokens those
	// that were reasoning (see countReasoning).
	pending, reasoningTokens int
}

// answerItem is one output item of the answer: a message, or a call.
type answerItem struct {
	call bool
	id   string
	text strings.Builder
	// callID, name and args are a call's.
	callID, name, args string
}

func newResponsesSink(w http.ResponseWriter, req *responsesRequest, p genParams, card *registryv1.ModelCard, spec preprocess.Tools) *responsesSink {
	rs := &responsesSink{w: w, stream: p.stream, req: req, p: p, id: "resp_" + newID(), created: time.Now().Unix(),
		rsID: "rs_" + newID(), spec: spec}
	if rs.reason, _ = reasoning.New(card.GetReasoningParser()); rs.reason == nil {
		rs.reason, _ = reasoning.New(reasoning.None)
	}
	if spec.Single() {
		rs.maxCalls = 1
	}
	if req.MaxToolCalls != nil && (rs.maxCalls == 0 || int(*req.MaxToolCalls) < rs.maxCalls) {
		rs.maxCalls = int(*req.MaxToolCalls)
	}
	if name := card.GetToolCallParser(); spec.Offered() && name != "" && name != toolcall.None {
		// The names were validated by the worker; an unknown one (a newer
		// worker) parses nothing rather than failing requests.
		if tp, err := toolcall.New(name); err == nil {
			rs.tools = tp
			if rs.stream {
				tp.StreamArguments()
			}
		}
	}
	return rs
}

func (rs *responsesSink) requestID() string { return rs.id }

func (rs *responsesSink) header() http.Header { return rs.w.Header() }

func (rs *responsesSink) tokens(ids []uint32, _ []*workerv1.TokenLogprob, more bool) {
	rs.pending += len(ids)
	rs.sse.Batch = more
}

// countReasoning attributes the pending tokens, whose text moved the
// reasoning parser from phase before to after: to the reasoning when they
// were in it (the parser was thinking before or after them, or they hold a
// whole reasoning block), to the answer otherwise; while the parser is
// undecided they stay pending. A batch of tokens that holds the end of the
// reasoning and the start of the answer counts as reasoning, so with more
// than one token per response the count can be high by that batch's answer
// tokens.
func (rs *responsesSink) countReasoning(before, after reasoning.Phase) {
	if after == reasoning.Undecided {
		return
	}
	if before == reasoning.Thinking || after == reasoning.Thinking || (before == reasoning.Undecided && after == reasoning.Answered) {
		rs.reasoningTokens += rs.pending
	}
	rs.pending = 0
}

// event sends one typed event; every event carries its type and a
// sequence number.
func (rs *responsesSink) event(typ string, fields map[string]any) error {
	rs.sse.W = rs.w
	fields["type"] = typ
	fields["sequence_number"] = rs.seq
	rs.seq++
	rs.sse.Start()
	if _, err := fmt.Fprintf(rs.w, "event: %s\n", typ); err != nil {
		return err
	}
	return rs.sse.Send(fields)
}

// response is the response object in its current state, echoing the
// request's settings.
func (rs *responsesSink) response(status string, u *responseUsage) responseJSON {
	r := responseJSON{ID: rs.id, Object: "response", CreatedAt: rs.created, Status: status, Model: rs.p.model,
		Output: []json.RawMessage{}, Usage: u, Instructions: rs.req.Instructions, MaxOutputTokens: rs.req.MaxOutputTokens,
		ParallelToolCalls: rs.req.ParallelToolCalls == nil || *rs.req.ParallelToolCalls, Temperature: rs.p.sampling.GetTemperature(),
		TopP: rs.p.sampling.GetTopP(), ToolChoice: json.RawMessage(`"auto"`), Tools: []json.RawMessage{}, MaxToolCalls: rs.req.MaxToolCalls,
		Truncation: "disabled", Metadata: map[string]string{}}
	if c := bytes.TrimSpace(rs.req.ToolChoice); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		r.ToolChoice = rs.req.ToolChoice
	}
	for _, t := range rs.req.Tools {
		var tool responsesTool
		_ = json.Unmarshal(t, &tool) // validated by decodeResponses
		b, _ := json.Marshal(echoedTool(tool))
		r.Tools = append(r.Tools, b)
	}
	r.Text.Format = json.RawMessage(`{"type":"text"}`)
	if rs.req.Text != nil && rs.p.guided != nil {
		r.Text.Format = rs.req.Text.Format
	}
	return r
}

func (rs *responsesSink) reasoningItem(status string) reasoningItem {
	it := reasoningItem{Type: "reasoning", ID: rs.rsID, Summary: []any{}, Content: []reasoningText{}, Status: status}
	if t := rs.thought.String(); t != "" {
		it.Content = append(it.Content, reasoningText{Type: "reasoning_text", Text: t})
	}
	return it
}

// json is the item as the API shows it, with status.
func (it *answerItem) json(status string) any {
	if it.call {
		return functionCallItem{Type: "function_call", ID: it.id, CallID: it.callID, Name: it.name, Arguments: it.args, Status: status}
	}
	return messageItem{Type: "message", ID: it.id, Status: status, Role: "assistant",
		Content: []outputText{{Type: "output_text", Text: it.text.String(), Annotations: []any{}, Logprobs: []any{}}}}
}

func (rs *responsesSink) begin() error {
	if rs.seq > 0 {
		return nil
	}
	r := rs.response("in_progress", nil)
	if err := rs.event("response.created", map[string]any{"response": r}); err != nil {
		return err
	}
	return rs.event("response.in_progress", map[string]any{"response": r})
}

func (rs *responsesSink) delta(text string) error {
	before := rs.reason.Phase()
	r, a := rs.reason.Add(text)
	rs.countReasoning(before, rs.reason.Phase())
	return rs.out(r, a, false)
}

// out writes reasoning and answer text, the answer through the tool call
// parser when there is one; final flushes the parser.
func (rs *responsesSink) out(r, a string, final bool) error {
	if r != "" {
		if err := rs.reasoningText(r); err != nil {
			return err
		}
	}
	if rs.tools == nil {
		return rs.answerText(a)
	}
	evs := rs.tools.Add(a)
	if final {
		evs = append(evs, rs.tools.Flush()...)
	}
	for _, e := range evs {
		var err error
		switch {
		case e.Kind == toolcall.CallBegin:
			err = rs.beginCall(e.Name)
		case e.Kind == toolcall.ArgumentsDelta:
			err = rs.callArguments(e.Arguments)
		case e.Kind == toolcall.CallEnd:
			err = rs.endCall("completed")
		case e.Call != nil:
			if err = rs.beginCall(e.Call.Name); err == nil {
				if err = rs.callArguments(e.Call.Arguments); err == nil {
					err = rs.endCall("completed")
				}
			}
		default:
			err = rs.answerText(e.Text)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (rs *responsesSink) reasoningText(r string) error {
	rs.thought.WriteString(r)
	if !rs.stream {
		return nil
	}
	if err := rs.begin(); err != nil {
		return err
	}
	if !rs.rsOpen {
		rs.rsOpen = true
		if err := rs.event("response.output_item.added", map[string]any{"output_index": rs.outIndex, "item": rs.reasoningItem("in_progress")}); err != nil {
			return err
		}
	}
	return rs.event("response.reasoning_text.delta", map[string]any{"item_id": rs.rsID, "output_index": rs.outIndex, "content_index": 0, "delta": r})
}

// answerText writes text of the answer into the open message, opening one
// when none is: with tools, only once the text is more than whitespace.
func (rs *responsesSink) answerText(a string) error {
	if a == "" {
		return nil
	}
	if rs.cur == nil || rs.cur.call {
		if rs.tools != nil && strings.TrimSpace(a) == "" {
			rs.space += a
			return nil
		}
		a, rs.space = rs.space+a, ""
		if err := rs.openMessage(); err != nil {
			return err
		}
	}
	rs.cur.text.WriteString(a)
	if !rs.stream {
		return nil
	}
	return rs.event("response.output_text.delta", map[string]any{"item_id": rs.cur.id, "output_index": rs.outIndex, "content_index": 0,
		"delta": a, "logprobs": []any{}})
}

// closeReasoning ends the reasoning item before the answer's first item.
func (rs *responsesSink) closeReasoning() error {
	if !rs.rsOpen || rs.rsDone {
		return nil
	}
	rs.rsDone = true
	t := rs.thought.String()
	if err := rs.event("response.reasoning_text.done", map[string]any{"item_id": rs.rsID, "output_index": rs.outIndex, "content_index": 0, "text": t}); err != nil {
		return err
	}
	if err := rs.event("response.output_item.done", map[string]any{"output_index": rs.outIndex, "item": rs.reasoningItem("completed")}); err != nil {
		return err
	}
	rs.outIndex++
	return nil
}

// openItem starts an answer item after closing the one before.
func (rs *responsesSink) openItem(it *answerItem) error {
	if err := rs.closeItem("completed"); err != nil {
		return err
	}
	rs.items = append(rs.items, it)
	rs.cur = it
	if !rs.stream {
		return nil
	}
	if err := rs.begin(); err != nil {
		return err
	}
	if err := rs.closeReasoning(); err != nil {
		return err
	}
	added := it.json("in_progress")
	if m, ok := added.(messageItem); ok {
		m.Content = []outputText{}
		added = m
	}
	return rs.event("response.output_item.added", map[string]any{"output_index": rs.outIndex, "item": added})
}

func (rs *responsesSink) openMessage() error {
	if err := rs.openItem(&answerItem{id: "msg_" + newID()}); err != nil {
		return err
	}
	if !rs.stream {
		return nil
	}
	return rs.event("response.content_part.added", map[string]any{"item_id": rs.cur.id, "output_index": rs.outIndex, "content_index": 0,
		"part": outputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: []any{}}})
}

// closeItem ends the open answer item with status.
func (rs *responsesSink) closeItem(status string) error {
	it := rs.cur
	if it == nil {
		return nil
	}
	rs.cur = nil
	if !rs.stream {
		return nil
	}
	var evs []responseEvent
	if it.call {
		evs = []responseEvent{{"response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": rs.outIndex,
			"name": it.name, "arguments": it.args}}}
	} else {
		text := it.text.String()
		evs = []responseEvent{
			{"response.output_text.done", map[string]any{"item_id": it.id, "output_index": rs.outIndex, "content_index": 0, "text": text, "logprobs": []any{}}},
			{"response.content_part.done", map[string]any{"item_id": it.id, "output_index": rs.outIndex, "content_index": 0,
				"part": outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}},
		}
	}
	evs = append(evs, responseEvent{"response.output_item.done", map[string]any{"output_index": rs.outIndex, "item": it.json(status)}})
	for _, ev := range evs {
		if err := rs.event(ev.typ, ev.fields); err != nil {
			return err
		}
	}
	rs.outIndex++
	return nil
}

type responseEvent struct {
	typ    string
	fields map[string]any
}

// beginCall opens a function_call item, unless the request's limit on
// calls (parallel_tool_calls false, max_tool_calls) was reached: then the
// call is dropped.
func (rs *responsesSink) beginCall(name string) error {
	if rs.skipCall = rs.maxCalls > 0 && rs.calls >= rs.maxCalls; rs.skipCall {
		return nil
	}
	rs.calls++
	return rs.openItem(&answerItem{call: true, id: "fc_" + newID(), callID: "call_" + newID()[:24], name: name})
}

func (rs *responsesSink) callArguments(args string) error {
	if rs.skipCall || rs.cur == nil || !rs.cur.call {
		return nil
	}
	rs.cur.args += args
	if !rs.stream {
		return nil
	}
	return rs.event("response.function_call_arguments.delta", map[string]any{"item_id": rs.cur.id, "output_index": rs.outIndex, "delta": args})
}

func (rs *responsesSink) endCall(status string) error {
	if rs.skipCall {
		rs.skipCall = false
		return nil
	}
	return rs.closeItem(status)
}

// madeCalls are the answer's calls, for the tool choice's check.
func (rs *responsesSink) madeCalls() []openai.ToolCallOut {
	var calls []openai.ToolCallOut
	for _, it := range rs.items {
		if it.call {
			calls = append(calls, openai.ToolCallOut{Type: "function", Function: openai.FunctionCallOut{Name: it.name, Arguments: it.args}})
		}
	}
	return calls
}

func (rs *responsesSink) end(finish string, u openai.Usage) error {
	before := rs.reason.Phase()
	r, a := rs.reason.Flush()
	// What is left is the reasoning's when the text ended inside it.
	if before == reasoning.Thinking || before == reasoning.Undecided && r != "" {
		rs.reasoningTokens += rs.pending
	}
	rs.pending = 0
	if err := rs.out(r, a, true); err != nil {
		return err
	}
	if err := rs.spec.Check(rs.madeCalls()); err != nil {
		rs.fail(err)
		return err
	}
	// An answer with no item (or only whitespace) is one message.
	if len(rs.items) == 0 {
		space := rs.space
		if err := rs.openMessage(); err != nil {
			return err
		}
		rs.cur.text.WriteString(space)
	}
	usage := &responseUsage{InputTokens: int(u.PromptTokens), OutputTokens: int(u.CompletionTokens), TotalTokens: int(u.TotalTokens)}
	if u.PromptTokensDetails != nil {
		usage.InputTokensDetails.CachedTokens = int(u.PromptTokensDetails.CachedTokens)
	}
	usage.OutputTokensDetails.ReasoningTokens = min(rs.reasoningTokens, usage.OutputTokens)
	resp := rs.response("completed", usage)
	// A cut-off answer leaves the response and its last item incomplete.
	lastStatus := "completed"
	if finish == "length" {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incompleteJSON{Reason: "max_output_tokens"}
		// The item being written when the answer was cut is incomplete;
		// one that had ended (a whole call) is not.
		if rs.cur != nil {
			lastStatus = "incomplete"
		}
	}
	if rs.thought.Len() > 0 {
		b, _ := json.Marshal(rs.reasoningItem(""))
		resp.Output = append(resp.Output, b)
	}
	for i, it := range rs.items {
		status := "completed"
		if i == len(rs.items)-1 {
			status = lastStatus
		}
		b, _ := json.Marshal(it.json(status))
		resp.Output = append(resp.Output, b)
	}
	if !rs.stream {
		writeJSON(rs.w, http.StatusOK, resp)
		return nil
	}
	if err := rs.begin(); err != nil {
		return err
	}
	// The last events end the response: they go out with the response's
	// end when the handler returns, in one write (SSE.Last).
	rs.sse.Batch = true
	if err := rs.closeItem(lastStatus); err != nil {
		return err
	}
	typ := "response.completed"
	if resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return rs.event(typ, map[string]any{"response": resp})
}

// fail answers with an error status before anything was streamed, and
// with an error event after (the Responses API has no [DONE]).
func (rs *responsesSink) fail(err error) {
	rs.sse.W = rs.w
	if !rs.sse.Started() {
		writeError(rs.w, err)
		return
	}
	rs.sse.Batch = false
	_, body := errorStatus(err)
	code := ""
	if body.Code != nil {
		code = *body.Code
	}
	_ = rs.event("error", map[string]any{"code": code, "message": body.Message, "param": body.Param})
}

func (s *Service) handleResponses(w *recorder, r *http.Request) {
	body, err := s.readBody(r, w)
	if err != nil {
		writeError(w, err)
		return
	}
	_, span := startSpan(r.Context(), "frontend.parse")
	req, cr, p, err := decodeResponses(body)
	endSpan(span, err)
	if err != nil {
		writeError(w, err)
		return
	}
	w.model = p.model
	card, a, err := s.modelAssets(r.Context(), p.model)
	if err != nil {
		writeError(w, err)
		return
	}
	prompt, err := a.chatPrompt(r.Context(), cr)
	if err != nil {
		writeError(w, err)
		return
	}
	s.serve(w, r, []sink{newResponsesSink(w, req, p, card, cr.tools)}, card, a, prompt, p, "input")
}
