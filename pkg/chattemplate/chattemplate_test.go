package chattemplate_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
)

const qwen3Dir = "../tokenizer/testdata/qwen3"

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
		}
	}
}
