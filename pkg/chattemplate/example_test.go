package chattemplate_test

import (
	"fmt"
	"log"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
)

// Example shows the frontend's preprocessing: load the model's tokenizer
// files, render the chat template and encode the prompt.
func Example() {
	tok, cfg, err := tokenizer.LoadDir("../tokenizer/qwen3")
	if err != nil {
		log.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(cfg.ChatTemplate)
	if err != nil {
		log.Fatal(err)
	}
	prompt, err := tmpl.Render(chattemplate.Input{
		Messages:            []chattemplate.Message{{Role: "user", Content: "Hello!"}},
		AddGenerationPrompt: true,
		EOSToken:            cfg.EOSToken,
		Extra:               map[string]any{"enable_thinking": false},
	})
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode(prompt)
	fmt.Printf("%q\n%v\n%q\n", prompt, ids, tok.Decode(ids[len(ids)-4:]))
	// Output:
	// "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	// [151644 872 198 9707 0 151645 198 151644 77091 198 151667 271 151668 271]
	// "<think>\n\n</think>\n\n"
}
