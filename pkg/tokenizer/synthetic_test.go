package tokenizer

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// syntheticJSON builds a small tokenizer.json: the 256 byte-level symbols,
// the given merges (as "a b" strings), added tokens and components.
func syntheticJSON(t testing.TB, merges []string, added []map[string]any, normalizer, preTokenizer string) string {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	for _, m := range merges {
		a, b, _ := strings.Cut(m, " ")
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
		}
	}
	model := map[string]any{"type": "BPE", "vocab": vocab, "merges": merges}
	mj, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	aj, err := json.Marshal(added)
	if err != nil {
		t.Fatal(err)
	}
	return `{"added_tokens":` + string(aj) + `,"normalizer":` + normalizer + `,"pre_tokenizer":` + preTokenizer +
		`,"decoder":{"type":"ByteLevel"},"model":` + string(mj) + `}`
}

func loadSynthetic(t testing.TB, js string) *Tokenizer {
	t.Helper()
	tok, err := LoadReader(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// pieceStrings returns each id's raw bytes, to compare token boundaries.
func pieceStrings(tok *Tokenizer, ids []uint32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tok.pieces[id]
	}
	return out
}

func TestSyntheticTokenizers(t *testing.T) {
	merges := []string{"Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d", "H e", "He l", "Hel l", "Hell o", "1 2", "1 1", "Ġ 1", "ï ¬"}
	added := []map[string]any{
		{"id": 1000, "content": "<sep>", "special": true, "lstrip": true, "rstrip": true},
		{"id": 1001, "content": "fine", "special": false, "normalized": true, "single_word": true},
	}
	gpt2 := `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`
	tests := []struct {
		name       string
		normalizer string
		pre        string
		in         string
		want       []string
	}{
		{"gpt2 regex", "null", gpt2, "Hello world 112", []string{"Hello", " world", " 1", "12"}},
		{"gpt2 contraction and spaces", "null", gpt2, "it's  x", []string{"i", "t", "'", "s", " ", " ", "x"}},
		{"prefix space", "null", `{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`, "world", []string{" world"}},
		{"no regex", "null", `{"type":"ByteLevel","use_regex":false}`, "Hello world", []string{"Hello", " world"}},
		{"regexp2 fallback", "null", `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\d{2}|\\s?\\p{L}+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]}`, "1112 world", []string{"11", "12", " world"}},
		{"string split", "null", `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"."},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]}`, "He.llo", []string{"He", ".", "l", "l", "o"}},
		{"NFKC", `{"type":"Sequence","normalizers":[{"type":"NFKC"}]}`, gpt2, "ﬁ", []string{"f", "i"}},
		{"NFC keeps ligature", `{"type":"NFC"}`, gpt2, "ﬁ", []string{"ﬁ"[:2], "ﬁ"[2:]}},
		{"lstrip and rstrip", "null", gpt2, "Hello  <sep>  world", []string{"Hello", "<sep>", "w", "o", "r", "l", "d"}},
		{"normalized added token", `{"type":"NFKC"}`, gpt2, "a ﬁne day", []string{"a", " ", "fine", " ", "d", "a", "y"}},
		{"single word", "null", gpt2, "refined", []string{"r", "e", "f", "i", "n", "e", "d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := loadSynthetic(t, syntheticJSON(t, merges, added, tc.normalizer, tc.pre))
			got := pieceStrings(tok, tok.Encode(tc.in))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) pieces = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestMergesAsPairs(t *testing.T) {
	js := syntheticJSON(t, []string{"H e"}, nil, "null", `{"type":"ByteLevel"}`)
	js = strings.Replace(js, `"merges":["H e"]`, `"merges":[["H","e"]]`, 1)
	tok := loadSynthetic(t, js)
	if got := pieceStrings(tok, tok.Encode("Hex")); !slices.Equal(got, []string{"He", "x"}) {
		t.Errorf("pieces = %q", got)
	}
	bad := strings.Replace(js, `"merges":[["H","e"]]`, `"merges":[["H","e","x"]]`, 1)
	if _, err := LoadReader(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "3 parts") {
		t.Errorf("three-part merge: err = %v", err)
	}
	missing := strings.Replace(js, `"merges":[["H","e"]]`, `"merges":[["H","zz"]]`, 1)
	if _, err := LoadReader(strings.NewReader(missing)); err == nil || !strings.Contains(err.Error(), "missing from the vocab") {
		t.Errorf("unknown merge token: err = %v", err)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := qwen3(t)
	cases := readJSONL[tokenCase](t, "reference-tokens.jsonl")
	errs := make(chan string, len(cases))
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range cases {
				c := cases[(i+w*37)%len(cases)]
				if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
					errs <- c.Text
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	close(errs)
	for text := range errs {
		t.Errorf("concurrent Encode(%q) differs from reference", text)
	}
}
