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
)

// responsesRequest is the body of POST /v1/responses (OpenAI's Responses
// API) for text: input is a string or a list of messages, instructions a
// system message. Fields of the API that change what is generated and that
// the frontend cannot honour are refused by name.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             bool            `json:"stream"`
	Tools              []any           `json:"tools"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
}

// decodeResponses validates a Responses request and turns it into the chat
// request it means.
func decodeResponses(body []byte) (*responsesRequest, *chatRequest, genParams, error) {
	var r responsesRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, nil, genParams{}, err
	}
	if err := responsesPolicy.check(body); err != nil {
		return nil, nil, genParams{}, err
	}
	switch {
	case len(r.Tools) > 0:
		return nil, nil, genParams{}, invalid("tools", "tools are not supported on /v1/responses; use /v1/chat/completions")
	case r.PreviousResponseID != nil:
		return nil, nil, genParams{}, invalid("previous_response_id", "previous_response_id is not supported: responses are not stored; send the conversation as input")
	}
	cr := &chatRequest{Model: r.Model, ChatTemplateKwargs: r.ChatTemplateKwargs}
	cr.Stream, cr.MaxTokens, cr.Temperature, cr.TopP = r.Stream, r.MaxOutputTokens, r.Temperature, r.TopP
	if r.Instructions != nil && *r.Instructions != "" {
		c, _ := json.Marshal(*r.Instructions)
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: c})
	}
	msgs, err := responsesInput(r.Input)
	if err != nil {
		return nil, nil, genParams{}, err
	}
	cr.Messages = append(cr.Messages, msgs...)
	p, err := cr.commonRequest.params(r.Model)
	if err != nil {
		return nil, nil, genParams{}, err
	}
	if cr.tools, err = parseTools(nil, nil, nil); err != nil {
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
// message items whose content is a string or input_text / output_text parts.
func responsesInput(raw json.RawMessage) ([]chatMessage, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, invalid("input", "input must not be empty")
		}
		c, _ := json.Marshal(s)
		return []chatMessage{{Role: "user", Content: c}}, nil
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, invalid("input", "input must be a string or a non-empty list of messages")
	}
	out := make([]chatMessage, 0, len(items))
	for i, it := range items {
		if it.Type != "" && it.Type != "message" {
			return nil, invalid(fmt.Sprintf("input[%d].type", i), "input item type %q is not supported; only messages are", it.Type)
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
		out = append(out, chatMessage{Role: it.Role, Content: c})
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
	Temperature        float32           `json:"temperature"`
	TopP               float32           `json:"top_p"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              []any             `json:"tools"`
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
// card's reasoning parser) as a reasoning item, the answer as a message
// item; streamed as the API's typed events.
type responsesSink struct {
	w        http.ResponseWriter
	sse      sse
	stream   bool
	req      *responsesRequest
	p        genParams
	id       string
	created  int64
	reason   *reasoning.Parser
	msgID    string
	rsID     string
	seq      int
	thought  strings.Builder
	text     strings.Builder
	rsOpen   bool
	rsDone   bool
	msgOpen  bool
	outIndex int
	// pending counts the tokens whose text has not reached the reasoning
	// parser yet (a stop sequence may hold it back); reasoningTokens those
	// that were reasoning (see countReasoning).
	pending, reasoningTokens int
}

func newResponsesSink(w http.ResponseWriter, req *responsesRequest, p genParams, card *registryv1.ModelCard) *responsesSink {
	rs := &responsesSink{w: w, stream: p.stream, req: req, p: p, id: "resp_" + newID(), created: time.Now().Unix(),
		msgID: "msg_" + newID(), rsID: "rs_" + newID()}
	if rs.reason, _ = reasoning.New(card.GetReasoningParser()); rs.reason == nil {
		rs.reason, _ = reasoning.New(reasoning.None)
	}
	return rs
}

func (rs *responsesSink) requestID() string { return rs.id }

func (rs *responsesSink) header() http.Header { return rs.w.Header() }

func (rs *responsesSink) tokens(ids []uint32, _ []*workerv1.TokenLogprob, more bool) {
	rs.pending += len(ids)
	rs.sse.batch = more
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
	rs.sse.w = rs.w
	fields["type"] = typ
	fields["sequence_number"] = rs.seq
	rs.seq++
	rs.sse.start()
	if _, err := fmt.Fprintf(rs.w, "event: %s\n", typ); err != nil {
		return err
	}
	return rs.sse.send(fields)
}

