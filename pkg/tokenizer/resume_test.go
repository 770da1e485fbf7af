package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// trickyTokenizer has added tokens that overlap, nest, strip whitespace,
// need word boundaries, start with whitespace or letters, and a normalizer
// and prefix space, so that the resume conditions are all exercised.
func trickyTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	merges := []string{"Ġ w", "Ġw o", "Ġwo r", "H e", "He l", "Hel l", "Hell o", "1 2", "Ġ Ġ", "Ċ Ċ", "a b", "ab c", "< |", "| >"}
	added := []map[string]any{
		{"id": 1000, "content": "<|s|>", "special": true},
		{"id": 1001, "content": "<|s|>x", "special": true},
		{"id": 1002, "content": "<|e|>", "special": true, "lstrip": true, "rstrip": true},
		{"id": 1003, "content": "abc", "special": false, "single_word": true},
		{"id": 1004, "content": "\n\n", "special": false},
		{"id": 1005, "content": "s|><", "special": false},
		{"id": 1006, "content": "Hello", "special": false, "normalized": true},
		{"id": 1007, "content": "|>", "special": false},
	}
	return loadSynthetic(t, syntheticJSON(t, merges, added, `{"type":"NFKC"}`,
		`{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`))
}

// fragments build random texts around the tokenizers' added tokens.
var fragments = []string{
	"<|s|>", "<|s|>x", "<|e|>", "abc", "\n\n", "\n", " ", "  ", "\t", "s|><", "Hello", "|>", "<|", "<", "|", ">", "x",
	"ab", "c", "world", " wor", "12", "'s", "é", "ﬁ", "日本", "!", "<|im_start|>", "<|im_end|>", "<|im_", "user\n",
	"assistant\n", "<think>", "</think>", "<tool_call>", "{\"a\": 1}", "  \n", "\r\n", "0", "9",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(fragments[r.IntN(len(fragments))])
	}
	return b.String()
}

// checkResume encodes recorded with marks and, for every mark at which text
// resumes, checks the resumed ids against text's full encoding. It returns
// how many marks resumed.
func checkResume(t *testing.T, tok *Tokenizer, recorded, text string) int {
	t.Helper()
	ids, marks := tok.AppendEncodeMarks(nil, nil, recorded)
	if want := tok.Encode(recorded); !slices.Equal(ids, want) {
		t.Fatalf("AppendEncodeMarks(%q) = %v, Encode = %v", recorded, ids, want)
	}
	full := tok.Encode(text)
	n := 0
	for _, m := range marks {
		if k := tok.added.longestAt(recorded, m.Offset); ids[m.Tokens] != m.ID || k < 0 || tok.added.tokens[k].id != m.ID {
			t.Fatalf("mark %+v does not point at its token in %q", m, recorded)
		}
		if !tok.Resumes(recorded, text, m) {
			continue
		}
		n++
		got := tok.AppendEncode(slices.Clone(ids[:m.Tokens]), text[m.Offset:])
		if !slices.Equal(got, full) {
			t.Fatalf("resumed at %+v:\nrecorded %q\ntext     %q\ngot  %v\nwant %v", m, recorded, text, got, full)
		}
	}
	return n
}

// TestResumeProperty: across random texts and random continuations of
// their prefixes, every mark Resumes accepts gives exactly the full
// encoding, on the Qwen3 tokenizer and on one with tricky added tokens.
func TestResumeProperty(t *testing.T) {
	for _, tc := range []struct {
		name string
		tok  *Tokenizer
	}{{"qwen3", qwen3(t)}, {"tricky", trickyTokenizer(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(17, 1))
			resumed, marks := 0, 0
			for range 3000 {
				recorded := randomText(r, 1+r.IntN(30))
				cut := r.IntN(len(recorded) + 1)
				text := recorded[:cut] + randomText(r, r.IntN(20))
				_, ms := tc.tok.AppendEncodeMarks(nil, nil, recorded)
				marks += len(ms)
				resumed += checkResume(t, tc.tok, recorded, text)
			}
			// Not vacuous: a good share of the marks resume.
			if resumed < marks/10 {
				t.Fatalf("only %d of %d marks resumed", resumed, marks)
			}
			t.Logf("%d of %d marks resumed", resumed, marks)
		})
	}
}

// TestResumeRefuses lists continuations at which Resumes must say no; for
// the first two, resuming would give wrong ids.
func TestResumeRefuses(t *testing.T) {
	tok := trickyTokenizer(t)
	for _, tc := range []struct {
		name, recorded, text string
		offset               int
		naiveWrong           bool
	}{
		// "s|><" occurs in text across the mark's "|>"; recorded's 'Z'
		// kept it from matching there.
		{"token across the mark", "s|>Z", "s|><", 1, true},
		{"token across the mark, lstrip", "a s|>Z", "a s|><", 3, true},
		// The token at the mark grows: <|s|> becomes <|s|>x.
		{"longer token at the mark", "ab<|s|>y", "ab<|s|>x", 2, false},
		{"different prefix", "ab<|s|>", "ac<|s|>", 2, false},
		{"cut inside the token", "ab<|s|>", "ab<|s", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, marks := tok.AppendEncodeMarks(nil, nil, tc.recorded)
			i := slices.IndexFunc(marks, func(m Mark) bool { return m.Offset == tc.offset })
			if i < 0 {
				t.Fatalf("no mark at %d in %q: %+v", tc.offset, tc.recorded, marks)
			}
			m := marks[i]
			if tok.Resumes(tc.recorded, tc.text, m) {
				t.Fatalf("Resumes(%q, %q, %+v) = true", tc.recorded, tc.text, m)
			}
			if tc.naiveWrong {
				naive := tok.AppendEncode(slices.Clone(ids[:m.Tokens]), tc.text[m.Offset:])
				if slices.Equal(naive, tok.Encode(tc.text)) {
					t.Fatalf("resuming naively gives the right ids %v; the case shows nothing", naive)
				}
			}
		})
	}
}

// FuzzResume: for any recorded text, cut and continuation, resuming at any
// accepted mark equals the full encoding.
func FuzzResume(f *testing.F) {
	f.Add("<|s|>Hello<|e|> world", 7, "x\n\n<|s|>abc")
	f.Add("a<|e|>  b", 2, "s|><|s|>")
	f.Add("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 30, "ok<|im_end|>\n")
	tok := trickyTokenizer(f)
	f.Fuzz(func(t *testing.T, recorded string, cut int, tail string) {
		if len(recorded) > 512 || len(tail) > 512 {
			return
		}
		if cut < 0 || cut > len(recorded) {
			cut = len(recorded)
		}
		checkResume(t, tok, recorded, recorded[:cut]+tail)
	})
}
