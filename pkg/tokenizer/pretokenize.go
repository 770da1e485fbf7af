package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// QwenPattern is the split pattern of the Qwen2 and Qwen3 pre-tokenizers
// (and of several other byte-level BPE models that copied it).
const QwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Llama3Pattern is Llama 3's split pattern: QwenPattern with runs of up to
// three digits instead of single digits.
const Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// GPT2Pattern is the split pattern of GPT-2's byte-level pre-tokenizer, used
// by a ByteLevel pre-tokenizer with use_regex true.
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// splitter finds pre-token boundaries. appendEnds appends to ends the end
// offsets of the consecutive pieces of s, in order; the last is len(s).
// Pieces cover the input without gaps, because Hugging Face's Split with
// behavior Isolated keeps both matches and the text between them.
type splitter interface {
	appendEnds(s string, ends []int) []int
}

// Character classes used by the hand-written scanners.
const (
	clsL  = 1 << iota // \p{L}
	clsN              // \p{N}
	clsS              // \s: Unicode White_Space, as in Rust's regex crate
	clsNL             // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := 0; c < utf8.RuneSelf; c++ {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = clsL
		case unicode.IsNumber(r):
			t[c] = clsN
		case unicode.Is(unicode.White_Space, r):
			t[c] = clsS
		}
		if r == '\r' || r == '\n' {
			t[c] |= clsNL
		}
	}
	return t
}()

// classAt returns the class bits and width of the rune at s[i]. Invalid
// UTF-8 bytes are one-byte runes of no class, like other symbols.
func classAt(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return 0, 1
	}
	return runeClass(r), w
}

func runeClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case unicode.Is(unicode.White_Space, r):
		return clsS
	}
	return 0
}

// contraction returns the length of an English contraction suffix ('s, 't,
// 're, 've, 'm, 'll, 'd) at s[i] (which is '\”), or 0. With fold set it
// matches case-insensitively with Unicode simple case folding, as (?i:...)
// does in Rust's regex (so U+017F LATIN SMALL LETTER LONG S matches s).
func contraction(s string, i int, fold bool) int {
	rest := s[i+1:]
	if len(rest) == 0 {
		return 0
	}
	lower := func(b byte) byte {
		if fold && 'A' <= b && b <= 'Z' {
			return b + ('a' - 'A')
		}
		return b
	}
	switch lower(rest[0]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(rest) >= 2 && lower(rest[1]) == 'e' {
			return 3
		}
	case 'l':
		if len(rest) >= 2 && lower(rest[1]) == 'l' {
			return 3
		}
	}
	// U+017F folds to 's'; U+212A (Kelvin) folds to 'k', which no
	// alternative uses.
	if fold && len(rest) >= 2 && rest[0] == 0xC5 && rest[1] == 0xBF {
		return 3
	}
	return 0
}

// skipClass advances from i over runes whose class intersects mask.
func skipClass(s string, i int, mask uint8) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&mask == 0 {
			break
		}
		i += w
	}
	return i
}

// skipOther advances over runes that are not \s, \p{L} or \p{N}.
func skipOther(s string, i int) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&(clsL|clsN|clsS) != 0 {
			break
		}
		i += w
	}
	return i
}

// whitespaceTail handles \s+(?!\S)|\s+ for a whitespace run s[i:j] that
// follows i: the run minus its last character when a non-space follows it
// and it has more than one character.
func whitespaceTail(s string, i, j int) int {
	if j == len(s) {
		return j
	}
	_, lastW := lastRune(s[i:j])
	if j-lastW > i {
		return j - lastW
	}
	return j
}

func lastRune(s string) (rune, int) {
	r, w := utf8.DecodeLastRuneInString(s)
	return r, w
}

// qwenSplitter is a hand-written matcher for QwenPattern (digits 1) and
// Llama3Pattern (digits 3).
type qwenSplitter struct {
	digits int
}

func (q qwenSplitter) appendEnds(s string, ends []int) []int {
	for i := 0; i < len(s); {
		i = q.next(s, i)
		ends = append(ends, i)
	}
	return ends
}

// next returns the end of the match that starts at s[i].
func (q qwenSplitter) next(s string, i int) int {
	c, w := classAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clsL != 0 {
		return skipClass(s, i+w, clsL)
	}
	if c&(clsNL|clsN) == 0 && i+w < len(s) {
		if c2, _ := classAt(s, i+w); c2&clsL != 0 {
			return skipClass(s, i+w, clsL)
		}
	}
	// \p{N}, or \p{N}{1,3}
	if c&clsN != 0 {
		j := i + w
		for n := 1; n < q.digits && j < len(s); n++ {
			c2, w2 := classAt(s, j)
			if c2&clsN == 0 {
				break
			}
			j += w2
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2&(clsL|clsN|clsS) == 0 {
			start = i + 1
		}
	}
	if c2, _ := classAt(s, start); c2&(clsL|clsN|clsS) == 0 {
		j := skipOther(s, start)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c is whitespace here. \s*[\r\n]+ ends after the run's last \r or \n.
	j := skipClass(s, i, clsS)
	for k := j - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	// \s+(?!\S)|\s+
	return whitespaceTail(s, i, j)
}

// gpt2Splitter is a hand-written matcher for GPT2Pattern.
type gpt2Splitter struct{}

func (g gpt2Splitter) appendEnds(s string, ends []int) []int {
	for i := 0; i < len(s); {
		i = g.next(s, i)
		ends = append(ends, i)
	}
	return ends
}

// next returns the end of the match that starts at s[i].
func (gpt2Splitter) next(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		start = i + 1
	}
	c, w := classAt(s, start)
	switch {
	case start == i+1 && c&clsS != 0:
		// A space followed by whitespace: only the whitespace rules apply.
	case c&clsL != 0:
		return skipClass(s, start+w, clsL)
	case c&clsN != 0:
		return skipClass(s, start+w, clsN)
	case c&clsS == 0:
		return skipOther(s, start)
	}
	j := skipClass(s, i, clsS)
	return whitespaceTail(s, i, j)
}

// regexSplitter matches any pattern with regexp2 (a backtracking engine with
// lookaround, like the fancy-regex crate Hugging Face uses). It is the slow
// path for patterns without a hand-written scanner.
type regexSplitter struct {
	re *regexp2.Regexp
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile split pattern %q: %w", pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

func (r *regexSplitter) appendEnds(s string, ends []int) []int {
	prev := 0
	// A pattern that hits regexp2's backtracking limit leaves the rest
	// of the text as one piece rather than failing the request.
	matches, _ := r.re.FindAllStringIndex(s, -1)
	for _, m := range matches {
		if m[1] <= m[0] || m[0] < prev {
			continue // Hugging Face drops empty matches.
		}
		if m[0] > prev {
			ends = append(ends, m[0])
		}
		ends = append(ends, m[1])
		prev = m[1]
	}
	if prev < len(s) {
		ends = append(ends, len(s))
	}
	return ends
}

// newSplitter returns the fastest splitter for pattern.
func newSplitter(pattern string) (splitter, error) {
	switch pattern {
	case QwenPattern:
		return qwenSplitter{digits: 1}, nil
	case Llama3Pattern:
		return qwenSplitter{digits: 3}, nil
	case GPT2Pattern:
		return gpt2Splitter{}, nil
	}
	return newRegexSplitter(pattern)
}
