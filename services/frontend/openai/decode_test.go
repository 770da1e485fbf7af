package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Bodies as clients send them: a benchmark's streamed chat request, an
// agent's (openai-go style: sampling fields, stream_options, a tool, a tool
// result), and a streamed completion.
var (
	clientChatBody = []byte(`{"chat_template_kwargs":{"enable_thinking":false},"ignore_eos":true,"max_tokens":32,` +
		`"messages":[{"content":"Summarise the history of the steam locomotive in three paragraphs.","role":"user"}],` +
		`"model":"Qwen/Qwen3-0.6B","stream":true}`)
	clientAgentBody = []byte(`{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"What is the weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1",` +
		`"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1",` +
		`"content":"18 degrees and sunny"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",` +
		`"properties":{"city":{"type":"string"}},"required":["city"]}}}],"tool_choice":"auto","temperature":0.7,"top_p":0.95,` +
		`"max_completion_tokens":256,"stream":true,"stream_options":{"include_usage":true},"seed":42,"user":"u-1"}`)
	clientCompletionBody = []byte(`{"model":"Qwen/Qwen3-0.6B","prompt":"Once upon a time","max_tokens":32,"temperature":0.8,"stop":["\n\n"],"stream":true}`)
)

// fastDecodeSeeds are bodies at the edges of what the fast decoder takes:
// nulls, escapes, duplicates, case-folded names, numbers json refuses for
// a type, nesting, invalid JSON.
var fastDecodeSeeds = []string{
	string(clientChatBody), string(clientAgentBody), string(clientCompletionBody),
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	` {"model" : "m" , "messages" : [ { "role" : "user" , "content" : [ {"type":"text","text":"a"} ] } ] } `,
	`{"model":null,"messages":null,"tools":null,"tool_choice":null,"stop":null,"stream_options":null,"chat_template_kwargs":null,"max_tokens":null,"stream":null}`,
	`{"model":"m","messages":[null]}`,
	`{"model":"m","messages":[]}`,
	`{"model":"m","model":"n"}`,
	`{"Model":"m"}`,
	`{"MODEL":"m","messages":[{"ROLE":"user"}]}`,
	`{"mod\u0065l":"m"}`,
	`{"model":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t"}`,
	"{\"model\":\"\xff\xfe\"}",
	"{\"model\":\"a\x01\"}",
	`{"model":"m","max_tokens":1.5}`,
	`{"model":"m","max_tokens":1e3}`,
	`{"model":"m","max_tokens":-0}`,
	`{"model":"m","max_tokens":9223372036854775808}`,
	`{"model":"m","temperature":1e400}`,
	`{"model":"m","temperature":-0.0,"top_p":0.5E-1,"min_p":1E+0}`,
	`{"model":"m","temperature":01}`,
	`{"model":"m","temperature":.5}`,
	`{"model":"m","temperature":"1"}`,
	`{"model":"m","stop_token_ids":[1,2,4294967295]}`,
	`{"model":"m","stop_token_ids":[4294967296]}`,
	`{"model":"m","stop_token_ids":[-1]}`,
	`{"model":"m","stop_token_ids":[]}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true,"other":[1,{"a":null}]}}`,
	`{"model":"m","stream_options":{"Include_Usage":true}}`,
	`{"model":"m","stream_options":{"include_usage":null}}`,
	`{"model":"m","chat_template_kwargs":{"enable_thinking":false,"n":1.25,"s":"x","l":[1,"a",null,true,{}],"o":{"k":[]}}}`,
	`{"model":"m","chat_template_kwargs":{"a":1,"a":{"b":2}}}`,
	`{"model":"m","chat_template_kwargs":{"caf\u00e9":1}}`,
	`{"model":"m","chat_template_kwargs":[]}`,
	`{"model":"m","tools":[{"type":"function","function":{"name":"f"}},null,1,"x"],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
	`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]}`,
	`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"ID":"1","function":{"name":"f","arguments":{"a":1}}}]}]}`,
	`{"model":"m","messages":[{"role":"assistant","tool_calls":[null,{"function":null}]}]}`,
	`{"model":"m","messages":[{"role":"assistant","tool_calls":null,"reasoning_content":"think","name":"n","tool_call_id":"t","extra":{"x":[1]}}]}`,
	`{"model":"m","messages":[{"role":"robot","content":"x","role":"user"}]}`,
	`{"model":"m","parallel_tool_calls":false,"logprobs":true,"top_logprobs":3,"max_completion_tokens":7,"seed":-5,"n":2,"top_k":-1,"min_tokens":1}`,
	`{"model":"m","frequency_penalty":-2,"presence_penalty":2,"repetition_penalty":1.1,"ignore_eos":true,"user":"u","metadata":{"k":"v"},"response_format":{"type":"text"}}`,
	`{"model":"m","prompt":"once","echo":false,"suffix":"s","logprobs":2}`,
	`{"model":"m","cache_salt":"tenant-a","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","cache_salt":null,"prompt":[1]}`,
	`{"model":"m","cache_salt":"","cache_salt":"b"}`,
	`{"model":"m","cache_salt":1}`,
	`{"model":"m","Cache_Salt":"x"}`,
	`{"model":"m","cache_salt":"é
"}`,
	`{"model":"m","prompt":[1,2,3],"suffix":null,"logprobs":null}`,
	`{"model":"m","prompt":[[1,2]],"Prompt":"x"}`,
	`{"model":"m",}`,
	`{"model":"m"`,
	`{"model":"m"} x`,
	`{"model":"m"}{}`,
	`{"model" "m"}`,
	`{"a":[1,]}`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":"\x"}`, `{"a":"\u12G4"}`, `{"a":"\u12"}`,
	`[]`, ``, `null`, "\v{}",
	`"stop"`, `["a","","\n\n"]`, `[null]`, `["a",1]`, `[1,2,3]`, `[[1,2]]`, ` [ 7 ] `, `"\ud800x"`,
}

