package frontend_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// This file checks response bodies field by field against OpenAI's
// published OpenAPI schema (CreateChatCompletionResponse,
// CreateChatCompletionStreamResponse, CreateCompletionResponse, Model,
// ListModelsResponse and the Responses API objects): every required field is
// present with its type, enums hold their values, nullable fields are null or
// of their type. Extra fields (reasoning_content) are allowed, as the schema
// allows them.

type obj = map[string]any

// schemaErr collects violations with their JSON path.
type schemaErr struct{ errs []string }

func (e *schemaErr) addf(path, format string, args ...any) {
	e.errs = append(e.errs, path+": "+fmt.Sprintf(format, args...))
}

func (e *schemaErr) object(path string, v any) obj {
	o, ok := v.(obj)
	if !ok {
		e.addf(path, "want an object, got %T", v)
	}
	return o
}

func (e *schemaErr) required(path string, o obj, keys ...string) {
	for _, k := range keys {
		if _, ok := o[k]; !ok {
			e.addf(path, "required field %q is missing", k)
		}
	}
}

func (e *schemaErr) str(path string, v any, nullable bool, enum ...string) {
	if v == nil && nullable {
		return
	}
	s, ok := v.(string)
	if !ok {
		e.addf(path, "want a string, got %T", v)
		return
	}
	if len(enum) > 0 && !slices.Contains(enum, s) {
		e.addf(path, "%q is not one of %v", s, enum)
	}
}

func (e *schemaErr) integer(path string, v any) {
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) {
		e.addf(path, "want an integer, got %v", v)
	}
}

func (e *schemaErr) number(path string, v any) {
	if _, ok := v.(float64); !ok {
		e.addf(path, "want a number, got %T", v)
	}
}

func (e *schemaErr) array(path string, v any, nullable bool) []any {
	if v == nil && nullable {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		e.addf(path, "want an array, got %T", v)
	}
	return a
}

func (e *schemaErr) usage(path string, v any, nullable bool) {
	if v == nil && nullable {
		return
	}
	u := e.object(path, v)
	e.required(path, u, "prompt_tokens", "completion_tokens", "total_tokens")
	for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens"} {
		e.integer(path+"."+k, u[k])
	}
	if d, ok := u["prompt_tokens_details"]; ok && d != nil {
		e.integer(path+".prompt_tokens_details.cached_tokens", e.object(path+".prompt_tokens_details", d)["cached_tokens"])
	}
}

func (e *schemaErr) header(path string, o obj, object string) {
	e.required(path, o, "id", "object", "created", "model", "choices")
	e.str(path+".id", o["id"], false)
	e.str(path+".object", o["object"], false, object)
	e.integer(path+".created", o["created"])
	e.str(path+".model", o["model"], false)
	if fp, ok := o["system_fingerprint"]; ok {
		e.str(path+".system_fingerprint", fp, true)
	}
}

func (e *schemaErr) chatLogprobs(path string, v any) {
	if v == nil {
		return
	}
	lp := e.object(path, v)
	e.required(path, lp, "content", "refusal")
	for i, t := range e.array(path+".content", lp["content"], true) {
		p := fmt.Sprintf("%s.content[%d]", path, i)
		to := e.object(p, t)
		e.required(p, to, "token", "logprob", "bytes", "top_logprobs")
		e.str(p+".token", to["token"], false)
		e.number(p+".logprob", to["logprob"])
		e.array(p+".bytes", to["bytes"], true)
		for j, top := range e.array(p+".top_logprobs", to["top_logprobs"], false) {
			tp := fmt.Sprintf("%s.top_logprobs[%d]", p, j)
			tt := e.object(tp, top)
			e.required(tp, tt, "token", "logprob", "bytes")
			e.number(tp+".logprob", tt["logprob"])
		}
	}
	e.array(path+".refusal", lp["refusal"], true)
}

func (e *schemaErr) toolCalls(path string, v any, streamed bool) {
	for i, c := range e.array(path, v, false) {
		p := fmt.Sprintf("%s[%d]", path, i)
		co := e.object(p, c)
		if streamed {
			e.required(p, co, "index")
			e.integer(p+".index", co["index"])
		} else {
			e.required(p, co, "id", "type", "function")
		}
		if id, ok := co["id"]; ok || !streamed {
			e.str(p+".id", id, false)
		}
		if ty, ok := co["type"]; ok || !streamed {
			e.str(p+".type", ty, false, "function")
		}
		if f, ok := co["function"]; ok || !streamed {
			fo := e.object(p+".function", f)
			if !streamed {
				e.required(p+".function", fo, "name", "arguments")
			}
			for _, k := range []string{"name", "arguments"} {
				if x, ok := fo[k]; ok {
					e.str(p+".function."+k, x, false)
				}
			}
		}
	}
}

