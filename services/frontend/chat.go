package frontend

import (
	"net/http"
	"strings"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/reasoning"
	"github.com/switchyard-llm/switchyard/pkg/toolcall"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// systemFingerprint names the backend configuration of a model: its
// tokenizer and template content, which is what changes its answers here.
func systemFingerprint(card *registryv1.ModelCard) string {
	tok, _ := preprocess.TokenizerFiles(card)
	if sha := tok.GetSha256(); len(sha) >= 12 {
		return "fp_" + sha[:12]
	}
	return "fp_switchyard"
}

// chatSink writes chat completions. Generated text goes through the
// model's reasoning parser, then (when tools are offered) its tool call
// parser: reasoning comes out as reasoning_content, calls as tool_calls.
type chatSink struct {
	w            http.ResponseWriter
	sse          openai.SSE
	stream       bool
	includeUsage bool
	id, model    string
	fingerprint  string
	created      int64
	index        int
	group        *choiceGroup
	reason       *reasoning.Parser
	tools        *toolcall.Parser // nil: no tool parsing
	spec         preprocess.Tools
	logprobs     *logprobOut // nil without logprobs

	// prefix is the JSON every streamed chunk of this choice starts with
	// (chunkjson.go).
	prefix []byte

	content, thought strings.Builder
	calls            []openai.ToolCallOut
	began            bool
	// skipCall drops the streamed call in progress (parallel_tool_calls
	// false keeps only the first).
	skipCall bool
}

// newChatSink builds the sink of one chat choice for card's parsers.
func newChatSink(w http.ResponseWriter, p genParams, card *registryv1.ModelCard, spec preprocess.Tools, id string, created int64) *chatSink {
	c := &chatSink{w: w, stream: p.stream, includeUsage: p.includeUsage, id: id, model: p.model,
		fingerprint: systemFingerprint(card), created: created, spec: spec}
	// The names were validated by the worker; an unknown one (a newer
	// worker) parses nothing rather than failing requests.
	if c.reason, _ = reasoning.New(card.GetReasoningParser()); c.reason == nil {
		c.reason, _ = reasoning.New(reasoning.None)
	}
	if spec.Offered() {
		if tp, err := toolcall.New(card.GetToolCallParser()); err == nil && card.GetToolCallParser() != "" && card.GetToolCallParser() != toolcall.None {
			c.tools = tp
			if c.stream {
				tp.StreamArguments()
			}
		}
	}
	return c
}

func (c *chatSink) requestID() string { return c.id }

func (c *chatSink) header() http.Header { return c.w.Header() }

func (c *chatSink) tokens(ids []uint32, lps []*workerv1.TokenLogprob, more bool) {
	c.logprobs.add(ids, lps)
	c.sse.Batch = more
}

func (c *chatSink) chunk(d openai.ChatDelta, finish *string) openai.ChatChunk {
	return openai.ChatChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model, SystemFingerprint: c.fingerprint,
		Choices: []openai.ChatChunkChoice{{Index: c.index, Delta: d, FinishReason: finish}}}
}

func (c *chatSink) send(d openai.ChatDelta, finish *string) error {
	if err := c.begin(); err != nil {
		return err
	}
	ch := c.chunk(d, finish)
	if c.logprobs != nil {
		ch.Choices[0].Logprobs = c.logprobs.take()
	}
	return c.sse.Send(ch)
}

// sendText streams a chunk of text only (chunkjson.go encodes it without
// reflection or allocation); with log probabilities it takes send's way.
func (c *chatSink) sendText(d textDelta) error {
	if c.logprobs != nil {
		cd, finish := d.chatDelta()
		return c.send(cd, finish)
	}
	if err := c.begin(); err != nil {
		return err
	}
	return c.sse.SendFrame(c.appendTextChunk(c.sse.Frame(), d))
}

// begin sends the role chunk before the first delta.
func (c *chatSink) begin() error {
	if c.began {
		return nil
	}
	c.began = true
	c.sse.W = c.w
	// The role chunk goes out in one write with the first delta: a flush
	// of its own costs a syscall and wakes the client once more before its
	// first token.
	batch := c.sse.Batch
	c.sse.Batch = true
	err := c.sse.SendFrame(c.appendTextChunk(c.sse.Frame(), textDelta{role: "assistant", field: fieldContent}))
	c.sse.Batch = batch
	return err
}

func (c *chatSink) delta(text string) error {
	r, a := c.reason.Add(text)
	return c.out(r, a, false)
}

