package tokenizer

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var qwen3Dir = "qwen3"

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// qwen3 loads the Qwen3 tokenizer once per test binary.
func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	qwenOnce.Do(func() {
		qwenTok, qwenErr = Load(filepath.Join(qwen3Dir, "tokenizer.json.gz"))
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

type tokenCase struct {
	Text string   `json:"text"`
	IDs  []uint32 `json:"ids"`
}

func readJSONL[T any](t testing.TB, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join(qwen3Dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestQwen3ReferenceTokens(t *testing.T) {
	tok := qwen3(t)
	cases := readJSONL[tokenCase](t, "reference-tokens.jsonl")
	if len(cases) != 150 {
		t.Fatalf("got %d reference lines, want 150", len(cases))
	}
	matched := 0
	for i, c := range cases {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("line %d %q:\n got %v\nwant %v", i+1, c.Text, got, c.IDs)
			continue
		}
		matched++
		if dec := tok.Decode(got); dec != norm.NFC.String(c.Text) {
			t.Errorf("line %d: Decode(Encode(x)) = %q, want %q", i+1, dec, norm.NFC.String(c.Text))
		}
	}
	t.Logf("%d/%d reference lines match", matched, len(cases))
}

func TestQwen3ReferenceChatIDs(t *testing.T) {
	tok := qwen3(t)
	type chatCase struct {
		Prompt string   `json:"prompt"`
		IDs    []uint32 `json:"ids"`
	}
	for i, c := range readJSONL[chatCase](t, "reference-chat.jsonl") {
		if got := tok.Encode(c.Prompt); !slices.Equal(got, c.IDs) {
			t.Errorf("line %d:\n got %v\nwant %v", i+1, got, c.IDs)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	tok := qwen3(t)
	imStart, _ := tok.TokenID("<|im_start|>")
	imEnd, _ := tok.TokenID("<|im_end|>")
	think, _ := tok.TokenID("<think>")
	nl := tok.Encode("\n")
	tests := []struct {
		name string
		in   string
		want []uint32
	}{
		{"alone", "<|im_start|>", []uint32{imStart}},
		{"adjacent", "<|im_start|><|im_end|>", []uint32{imStart, imEnd}},
		{"non-special added", "<think>", []uint32{think}},
		{"around text", "<|im_start|>\n<|im_end|>", slices.Concat([]uint32{imStart}, nl, []uint32{imEnd})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tok.Encode(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	if !tok.IsSpecial(imEnd) || tok.IsSpecial(think) {
		t.Errorf("IsSpecial: im_end %v think %v", tok.IsSpecial(imEnd), tok.IsSpecial(think))
	}
	// A broken special token is plain text.
	if got := tok.Encode("<|im_start"); slices.Contains(got, imStart) {
		t.Errorf("Encode(%q) = %v contains <|im_start|>", "<|im_start", got)
	}
	ids := tok.Encode("<|im_start|>user\nhi<|im_end|>")
	if got, want := tok.DecodeSkipSpecial(ids), "user\nhi"; got != want {
		t.Errorf("DecodeSkipSpecial = %q, want %q", got, want)
	}
}

func TestStreamDecoder(t *testing.T) {
	tok := qwen3(t)
	texts := []string{"Emoji 😀🚀🔥 and ZWJ 👩‍💻", "日本語のテキスト", "plain ascii", "한국어 문장입니다 ∑∞≤"}
	for _, text := range texts {
		d := tok.NewStreamDecoder(false)
		var b strings.Builder
		for _, id := range tok.Encode(text) {
			delta := d.Add(id)
			if strings.ContainsRune(delta, '\uFFFD') {
				t.Errorf("%q: delta %q contains U+FFFD", text, delta)
			}
			b.WriteString(delta)
		}
		b.WriteString(d.Flush())
		if b.String() != text {
			t.Errorf("stream decode = %q, want %q", b.String(), text)
		}
	}
}

func TestDecodeLossy(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"abc", "abc"},
		{"\xe2\x82", "\uFFFD"},                 // truncated 3-byte sequence: one replacement
		{"\xe2\x82x", "\uFFFDx"},               // truncated, then ASCII
		{"\xff\xfe", "\uFFFD\uFFFD"},           // two invalid bytes
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: ED then two lone continuations
		{"\xf0\x9f\x98", "\uFFFD"},
		{"é\xc3", "é\uFFFD"},
	}
	for _, tc := range tests {
		if got := string(appendLossy(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("appendLossy(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	bytelevel := `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`
	tests := []struct {
		name string
		json string
		want error
		msg  string
	}{
		{"malformed", `{"model": `, ErrInvalid, "decode tokenizer.json"},
		{"not gzip", "\x1f\x8bnot gzip", ErrInvalid, "gzip"},
		{"unigram", `{"pre_tokenizer":` + bytelevel + `,"decoder":` + bytelevel + `,"model":{"type":"Unigram"}}`, ErrUnsupported, `model type Unigram`},
		{"wordpiece", `{"pre_tokenizer":` + bytelevel + `,"decoder":` + bytelevel + `,"model":{"type":"WordPiece","vocab":{"a":0}}}`, ErrUnsupported, `model type WordPiece`},
		{"normalizer", `{"normalizer":{"type":"Lowercase"},"model":{"type":"BPE"}}`, ErrUnsupported, `normalizer type "Lowercase"`},
		{"pre-tokenizer", `{"pre_tokenizer":{"type":"Metaspace"},"model":{"type":"BPE"}}`, ErrUnsupported, `pre_tokenizer type "Metaspace"`},
		{"no pre-tokenizer", `{"model":{"type":"BPE"}}`, ErrUnsupported, "no pre_tokenizer"},
		{"decoder", `{"pre_tokenizer":` + bytelevel + `,"decoder":{"type":"WordPiece"},"model":{"type":"BPE"}}`, ErrUnsupported, `decoder type "WordPiece"`},
		{"bad regex", `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(("},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"decoder":` + bytelevel + `,"model":{"type":"BPE"}}`, ErrInvalid, "compile split pattern"},
		{"empty vocab", `{"pre_tokenizer":` + bytelevel + `,"decoder":` + bytelevel + `,"model":{"type":"BPE","vocab":{}}}`, ErrInvalid, "empty vocab"},
		{"missing bytes", `{"pre_tokenizer":` + bytelevel + `,"decoder":` + bytelevel + `,"model":{"type":"BPE","vocab":{"a":0}}}`, ErrInvalid, "byte-level symbol"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadReader(strings.NewReader(tc.json))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to mention %q", err, tc.msg)
			}
		})
	}
}

func TestLoadDirAndConfig(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"tokenizer.json.gz", "tokenizer_config.json"} {
		raw, err := os.ReadFile(filepath.Join(qwen3Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, cfg, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EOSToken != "<|im_end|>" || cfg.BOSToken != "" || !strings.Contains(cfg.ChatTemplate, "<|im_start|>") {
		t.Errorf("config = eos %q bos %q template %d bytes", cfg.EOSToken, cfg.BOSToken, len(cfg.ChatTemplate))
	}
	if tok.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d, want 151669", tok.VocabSize())
	}
	cfgTests := []struct {
		name, json, bos, tmpl string
	}{
		{"object bos", `{"bos_token":{"content":"<s>"},"chat_template":"x"}`, "<s>", "x"},
		{"named templates", `{"chat_template":[{"name":"tool_use","template":"t"},{"name":"default","template":"d"}]}`, "", "d"},
	}
	for _, tc := range cfgTests {
		c, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.BOSToken != tc.bos || c.ChatTemplate != tc.tmpl {
			t.Errorf("%s: got bos %q template %q", tc.name, c.BOSToken, c.ChatTemplate)
		}
	}
	if _, err := ParseConfig([]byte(`{"chat_template": 3}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("numeric chat_template: err = %v, want ErrInvalid", err)
	}
}

func TestMergeHeapMatchesScan(t *testing.T) {
	tok := qwen3(t)
	sc := new(scratch)
	words := []string{"hello", " internationalization", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "日本語のテキスト中文测试", " 　 ", "Русскийтекстприветмир"}
	for _, w := range words {
		a := make([]uint32, len(w))
		b := make([]uint32, len(w))
		for i := range len(w) {
			a[i] = tok.byteID[w[i]]
			b[i] = tok.byteID[w[i]]
		}
		scan := slices.Clone(tok.mergeScan(a, sc))
		heap := slices.Clone(tok.mergeHeap(b, sc))
		if !slices.Equal(scan, heap) {
			t.Errorf("%q: scan %v heap %v", w, scan, heap)
		}
	}
}

func FuzzEncodeDecode(f *testing.F) {
	tok := qwen3(f)
	for _, c := range readJSONL[tokenCase](f, "reference-tokens.jsonl")[:20] {
		f.Add(c.Text)
	}
	f.Add("<|im_start|>user\n<think>x</think><|im_end|>")
	f.Add("\xff\xfe invalid")
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		got := tok.Decode(ids)
		if utf8Valid(s) && got != norm.NFC.String(s) {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
		d := tok.NewStreamDecoder(false)
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if b.String() != got {
			t.Errorf("stream %q != decode %q", b.String(), got)
		}
	})
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }

// FuzzStreamDecode feeds arbitrary id sequences (three bytes per id) to the
// StreamDecoder: its deltas must add up to Decode's text, and no delta may
// end inside a character.
func FuzzStreamDecode(f *testing.F) {
	tok := qwen3(f)
	f.Add([]byte{0, 0, 1, 0, 1, 0})
	emoji := tok.Encode("😀 日本")
	seed := make([]byte, 0, 3*len(emoji))
	for _, id := range emoji {
		seed = append(seed, byte(id>>16), byte(id>>8), byte(id))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids []uint32
		for i := 0; i+2 < len(data); i += 3 {
			id := uint32(data[i])<<16 | uint32(data[i+1])<<8 | uint32(data[i+2])
			ids = append(ids, id%uint32(tok.VocabSize()+10)) // a few unknown ids too
		}
		d := tok.NewStreamDecoder(false)
		var b strings.Builder
		for _, id := range ids {
			delta := d.Add(id)
			if !utf8.ValidString(delta) {
				t.Fatalf("delta %q is not valid UTF-8", delta)
			}
			b.WriteString(delta)
		}
		b.WriteString(d.Flush())
		if want := tok.Decode(ids); b.String() != want {
			t.Errorf("stream %q != Decode %q", b.String(), want)
		}
	})
}
