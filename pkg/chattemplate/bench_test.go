package chattemplate_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
)

// BenchmarkPreprocess60k measures what the frontend does before routing a
// long chat request: render the Qwen3 template for a conversation of about
// 60,000 tokens and encode the prompt.
func BenchmarkPreprocess60k(b *testing.B) {
	tmpl := qwen3Template(b)
	tok, err := tokenizer.Load(filepath.Join(qwen3Dir, "tokenizer.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	var turns []string
	for _, c := range readChatCases(b) {
		for _, m := range c.Messages {
			turns = append(turns, m.Content)
		}
	}
	in := chattemplate.Input{AddGenerationPrompt: true}
	tokens := 0
	for i := 0; tokens < 60000; i++ {
		// Paragraph-sized turns of ten reference messages each.
		content := strings.Join(turns[(10*i)%len(turns):min((10*i)%len(turns)+10, len(turns))], "\n")
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		in.Messages = append(in.Messages, chattemplate.Message{Role: role, Content: content})
		prompt, err := tmpl.Render(in)
		if err != nil {
			b.Fatal(err)
		}
		tokens = len(tok.Encode(prompt))
	}
	b.ResetTimer()
	for b.Loop() {
		prompt, err := tmpl.Render(in)
		if err != nil {
			b.Fatal(err)
		}
		tokens = len(tok.Encode(prompt))
	}
	b.ReportMetric(float64(tokens), "tokens")
	b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/prompt")
}