// out passes reasoning and answer text on, the answer through the tool
// call parser.
func (c *chatSink) out(r, a string, final bool) error {
	if r != "" {
		if !c.stream {
			c.thought.WriteString(r)
		} else if err := c.sendText(textDelta{field: fieldReasoning, text: r}); err != nil {
			return err
		}
	}
	if c.tools == nil {
		if a == "" {
			return nil
		}
		if !c.stream {
			c.content.WriteString(a)
			return nil
		}
		return c.sendText(textDelta{field: fieldContent, text: a})
	}
	evs := c.tools.Add(a)
	if final {
		evs = append(evs, c.tools.Flush()...)
	}
	for _, e := range evs {
		switch {
		case e.Kind != toolcall.Content:
			if err := c.streamCall(e); err != nil {
				return err
			}
			continue
		case e.Call != nil:
			if err := c.call(e.Call); err != nil {
				return err
			}
			continue
		}
		if !c.stream {
			c.content.WriteString(e.Text)
		} else if err := c.sendText(textDelta{field: fieldContent, text: e.Text}); err != nil {
			return err
		}
	}
	return nil
}

// call returns one tool call: streamed as OpenAI does, its index, id and
// name first, then its arguments.
func (c *chatSink) call(tc *toolcall.Call) error {
	if c.spec.Single() && len(c.calls) > 0 {
		return nil
	}
	call := openai.ToolCallOut{ID: "call_" + newID()[:24], Type: "function", Function: openai.FunctionCallOut{Name: tc.Name, Arguments: tc.Arguments}}
	c.calls = append(c.calls, call)
	if !c.stream {
		return nil
	}
	i := len(c.calls) - 1
	head := call
	head.Index, head.Function.Arguments = &i, ""
	if err := c.send(openai.ChatDelta{ToolCalls: []openai.ToolCallOut{head}}, nil); err != nil {
		return err
	}
	return c.send(openai.ChatDelta{ToolCalls: []openai.ToolCallOut{{Index: &i, Function: openai.FunctionCallOut{Arguments: tc.Arguments}}}}, nil)
}

// streamCall streams a call as the parser reads it: a delta with its
// index, id, type and name, then one with each fragment of its arguments.
func (c *chatSink) streamCall(e toolcall.Event) error {
	switch e.Kind {
	case toolcall.CallBegin:
		if c.skipCall = c.spec.Single() && len(c.calls) > 0; c.skipCall {
			return nil
		}
		call := openai.ToolCallOut{ID: "call_" + newID()[:24], Type: "function", Function: openai.FunctionCallOut{Name: e.Name}}
		c.calls = append(c.calls, call)
		i := len(c.calls) - 1
		call.Index = &i
		return c.send(openai.ChatDelta{ToolCalls: []openai.ToolCallOut{call}}, nil)
	case toolcall.ArgumentsDelta:
		if c.skipCall {
			return nil
		}
		i := len(c.calls) - 1
		c.calls[i].Function.Arguments += e.Arguments
		return c.send(openai.ChatDelta{ToolCalls: []openai.ToolCallOut{{Index: &i, Function: openai.FunctionCallOut{Arguments: e.Arguments}}}}, nil)
	case toolcall.CallEnd:
		c.skipCall = false
	}
	return nil
}

func (c *chatSink) end(finish string, u openai.Usage) error {
	r, a := c.reason.Flush()
	if err := c.out(r, a, true); err != nil {
		return err
	}
	if err := c.spec.Check(c.calls); err != nil {
		c.fail(err)
		return err
	}
	if len(c.calls) > 0 && finish == "stop" {
		finish = "tool_calls"
	}
	if !c.stream {
		msg := openai.ChatMessageOut{Role: "assistant", ToolCalls: c.calls}
		if text := c.content.String(); text != "" || len(c.calls) == 0 {
			msg.Content = &text
		}
		if c.thought.Len() > 0 {
			t := c.thought.String()
			msg.ReasoningContent = &t
		}
		choice := openai.ChatChoice{Index: c.index, Message: msg, FinishReason: finish}
		if c.logprobs != nil {
			choice.Logprobs = c.logprobs.take()
		}
		if last, all, total := c.group.addChat(choice, u); last {
			writeJSON(c.w, http.StatusOK, openai.ChatCompletion{ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
				SystemFingerprint: c.fingerprint, Choices: all, Usage: &total})
		}
		return nil
	}
	last, total := c.group.end(u)
	if last {
		// What follows ends the response: it goes out with the response's
		// end when the handler returns (SSE.Last).
		c.sse.Batch = true
	}
	if err := c.sendText(textDelta{finish: finish}); err != nil {
		return err
	}
	if !last {
		return nil
	}
	defer c.group.close()
	if c.includeUsage {
		ch := c.chunk(openai.ChatDelta{}, nil)
		ch.Choices, ch.Usage = []openai.ChatChunkChoice{}, &total
		if err := c.sse.Send(ch); err != nil {
			return err
		}
	}
	return c.sse.Last()
}

func (c *chatSink) fail(err error) {
	if !c.group.fail() {
		return
	}
	c.sse.W = c.w
	failStream(&c.sse, err)
	c.group.close()
}
