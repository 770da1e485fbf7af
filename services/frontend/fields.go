package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"unicode/utf8"
)

// Request fields the frontend does not act on are refused by name (400
// invalid_request_error with param set), never silently ignored: a client
// that asks for JSON output, a logit bias or audio must learn that it does
// not get it. OpenAI answers unknown fields the same way. Fields OpenAI
// defines that the frontend cannot honour are accepted only at the value
// that asks for nothing (response_format text, logit_bias {}, store false,
// ...); fields that only label a request for OpenAI's own bookkeeping
// (user, metadata, safety_identifier, prompt_cache_key) are accepted, as they
// do not change the answer.

// fieldPolicy is what an endpoint accepts at the top level of its body.
type fieldPolicy struct {
	// supported fields are implemented (their values are validated where
	// they are used) or have no effect on the answer.
	supported map[string]bool
	// onlyDefault fields are accepted when null or when isDefault says so.
	onlyDefault map[string]defaultRule
}

type defaultRule struct {
	isDefault func(raw []byte) bool
	msg       string
}

func fieldSet(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// bookkeeping are OpenAI fields that label a request and do not change
// what is generated.
var bookkeeping = []string{"user", "metadata", "safety_identifier", "prompt_cache_key", "prompt_cache_retention"}

// commonFields are the fields openai.CommonRequest holds, vLLM's sampling
// extensions included.
var commonFields = []string{"model", "stream", "stream_options", "max_tokens", "n", "temperature", "top_p", "top_k", "min_p", "seed",
	"frequency_penalty", "presence_penalty", "repetition_penalty", "stop", "stop_token_ids", "ignore_eos", "min_tokens", "cache_salt"}

// rawIs accepts a value whose compact JSON is one of want.
func rawIs(want ...string) func([]byte) bool {
	return func(raw []byte) bool {
		var c bytes.Buffer
		if json.Compact(&c, raw) != nil {
			return false
		}
		for _, w := range want {
			if c.String() == w {
				return true
			}
		}
		return false
	}
}

func never([]byte) bool { return false }

var chatPolicy = fieldPolicy{
	supported: fieldSet(append(append([]string{"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
		"max_completion_tokens", "logprobs", "top_logprobs", "response_format"}, commonFields...), bookkeeping...)...),
	onlyDefault: map[string]defaultRule{
		"logit_bias":         {rawIs(`{}`), "logit_bias is not supported"},
		"modalities":         {rawIs(`["text"]`), `modalities: only ["text"] is supported`},
		"audio":              {never, "audio output is not supported"},
		"prediction":         {never, "predicted outputs (prediction) are not supported"},
		"web_search_options": {never, "web search (web_search_options) is not supported"},
		"functions":          {never, "functions is not supported; use tools"},
		"function_call":      {never, "function_call is not supported; use tool_choice"},
		"reasoning_effort":   {never, "reasoning_effort is not supported; use chat_template_kwargs (for example enable_thinking) where the model's template reads it"},
		"verbosity":          {never, "verbosity is not supported"},
		"store":              {rawIs(`false`), "store: responses are not stored"},
		"service_tier":       {rawIs(`"auto"`, `"default"`), `service_tier: only "auto" and "default" are supported`},
	},
}

var completionPolicy = fieldPolicy{
	supported: fieldSet(append(append([]string{"prompt", "echo", "suffix", "logprobs"}, commonFields...), bookkeeping...)...),
	onlyDefault: map[string]defaultRule{
		"logit_bias": {rawIs(`{}`), "logit_bias is not supported"},
		"best_of":    {rawIs(`1`), "best_of is not supported; use n"},
	},
}

var responsesPolicy = fieldPolicy{
	// tools, tool_choice, previous_response_id and text are checked in
	// decodeResponses.
	supported: fieldSet(append([]string{"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
		"stream_options", "tools", "tool_choice", "previous_response_id", "text", "chat_template_kwargs", "parallel_tool_calls", "max_tool_calls",
		"cache_salt"},
		bookkeeping...)...),
	onlyDefault: map[string]defaultRule{
		"store":        {rawIs(`false`), "store: responses are not stored; send store false and the conversation as input"},
		"reasoning":    {rawIs(`{}`), "reasoning options are not supported; use chat_template_kwargs where the model's template reads them"},
		"include":      {rawIs(`[]`), "include is not supported"},
		"truncation":   {rawIs(`"disabled"`), `truncation: only "disabled" is supported`},
		"background":   {rawIs(`false`), "background responses are not supported"},
		"service_tier": {rawIs(`"auto"`, `"default"`), `service_tier: only "auto" and "default" are supported`},
		"top_logprobs": {rawIs(`0`), "top_logprobs is not supported on /v1/responses; use /v1/chat/completions"},
		"prompt":       {never, "prompt templates are not supported"},
		"conversation": {never, "conversations are not stored; send the conversation as input"},
	},
}

// check refuses the first field of body (a JSON object that decoded) that
// the policy does not accept, in the order of the body.
func (p fieldPolicy) check(body []byte) error {
	err := topLevelFields(body, func(key, raw []byte) error {
		if p.supported[string(key)] { // string(key) in a map index does not allocate
			return nil
		}
		if r, ok := p.onlyDefault[string(key)]; ok {
			if bytes.Equal(raw, []byte("null")) || r.isDefault(raw) {
				return nil
			}
			return invalid(string(key), "%s", r.msg)
		}
		return invalid(string(key), "unrecognized request field %q; the supported fields are %s", key, p.names())
	})
	if errors.Is(err, errBadJSON) {
		return invalid("", "malformed JSON body")
	}
	return err
}

func (p fieldPolicy) names() string {
	names := make([]string, 0, len(p.supported))
	for n := range p.supported {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

var errBadJSON = errors.New("malformed JSON")

// topLevelFields calls fn with the name and raw value of each member of the
// JSON object body, in order. body must be valid JSON (it has been decoded):
// the scan only skips values, jumping over strings with IndexByte, so a long
// chat costs little. An unescaped name is a view of body, not a copy.
func topLevelFields(body []byte, fn func(name, raw []byte) error) error {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return errBadJSON
	}
	i++
	for {
		i = skipSpace(body, i)
		if i >= len(body) {
			return errBadJSON
		}
		if body[i] == '}' {
			return nil
		}
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		end, err := skipString(body, i)
		if err != nil {
			return err
		}
		key := body[i:end]
		var name []byte
		if bytes.IndexByte(key, '\\') < 0 && utf8.Valid(key) {
			name = key[1 : len(key)-1] // a view of body: no copy per field
		} else {
			var s string
			if err := json.Unmarshal(key, &s); err != nil {
				return errBadJSON
			}
			name = []byte(s)
		}
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return errBadJSON
		}
		i = skipSpace(body, i+1)
		vend, err := skipValue(body, i)
		if err != nil {
			return err
		}
		if err := fn(name, body[i:vend]); err != nil {
			return err
		}
		i = vend
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, errBadJSON
	}
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, errBadJSON
		}
		q := j + k
		n := 0 // backslashes right before the quote
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			end, err := skipString(b, i)
			if err != nil {
				return 0, err
			}
			i = end
			if depth == 0 {
				return i, nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the object around a scalar
				return i, nil
			}
			depth--
			if depth == 0 {
				return i + 1, nil
			}
			if depth < 0 {
				return 0, errBadJSON
			}
		case ',':
			if depth == 0 {
				return i, nil
			}
		default:
			if depth == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				return i, nil
			}
		}
		i++
	}
	if depth == 0 {
		return i, nil
	}
	return 0, errBadJSON
}
