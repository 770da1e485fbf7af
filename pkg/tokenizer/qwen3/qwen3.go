// Package qwen3 carries the Qwen3 tokenizer (tokenizer.json, gzip-compressed,
// and tokenizer_config.json with its chat template), so that the mocker can
// serve Qwen/Qwen3-0.6B and tests can tokenize without any download. See
// README.md for provenance and licence. The reference-*.jsonl files beside it
// are Hugging Face's own outputs, which the tokenizer tests must match.
package qwen3

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
)

// ModelName is the model these files belong to.
const ModelName = "Qwen/Qwen3-0.6B"

//go:embed tokenizer.json.gz tokenizer_config.json
var files embed.FS

// Files are the tokenizer files' names.
var Files = []string{"tokenizer.json.gz", "tokenizer_config.json"}

// WriteTo writes the tokenizer files into dir and returns their paths.
func WriteTo(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, name := range Files {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("qwen3: %w", err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// ReadFile returns one of the embedded files.
func ReadFile(name string) ([]byte, error) { return files.ReadFile(name) }
