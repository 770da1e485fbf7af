package frontend

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
)

// BenchmarkChatPrompt11thTurn times preprocessing (template render and
// tokenization) of the 11th turn of a 10-turn chat of about 60k tokens:
// the prefix cache goal (<= 1 ms), measured here without one.
func BenchmarkChatPrompt11thTurn(b *testing.B) {
	raw, err := qwen3.ReadFile("tokenizer_config.json")
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := tokenizer.ParseConfig(raw)
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(cfg.ChatTemplate)
	if err != nil {
		b.Fatal(err)
	}
	a := &assets{tok: qwenTokenizer(b), cfg: cfg, tmpl: tmpl}
	turn := strings.Repeat("The locomotive pulled its train across the valley while the passengers watched the river. ", 160)
	var msgs []chatMessage
	for i := range 10 {
		u, _ := json.Marshal(fmt.Sprintf("Question %d: %s", i, turn))
		r, _ := json.Marshal(fmt.Sprintf("Answer %d: %s", i, turn))
		msgs = append(msgs, chatMessage{Role: "user", Content: u}, chatMessage{Role: "assistant", Content: r})
	}
	last, _ := json.Marshal("And the 11th question?")
	req := &chatRequest{Messages: append(msgs, chatMessage{Role: "user", Content: last})}
	ids, err := a.chatPrompt(req)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(ids)), "tokens")
	b.ResetTimer()
	for b.Loop() {
		if _, err := a.chatPrompt(req); err != nil {
			b.Fatal(err)
		}
	}
}
