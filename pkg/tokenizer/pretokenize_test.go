package tokenizer

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf8"
)

func pieces(sp splitter, s string) []string {
	var out []string
	prev := 0
	for _, e := range sp.appendEnds(s, nil) {
		out = append(out, s[prev:e])
		prev = e
	}
	return out
}

var splitSeeds = []string{
	"Hello world",
	"I'm sure you're right, they'll see we've done it. I'D SAY HE'S",
	"  leading spaces\n\nand   trailing   ",
	"a\r\n\r\nb \n c\t\td",
	"Numbers: 1234567890 3.14159 -42 1e10",
	"((hello)) \"quoted\" 'single' '''",
	"日本語のテキスト 中文测试 한국어 문장입니다",
	"Русский текст, привет мир",
	"Emoji 😀🚀🔥 and ZWJ 👩‍💻",
	"x\u00a0y\u2003z\u3000w\u0085v\u2028",
	"café naïve ﬁ ſt 'ſ 'S 'LL 'Re",
	"tabs\t\tand\vvertical\fform",
	"  \n  ",
	" ",
	"'",
	"a'",
	" !!!\n\n\nx",
	"def f(x):\n    return x**2  # comment\n",
	"\u0301abc \u0301 \u0301\u0301",
}

func TestSplitterMatchesRegexp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern string
		fast    splitter
	}{
		{"qwen", QwenPattern, qwenSplitter{digits: 1}},
		{"llama3", Llama3Pattern, qwenSplitter{digits: 3}},
		{"gpt2", GPT2Pattern, gpt2Splitter{}},
	} {
		ref, err := newRegexSplitter(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range splitSeeds {
			t.Run(tc.name, func(t *testing.T) {
				want, got := pieces(ref, s), pieces(tc.fast, s)
				if !slices.Equal(want, got) {
					t.Errorf("%q:\n got %q\nwant %q", s, got, want)
				}
			})
		}
	}
}

func TestQwenSplitExamples(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"I'm", []string{"I", "'m"}},
		{"a  b", []string{"a", " ", " b"}},
		{"x\n\n  y", []string{"x", "\n\n", " ", " y"}},
		{"123", []string{"1", "2", "3"}},
		{" ...\n", []string{" ...\n"}},
		{"end  ", []string{"end", "  "}},
	}
	for _, tc := range tests {
		if got := pieces(qwenSplitter{digits: 1}, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzSplitter checks the hand-written scanners against regexp2 running the
// same pattern, on every valid UTF-8 input.
func FuzzSplitter(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add(s)
	}
	qref, err := newRegexSplitter(QwenPattern)
	if err != nil {
		f.Fatal(err)
	}
	gref, err := newRegexSplitter(GPT2Pattern)
	if err != nil {
		f.Fatal(err)
	}
	lref, err := newRegexSplitter(Llama3Pattern)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			// Hugging Face only sees valid UTF-8 (Rust strings).
			return
		}
		if want, got := pieces(qref, s), pieces(qwenSplitter{digits: 1}, s); !slices.Equal(want, got) {
			t.Errorf("qwen %q:\n got %q\nwant %q", s, got, want)
		}
		if want, got := pieces(gref, s), pieces(gpt2Splitter{}, s); !slices.Equal(want, got) {
			t.Errorf("gpt2 %q:\n got %q\nwant %q", s, got, want)
		}
		if want, got := pieces(lref, s), pieces(qwenSplitter{digits: 3}, s); !slices.Equal(want, got) {
			t.Errorf("llama3 %q:\n got %q\nwant %q", s, got, want)
		}
	})
}

// TestSplitterRandom is a deterministic differential test over random
// strings drawn from the characters where the patterns' alternatives meet.
func TestSplitterRandom(t *testing.T) {
	alphabet := []rune("aZ'sStTlLrRevVmMdD 1٣2²\t\r\n\v\u00a0\u0085\u2028\u3000.,!(é\u0301日ſK\U0001F600")
	qref, err := newRegexSplitter(QwenPattern)
	if err != nil {
		t.Fatal(err)
	}
	gref, err := newRegexSplitter(GPT2Pattern)
	if err != nil {
		t.Fatal(err)
	}
	lref, err := newRegexSplitter(Llama3Pattern)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]rune, 0, 24)
	for range 20000 {
		buf = buf[:0]
		for range r.IntN(24) {
			buf = append(buf, alphabet[r.IntN(len(alphabet))])
		}
		s := string(buf)
		if want, got := pieces(qref, s), pieces(qwenSplitter{digits: 1}, s); !slices.Equal(want, got) {
			t.Fatalf("qwen %q:\n got %q\nwant %q", s, got, want)
		}
		if want, got := pieces(gref, s), pieces(gpt2Splitter{}, s); !slices.Equal(want, got) {
			t.Fatalf("gpt2 %q:\n got %q\nwant %q", s, got, want)
		}
		if want, got := pieces(lref, s), pieces(qwenSplitter{digits: 3}, s); !slices.Equal(want, got) {
			t.Fatalf("llama3 %q:\n got %q\nwant %q", s, got, want)
		}
	}
}
