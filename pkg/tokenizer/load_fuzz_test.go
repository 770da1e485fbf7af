package tokenizer

import (
	"errors"
	"strings"
	"testing"
)

// FuzzLoadReader: a tokenizer.json comes from a worker (the frontend
// fetches it from the object store), so LoadReader must refuse what it
// cannot use with ErrInvalid or ErrUnsupported, never panic; a tokenizer
// it builds encodes to ids in its vocabulary and decodes them again.
func FuzzLoadReader(f *testing.F) {
	merges := []string{"Ġ w", "Ġw o", "H e", "He l", "1 2"}
	added := []map[string]any{{"id": 1000, "content": "<sep>", "special": true, "lstrip": true}, {"id": 1001, "content": "fine", "normalized": true, "single_word": true}}
	gpt2 := `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`
	for _, c := range [][2]string{
		{"null", gpt2},
		{`{"type":"Sequence","normalizers":[{"type":"NFKC"}]}`, `{"type":"ByteLevel","add_prefix_space":true,"use_regex":false}`},
		{`{"type":"NFC"}`, `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\d{2}|\\s?\\p{L}+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]}`},
		{"null", `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"."},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]}`},
	} {
		f.Add(syntheticJSON(f, merges, added, c[0], c[1]))
	}
	f.Add(`{"pre_tokenizer":` + gpt2 + `,"decoder":` + gpt2 + `,"model":{"type":"BPE","vocab":{}}}`)
	f.Add("\x1f\x8bnot gzip")
	f.Fuzz(func(t *testing.T, js string) {
		tok, err := LoadReader(strings.NewReader(js))
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("LoadReader = %v; want ErrInvalid or ErrUnsupported", err)
			}
			return
		}
		ids := tok.Encode("Hello world 12 <sep> fine ﬁ 日本")
		for _, id := range ids {
			if int(id) >= tok.VocabSize() {
				t.Fatalf("Encode gave id %d of a vocabulary of %d", id, tok.VocabSize())
			}
		}
		_ = tok.Decode(ids)
		_ = tok.DecodeSkipSpecial(ids)
	})
}

// FuzzParseConfig: a tokenizer_config.json comes from a worker too.
// ParseConfig refuses what it cannot read with ErrInvalid, never panics.
func FuzzParseConfig(f *testing.F) {
	f.Add(`{"bos_token":{"content":"<s>"},"eos_token":"</s>","add_bos_token":true,"chat_template":"{{ messages }}"}`)
	f.Add(`{"chat_template":[{"name":"tool_use","template":"t"},{"name":"default","template":"d"}]}`)
	f.Add(`{"chat_template": 3}`)
	f.Add(`{"bos_token": null, "chat_template": [{"name": 1}]}`)
	f.Fuzz(func(t *testing.T, js string) {
		if _, err := ParseConfig([]byte(js)); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseConfig = %v; want ErrInvalid", err)
		}
	})
}
