package reasoning

import (
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name, parser, text string
		reasoning, answer  string
	}{
		{"qwen3 think then answer", Qwen3, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.", "The answer is 4."},
		{"qwen3 leading whitespace", Qwen3, "\n<think>a\n\nb</think>c", "a\n\nb", "c"},
		{"qwen3 without think is content", Qwen3, "  plain </think> text", "", "  plain </think> text"},
		{"qwen3 empty think", Qwen3, "<think>\n\n</think>\n\nHi", "", "Hi"},
		{"qwen3 unclosed think stays reasoning", Qwen3, "<think>\nhmm", "hmm", ""},
		{"deepseek without open tag", DeepSeekR1, "reasoning here</think>answer", "reasoning here", "answer"},
		{"deepseek with open tag", DeepSeekR1, "<think>r</think>\na", "r", "a"},
		{"deepseek unclosed is reasoning", DeepSeekR1, "all thinking", "all thinking", ""},
		{"none", None, "<think>x</think>y", "", "<think>x</think>y"},
		{"empty", Qwen3, "", "", ""},
		{"whitespace only", Qwen3, " \n", "", " \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, a, err := Split(tc.parser, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if r != tc.reasoning || a != tc.answer {
				t.Errorf("Split = %q, %q; want %q, %q", r, a, tc.reasoning, tc.answer)
			}
			for step := 1; step <= 4; step++ {
				if sr, sa := streamed(t, tc.parser, tc.text, step); sr != r || sa != a {
					t.Errorf("streamed by %d: %q, %q; whole: %q, %q", step, sr, sa, r, a)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, n := range append(Names(), "") {
		if err := Validate(n); err != nil {
			t.Errorf("Validate(%q) = %v", n, err)
		}
	}
	if _, err := New("granite"); err == nil || !strings.Contains(err.Error(), "deepseek_r1") {
		t.Errorf("New(granite) = %v, want an error naming the valid values", err)
	}
}

func streamed(t testing.TB, parser, text string, step int) (string, string) {
	p, err := New(parser)
	if err != nil {
		t.Fatal(err)
	}
	var r, a strings.Builder
	for i := 0; i < len(text); i += step {
		x, y := p.Add(text[i:min(i+step, len(text))])
		r.WriteString(x)
		a.WriteString(y)
	}
	x, y := p.Flush()
	r.WriteString(x)
	a.WriteString(y)
	return r.String(), a.String()
}

// FuzzParser checks that any split of a text parses as the whole does, that
// no text is invented, and that text without <think> is all content (qwen3).
func FuzzParser(f *testing.F) {
	f.Add("<think>\nx\n</think>\n\ny", uint8(1))
	f.Add(" <thi", uint8(2))
	f.Add("<think></think></think><think>", uint8(3))
	f.Fuzz(func(t *testing.T, text string, step uint8) {
		for _, name := range []string{Qwen3, DeepSeekR1} {
			r, a, err := Split(name, text)
			if err != nil {
				t.Fatal(err)
			}
			if sr, sa := streamed(t, name, text, int(step%16)+1); sr != r || sa != a {
				t.Fatalf("%s split by %d: %q, %q; whole: %q, %q", name, step%16+1, sr, sa, r, a)
			}
			if len(r)+len(a) > len(text) {
				t.Fatalf("%s: %q + %q is longer than %q", name, r, a, text)
			}
			if name == Qwen3 && !strings.Contains(text, openTag) && (r != "" || a != text) {
				t.Fatalf("qwen3 without <think>: %q -> %q, %q", text, r, a)
			}
		}
	})
}

// TestPhase feeds texts piece by piece and checks the phase after each.
func TestPhase(t *testing.T) {
	for _, tc := range []struct {
		name, parser string
		pieces       []string
		want         []Phase
	}{
		{"qwen3 think then answer", Qwen3, []string{"<th", "ink>", "hmm", "</think>", "\n\n", "Hi"},
			[]Phase{Undecided, Thinking, Thinking, Answered, Answered, Answered}},
		{"qwen3 all in one piece", Qwen3, []string{"<think>a</think>b"}, []Phase{Answered}},
		{"qwen3 plain", Qwen3, []string{" ", "Hi", "<think>"}, []Phase{Undecided, Plain, Plain}},
		{"deepseek starts thinking", DeepSeekR1, []string{"r", "</think>", "a"}, []Phase{Thinking, Answered, Answered}},
		{"none", None, []string{"<think>x"}, []Phase{Plain}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.parser)
			if err != nil {
				t.Fatal(err)
			}
			for i, piece := range tc.pieces {
				p.Add(piece)
				if got := p.Phase(); got != tc.want[i] {
					t.Fatalf("after %q: phase %d, want %d", strings.Join(tc.pieces[:i+1], ""), got, tc.want[i])
				}
			}
		})
	}
}
