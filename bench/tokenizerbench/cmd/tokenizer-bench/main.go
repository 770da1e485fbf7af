// Command tokenizer-bench prints the preprocessing speed of the frontend on
// one core: tokenizer.json load time, Encode and Decode tokens per second on
// a mixed multilingual text, and the time to turn a 60,000-token chat into
// token ids (chat template render plus Encode), first with a cold merge cache
// and then in steady state. It reads the Qwen3 files from -dir (run it from
// the repository root, as make bench does).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard-llm/switchyard/bench/tokenizerbench"
)

func main() {
	fs := flag.NewFlagSet("tokenizer-bench", flag.ExitOnError)
	dir := fs.String("dir", filepath.Join("pkg", "tokenizer", "qwen3"), "directory with tokenizer.json(.gz), tokenizer_config.json and reference-tokens.jsonl")
	dur := fs.Duration("duration", 2*time.Second, "how long to repeat each throughput measurement")
	promptTokens := fs.Int("prompt-tokens", 60000, "size of the chat prompt to preprocess")
	_ = fs.Parse(os.Args[1:])
	if err := tokenizerbench.Run(*dir, *dur, *promptTokens); err != nil {
		fmt.Fprintln(os.Stderr, "tokenizer-bench:", err)
		os.Exit(1)
	}
}
