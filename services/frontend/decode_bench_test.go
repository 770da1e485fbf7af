package frontend

import "testing"

// Bodies as clients send them: the frontend-bench's request, and an agent's
// (openai-go style: sampling fields, stream_options, a tool, a tool result).
var (
	benchChatBody = []byte(`{"chat_template_kwargs":{"enable_thinking":false},"ignore_eos":true,"max_tokens":32,` +
		`"messages":[{"content":"Summarise the history of the steam locomotive in three paragraphs.","role":"user"}],` +
		`"model":"Qwen/Qwen3-0.6B","stream":true}`)
	benchAgentBody = []byte(`{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"What is the weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1",` +
		`"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1",` +
		`"content":"18 degrees and sunny"}],"tools":[` + weatherTool + `],"tool_choice":"auto","temperature":0.7,"top_p":0.95,` +
		`"max_completion_tokens":256,"stream":true,"stream_options":{"include_usage":true},"seed":42,"user":"u-1"}`)
	benchCompletionBody = []byte(`{"model":"Qwen/Qwen3-0.6B","prompt":"Once upon a time","max_tokens":32,"temperature":0.8,"stop":["\n\n"],"stream":true}`)
)

// BenchmarkDecodeChat is decodeChat (decode, field policy, validation) of
// the bench's request and of an agent's.
func BenchmarkDecodeChat(b *testing.B) {
	for _, bc := range []struct {
		name string
		body []byte
	}{{"bench", benchChatBody}, {"agent", benchAgentBody}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := decodeChat(bc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeCompletion is decodeCompletion of a streamed completion.
func BenchmarkDecodeCompletion(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, _, err := decodeCompletion(benchCompletionBody); err != nil {
			b.Fatal(err)
		}
	}
}