// response is the response object in its current state.
func (rs *responsesSink) response(status string, u *responseUsage) responseJSON {
	r := responseJSON{ID: rs.id, Object: "response", CreatedAt: rs.created, Status: status, Model: rs.p.model,
		Output: []json.RawMessage{}, Usage: u, Instructions: rs.req.Instructions, MaxOutputTokens: rs.req.MaxOutputTokens,
		ParallelToolCalls: true, Temperature: rs.p.sampling.GetTemperature(), TopP: rs.p.sampling.GetTopP(), ToolChoice: "auto",
		Tools: []any{}, Truncation: "disabled", Metadata: map[string]string{}}
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

func (rs *responsesSink) messageItem(status string) messageItem {
	return messageItem{Type: "message", ID: rs.msgID, Status: status, Role: "assistant",
		Content: []outputText{{Type: "output_text", Text: rs.text.String(), Annotations: []any{}, Logprobs: []any{}}}}
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
	return rs.out(r, a)
}

func (rs *responsesSink) out(r, a string) error {
	if !rs.stream {
		rs.thought.WriteString(r)
		rs.text.WriteString(a)
		return nil
	}
	if err := rs.begin(); err != nil {
		return err
	}
	if r != "" {
		if !rs.rsOpen {
			rs.rsOpen = true
			if err := rs.event("response.output_item.added", map[string]any{"output_index": rs.outIndex, "item": rs.reasoningItem("in_progress")}); err != nil {
				return err
			}
		}
		rs.thought.WriteString(r)
		if err := rs.event("response.reasoning_text.delta", map[string]any{"item_id": rs.rsID, "output_index": rs.outIndex, "content_index": 0, "delta": r}); err != nil {
			return err
		}
	}
	if a == "" {
		return nil
	}
	if err := rs.closeReasoning(); err != nil {
		return err
	}
	if err := rs.openMessage(); err != nil {
		return err
	}
	rs.text.WriteString(a)
	return rs.event("response.output_text.delta", map[string]any{"item_id": rs.msgID, "output_index": rs.outIndex, "content_index": 0,
		"delta": a, "logprobs": []any{}})
}

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

func (rs *responsesSink) openMessage() error {
	if rs.msgOpen {
		return nil
	}
	rs.msgOpen = true
	item := rs.messageItem("in_progress")
	item.Content = []outputText{}
	if err := rs.event("response.output_item.added", map[string]any{"output_index": rs.outIndex, "item": item}); err != nil {
		return err
	}
	return rs.event("response.content_part.added", map[string]any{"item_id": rs.msgID, "output_index": rs.outIndex, "content_index": 0,
		"part": outputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: []any{}}})
}

func (rs *responsesSink) end(finish string, u usageJSON) error {
	before := rs.reason.Phase()
	r, a := rs.reason.Flush()
	// What is left is the reasoning's when the text ended inside it.
	if before == reasoning.Thinking || before == reasoning.Undecided && r != "" {
		rs.reasoningTokens += rs.pending
	}
	rs.pending = 0
	if err := rs.out(r, a); err != nil {
		return err
	}
	usage := &responseUsage{InputTokens: int(u.PromptTokens), OutputTokens: int(u.CompletionTokens), TotalTokens: int(u.TotalTokens)}
	if u.PromptTokensDetails != nil {
		usage.InputTokensDetails.CachedTokens = int(u.PromptTokensDetails.CachedTokens)
	}
	usage.OutputTokensDetails.ReasoningTokens = min(rs.reasoningTokens, usage.OutputTokens)
	resp := rs.response("completed", usage)
	// A cut-off answer leaves the response and its message incomplete.
	itemStatus := "completed"
	if finish == "length" {
		resp.Status, itemStatus = "incomplete", "incomplete"
		resp.IncompleteDetails = &incompleteJSON{Reason: "max_output_tokens"}
	}
	if rs.thought.Len() > 0 {
		b, _ := json.Marshal(rs.reasoningItem(""))
		resp.Output = append(resp.Output, b)
	}
	b, _ := json.Marshal(rs.messageItem(itemStatus))
	resp.Output = append(resp.Output, b)
	if !rs.stream {
		writeJSON(rs.w, http.StatusOK, resp)
		return nil
	}
	if err := rs.begin(); err != nil {
		return err
	}
	if err := rs.closeReasoning(); err != nil {
		return err
	}
	if err := rs.openMessage(); err != nil {
		return err
	}
	// The last events end the response: they go out with the response's
	// end when the handler returns, in one write (sse.last).
	rs.sse.batch = true
	text := rs.text.String()
	for _, ev := range []struct {
		typ    string
		fields map[string]any
	}{
		{"response.output_text.done", map[string]any{"item_id": rs.msgID, "output_index": rs.outIndex, "content_index": 0, "text": text, "logprobs": []any{}}},
		{"response.content_part.done", map[string]any{"item_id": rs.msgID, "output_index": rs.outIndex, "content_index": 0,
			"part": outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}},
		{"response.output_item.done", map[string]any{"output_index": rs.outIndex, "item": rs.messageItem(itemStatus)}},
	} {
		if err := rs.event(ev.typ, ev.fields); err != nil {
			return err
		}
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
	rs.sse.w = rs.w
	if !rs.sse.started {
		writeError(rs.w, err)
		return
	}
	rs.sse.batch = false
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
	s.serve(w, r, []sink{newResponsesSink(w, req, p, card)}, card, a, prompt, p, "input")
}