// FuzzFastDecode checks the fast decoder against encoding/json: a body it
// takes, json.Unmarshal takes too and decodes to the same request.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast ChatRequest
		if decodeChatFast(body, &fast) {
			var slow ChatRequest
			if err := json.Unmarshal(body, &slow); err != nil {
				t.Fatalf("the fast decoder took a chat body json refuses (%v): %q", err, body)
			}
			// The copy's optional fields still point into fast.opt.
			got := fast
			got.opt = optStore{}
			if !reflect.DeepEqual(got, slow) {
				t.Fatalf("chat body %q:\nfast %#v\njson %#v", body, got, slow)
			}
		}
		var fastc CompletionRequest
		if decodeCompletionFast(body, &fastc) {
			var slow CompletionRequest
			if err := json.Unmarshal(body, &slow); err != nil {
				t.Fatalf("the fast decoder took a completion body json refuses (%v): %q", err, body)
			}
			got := fastc
			got.opt = optStore{}
			if !reflect.DeepEqual(got, slow) {
				t.Fatalf("completion body %q:\nfast %#v\njson %#v", body, got, slow)
			}
		}
		if list, ok := fastStrings(body); ok {
			var one string
			var slow []string
			if json.Unmarshal(body, &one) == nil {
				slow = []string{one}
			} else if err := json.Unmarshal(body, &slow); err != nil {
				t.Fatalf("fastStrings took %q, which json refuses (%v)", body, err)
			}
			if !reflect.DeepEqual(list, slow) {
				t.Fatalf("strings %q: fast %q, json %q", body, list, slow)
			}
		}
		if ids, ok := fastTokenIDs(body); ok {
			var slow []uint32
			if err := json.Unmarshal(body, &slow); err != nil || !reflect.DeepEqual(ids, slow) {
				t.Fatalf("token ids %q: fast %v, json %v (%v)", body, ids, slow, err)
			}
		}
		if typ, name, hasFunction, ok := ToolFunctionName(body); ok {
			var tool struct {
				Type     string `json:"type"`
				Function *struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(body, &tool); err != nil {
				t.Fatalf("ToolFunctionName took a tool json refuses (%v): %q", err, body)
			}
			if typ != tool.Type || hasFunction != (tool.Function != nil) || (hasFunction && name != tool.Function.Name) {
				t.Fatalf("tool %q: fast %q %q %v, json %+v", body, typ, name, hasFunction, tool)
			}
		}
	})
}

// TestFastDecodeTakesClientBodies: the bodies SDKs send take the fast
// path (the fallback is for the odd ones), with their optional fields.
func TestFastDecodeTakesClientBodies(t *testing.T) {
	for _, body := range [][]byte{clientChatBody, clientAgentBody} {
		var r ChatRequest
		if !decodeChatFast(body, &r) {
			t.Fatalf("not taken: %s", body)
		}
	}
	var r ChatRequest
	if !decodeChatFast(clientAgentBody, &r) || r.Temperature == nil || *r.Temperature != 0.7 || *r.MaxCompletionTokens != 256 ||
		len(r.Messages) != 4 || len(r.Messages[2].ToolCalls) != 1 || string(r.Messages[2].ToolCalls[0].Function.Arguments) != `"{\"city\":\"Paris\"}"` ||
		r.StreamOptions == nil || !r.StreamOptions.IncludeUsage || *r.Seed != 42 || len(r.Tools) != 1 {
		t.Fatalf("agent body decoded as %+v", r)
	}
	var c CompletionRequest
	if !decodeCompletionFast(clientCompletionBody, &c) || c.MaxTokens == nil || *c.MaxTokens != 32 || string(c.Stop) != `["\n\n"]` {
		t.Fatalf("completion body decoded as %+v", c)
	}
}

// TestFastDecodeDepth: past maxFastDepth levels of nesting a body goes to
// encoding/json (which has its own limit and error).
func TestFastDecodeDepth(t *testing.T) {
	nested := func(depth int) []byte {
		// The body's object is one level, the member's arrays the rest.
		return []byte(`{"model":"m","metadata":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
	}
	for _, tt := range []struct {
		depth int
		fast  bool
	}{{maxFastDepth, true}, {maxFastDepth + 1, false}} {
		var r ChatRequest
		if got := decodeChatFast(nested(tt.depth), &r); got != tt.fast {
			t.Errorf("depth %d: taken %v, want %v", tt.depth, got, tt.fast)
		}
		if err := DecodeChat(nested(tt.depth), &r); err != nil || r.Model != "m" {
			t.Errorf("depth %d: DecodeChat gave model %q, error %v; want model m", tt.depth, r.Model, err)
		}
	}
}
