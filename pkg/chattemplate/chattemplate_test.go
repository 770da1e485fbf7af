package chattemplate_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
)

const qwen3Dir = "../tokenizer/qwen3"

type chatCase struct {
	Messages            []chattemplate.Message `json:"messages"`
	AddGenerationPrompt bool                   `json:"add_generation_prompt"`
	Prompt              string                 `json:"prompt"`
	IDs                 []uint32               `json:"ids"`
}

func qwen3Template(t testing.TB) *chattemplate.Template {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(qwen3Dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(cfg.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func readChatCases(t testing.TB) []chatCase {
	t.Helper()
	f, err := os.Open(filepath.Join(qwen3Dir, "reference-chat.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []chatCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c chatCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestQwen3Reference(t *testing.T) {
	tmpl := qwen3Template(t)
	tok, err := tokenizer.Load(filepath.Join(qwen3Dir, "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	cases := readChatCases(t)
	if len(cases) != 20 {
		t.Fatalf("got %d reference cases, want 20", len(cases))
	}
	for i, c := range cases {
		got, err := tmpl.Render(chattemplate.Input{
			Messages:            c.Messages,
			AddGenerationPrompt: c.AddGenerationPrompt,
			EOSToken:            "<|im_end|>",
		})
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		if got != c.Prompt {
			t.Errorf("case %d:\n got %q\nwant %q", i, got, c.Prompt)
			continue
		}
		if ids := tok.Encode(got); !slices.Equal(ids, c.IDs) {
			t.Errorf("case %d ids:\n got %v\nwant %v", i, ids, c.IDs)
		}
	}
}

func strPtr(s string) *string { return &s }

func TestQwen3Features(t *testing.T) {
	tmpl := qwen3Template(t)
	weather := json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Weather <now> & later","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`)
	tests := []struct {
		name string
		in   chattemplate.Input
		want string
	}{
		{
			name: "thinking disabled",
			in: chattemplate.Input{
				Messages:            []chattemplate.Message{{Role: "user", Content: "hi"}},
				AddGenerationPrompt: true,
				Extra:               map[string]any{"enable_thinking": false},
			},
			want: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name: "no generation prompt",
			in:   chattemplate.Input{Messages: []chattemplate.Message{{Role: "user", Content: "hi"}}},
			want: "<|im_start|>user\nhi<|im_end|>\n",
		},
		{
			name: "reasoning content after last query",
			in: chattemplate.Input{Messages: []chattemplate.Message{
				{Role: "user", Content: "q"},
				{Role: "assistant", Content: "a", ReasoningContent: strPtr("r")},
			}},
			want: "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n",
		},
		{
			name: "think tags in content",
			in: chattemplate.Input{Messages: []chattemplate.Message{
				{Role: "user", Content: "q"},
				{Role: "assistant", Content: "<think>\nr\n</think>\n\na"},
			}},
			want: "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n",
		},
		{
			name: "tools and tool calls",
			in: chattemplate.Input{
				Tools: []json.RawMessage{weather},
				Messages: []chattemplate.Message{
					{Role: "system", Content: "sys"},
					{Role: "user", Content: "weather?"},
					{Role: "assistant", Content: "", ToolCalls: []chattemplate.ToolCall{{ID: "c1", Type: "function", Function: chattemplate.FunctionCall{Name: "get_weather", Arguments: json.RawMessage(`"{\"city\":\"Paris\",\"days\":3}"`)}}}},
					{Role: "tool", Content: "sunny", ToolCallID: "c1"},
					{Role: "tool", Content: "warm", ToolCallID: "c1"},
				},
				AddGenerationPrompt: true,
			},
			want: "<|im_start|>system\nsys\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
				"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nweather?<|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nwarm\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tmpl.Render(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	parseTests := []struct{ name, src string }{
		{"unclosed block", "{% if x %}never closed"},
		{"unclosed expression", "{{ x "},
		{"bad tag", "{% frobnicate %}"},
	}
	for _, tc := range parseTests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := chattemplate.Parse(tc.src); !errors.Is(err, chattemplate.ErrTemplate) {
				t.Errorf("Parse(%q) err = %v, want ErrTemplate", tc.src, err)
			}
		})
	}
	raising, err := chattemplate.Parse(`{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{{ m.content }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	renderTests := []struct {
		name string
		in   chattemplate.Input
		want error
		msg  string
	}{
		{"raise_exception", chattemplate.Input{Messages: []chattemplate.Message{{Role: "tool", Content: "x"}}}, chattemplate.ErrRender, "Only user and assistant roles"},
		{"bad tool JSON", chattemplate.Input{Tools: []json.RawMessage{json.RawMessage(`{"a":`)}}, chattemplate.ErrInput, "tool 0"},
		{"bad extra", chattemplate.Input{Extra: map[string]any{"x": struct{}{}}}, chattemplate.ErrInput, "unsupported type"},
	}
	for _, tc := range renderTests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := raising.Render(tc.in)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}

// FuzzRender renders the Qwen3 template with arbitrary message contents and
// roles: it must never panic, and plain user content must appear verbatim.
func FuzzRender(f *testing.F) {
	tmpl := qwen3Template(f)
	f.Add("user", "hello", "<think>\nr\n</think>\n\nanswer", "{{ not a template }}")
	f.Add("system", "<tool_response>x</tool_response>", "", "</think>")
	f.Add("tool", "", "\x00\xff", "{% endfor %}")
	f.Fuzz(func(t *testing.T, role, user, assistant, tool string) {
		in := chattemplate.Input{
			Messages: []chattemplate.Message{
				{Role: role, Content: user},
				{Role: "user", Content: user},
				{Role: "assistant", Content: assistant},
				{Role: "tool", Content: tool},
				{Role: "user", Content: user},
			},
			AddGenerationPrompt: true,
		}
		out, err := tmpl.Render(in)
		if err != nil {
			if !errors.Is(err, chattemplate.ErrRender) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !strings.Contains(out, "<|im_start|>user\n"+user+"<|im_end|>") {
			t.Errorf("user content %q missing from %q", user, out)
		}
	})
}

func TestToolsNone(t *testing.T) {
	tmpl, err := chattemplate.Parse(`{{ tools is defined }} {{ tools is none }} {{ documents is none }}{% if tools %} tools{% endif %}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(chattemplate.Input{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "True True True"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestTypicalTemplates(t *testing.T) {
	const llama3 = `{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`
	const mistral = `{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}`
	const chatml = `{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	conv := []chattemplate.Message{{Role: "user", Content: "  Hi there \n"}, {Role: "assistant", Content: "Hello!"}, {Role: "user", Content: "Bye"}}
	tests := []struct {
		name    string
		src     string
		in      chattemplate.Input
		want    string
		wantErr string
	}{
		{
			name: "llama3",
			src:  llama3,
			in:   chattemplate.Input{Messages: conv, AddGenerationPrompt: true, BOSToken: "<|begin_of_text|>"},
			want: "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name: "mistral",
			src:  mistral,
			in:   chattemplate.Input{Messages: conv, BOSToken: "<s>", EOSToken: "</s>"},
			want: "<s>[INST]   Hi there \n [/INST]Hello!</s>[INST] Bye [/INST]",
		},
		{
			name:    "mistral rejects non-alternating roles",
			src:     mistral,
			in:      chattemplate.Input{Messages: []chattemplate.Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}},
			wantErr: "Conversation roles must alternate",
		},
		{
			name: "chatml",
			src:  chatml,
			in:   chattemplate.Input{Messages: conv[:1], AddGenerationPrompt: true},
			want: "<|im_start|>user\n  Hi there \n<|im_end|>\n<|im_start|>assistant\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := chattemplate.Parse(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, chattemplate.ErrRender) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrRender mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