var chatFinish = []string{"stop", "length", "tool_calls", "content_filter", "function_call"}

// checkChatCompletion validates a CreateChatCompletionResponse.
func checkChatCompletion(t testing.TB, body []byte) obj {
	t.Helper()
	var e schemaErr
	var o obj
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	e.header("$", o, "chat.completion")
	for i, c := range e.array("$.choices", o["choices"], false) {
		p := fmt.Sprintf("$.choices[%d]", i)
		co := e.object(p, c)
		e.required(p, co, "finish_reason", "index", "message", "logprobs")
		e.str(p+".finish_reason", co["finish_reason"], false, chatFinish...)
		e.integer(p+".index", co["index"])
		e.chatLogprobs(p+".logprobs", co["logprobs"])
		m := e.object(p+".message", co["message"])
		e.required(p+".message", m, "content", "refusal", "role")
		e.str(p+".message.content", m["content"], true)
		e.str(p+".message.refusal", m["refusal"], true)
		e.str(p+".message.role", m["role"], false, "assistant")
		if tc, ok := m["tool_calls"]; ok {
			e.toolCalls(p+".message.tool_calls", tc, false)
		}
	}
	if u, ok := o["usage"]; ok {
		e.usage("$.usage", u, false)
	}
	if len(e.errs) > 0 {
		t.Fatalf("chat completion violates the schema:\n%s\n%s", strings.Join(e.errs, "\n"), body)
	}
	return o
}

// checkChatChunk validates a CreateChatCompletionStreamResponse.
func checkChatChunk(t testing.TB, body []byte) obj {
	t.Helper()
	var e schemaErr
	var o obj
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	e.header("$", o, "chat.completion.chunk")
	for i, c := range e.array("$.choices", o["choices"], false) {
		p := fmt.Sprintf("$.choices[%d]", i)
		co := e.object(p, c)
		e.required(p, co, "delta", "finish_reason", "index")
		e.str(p+".finish_reason", co["finish_reason"], true, chatFinish...)
		e.integer(p+".index", co["index"])
		if lp, ok := co["logprobs"]; ok {
			e.chatLogprobs(p+".logprobs", lp)
		}
		d := e.object(p+".delta", co["delta"])
		if r, ok := d["role"]; ok {
			e.str(p+".delta.role", r, false, "developer", "system", "user", "assistant", "tool")
		}
		if c, ok := d["content"]; ok {
			e.str(p+".delta.content", c, true)
		}
		if r, ok := d["refusal"]; ok {
			e.str(p+".delta.refusal", r, true)
		}
		if tc, ok := d["tool_calls"]; ok {
			e.toolCalls(p+".delta.tool_calls", tc, true)
		}
	}
	if u, ok := o["usage"]; ok {
		e.usage("$.usage", u, true)
	}
	if len(e.errs) > 0 {
		t.Fatalf("chat chunk violates the schema:\n%s\n%s", strings.Join(e.errs, "\n"), body)
	}
	return o
}

// checkCompletion validates a CreateCompletionResponse (also each streamed
// event, which has the same shape).
func checkCompletion(t testing.TB, body []byte) obj {
	t.Helper()
	var e schemaErr
	var o obj
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	e.header("$", o, "text_completion")
	for i, c := range e.array("$.choices", o["choices"], false) {
		p := fmt.Sprintf("$.choices[%d]", i)
		co := e.object(p, c)
		e.required(p, co, "finish_reason", "index", "logprobs", "text")
		e.str(p+".finish_reason", co["finish_reason"], true, "stop", "length", "content_filter")
		e.integer(p+".index", co["index"])
		e.str(p+".text", co["text"], false)
		if lp := co["logprobs"]; lp != nil {
			lo := e.object(p+".logprobs", lp)
			e.array(p+".logprobs.tokens", lo["tokens"], false)
			e.array(p+".logprobs.token_logprobs", lo["token_logprobs"], false)
			e.array(p+".logprobs.top_logprobs", lo["top_logprobs"], false)
			e.array(p+".logprobs.text_offset", lo["text_offset"], false)
		}
	}
	if u, ok := o["usage"]; ok {
		e.usage("$.usage", u, false)
	}
	if len(e.errs) > 0 {
		t.Fatalf("completion violates the schema:\n%s\n%s", strings.Join(e.errs, "\n"), body)
	}
	return o
}

// rawPost sends body and returns the response with its body read.
func (s *stack) rawPost(path, body string, header map[string]string) (*http.Response, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp, b
}

// sseEvents splits a server-sent event body into its data payloads, [DONE]
// included, and the event names (for the Responses API).
func sseEvents(t testing.TB, body []byte) (data []string, events []string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		} else if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
		}
	}
	return data, events
}
