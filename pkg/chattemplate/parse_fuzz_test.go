package chattemplate_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
)

// FuzzParseRender: a chat template comes from a worker's
// tokenizer_config.json, so Parse and Render must refuse what they cannot
// handle with ErrTemplate, ErrRender or ErrInput, never panic nor overflow
// the stack (a macro that calls itself without end: see MaxMacroCalls).
func FuzzParseRender(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join(qwen3Dir, "tokenizer_config.json"))
	if err != nil {
		f.Fatal(err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		f.Fatal(err)
	}
	f.Add(cfg.ChatTemplate)
	f.Add(`{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`)
	f.Add(`{%- set ns = namespace(n=0) -%}{%- for m in messages|reverse -%}{%- set ns.n = ns.n + 1 -%}{{ m['content'][:3] ~ ns.n }}{%- endfor -%}{{ raise_exception('x') if ns.n > 9 }}`)
	f.Add(`{{ messages | tojson }}{{ tools is defined }}{{ "%s"|format(1) }}{% macro m(x) %}{{ x * 2 }}{% endmacro %}{{ m(3) }}`)
	f.Add(`{% if %}`)
	f.Add(`{%- macro a(x) -%}{{ b(x) }}{%- endmacro -%}{%- macro b(x) -%}{{ a(x) }}{%- endmacro -%}{{ a(1) }}`)
	in := chattemplate.Input{Messages: []chattemplate.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "hi"},
		{Role: "assistant", Content: "<think>\nr\n</think>\n\nok"}, {Role: "tool", Content: "t"}}, AddGenerationPrompt: true}
	if testing.Short() {
		// Seeds that recurse without end stop sooner; the bound's value is
		// TestMacroCallsLimit's concern.
		chattemplate.LowerMacroCallLimit(f, 1<<10)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := chattemplate.Parse(src)
		if err != nil {
			if !errors.Is(err, chattemplate.ErrTemplate) {
				t.Fatalf("Parse = %v; want ErrTemplate", err)
			}
			return
		}
		if _, err := tmpl.Render(in); err != nil && !errors.Is(err, chattemplate.ErrRender) && !errors.Is(err, chattemplate.ErrInput) {
			t.Fatalf("Render = %v; want ErrRender or ErrInput", err)
		}
	})
}
