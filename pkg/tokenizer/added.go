package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

type addedToken struct {
	id         uint32
	content    string
	lstrip     bool
	rstrip     bool
	singleWord bool
	// resumable says an encoding may resume at a match of this token (see
	// Resumes): its match does not depend on the character before it, and
	// its content is valid UTF-8, so no rune decoded around it reads past it.
	resumable bool
}

// addedSet finds added tokens in text with leftmost-longest semantics (as
// Hugging Face's Aho-Corasick with MatchKind::LeftmostLongest), using a byte
// trie.
type addedSet struct {
	tokens []addedToken
	nodes  []trieNode
	first  [256]bool // bytes that start some token
	maxLen int       // the longest token's length in bytes
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into tokens, or -1
}

func newAddedSet(tokens []addedToken) *addedSet {
	s := &addedSet{tokens: tokens, nodes: []trieNode{{token: -1}}}
	for i := range tokens {
		tokens[i].resumable = !tokens[i].singleWord && utf8.ValidString(tokens[i].content)
	}
	for i, tok := range tokens {
		n := int32(0)
		for j := 0; j < len(tok.content); j++ {
			c := tok.content[j]
			nx, ok := s.nodes[n].next[c]
			if !ok {
				if s.nodes[n].next == nil {
					s.nodes[n].next = make(map[byte]int32)
				}
				nx = int32(len(s.nodes))
				s.nodes[n].next[c] = nx
				s.nodes = append(s.nodes, trieNode{token: -1})
			}
			n = nx
		}
		if s.nodes[n].token < 0 {
			s.nodes[n].token = int32(i)
		}
		s.first[tok.content[0]] = true
		s.maxLen = max(s.maxLen, len(tok.content))
	}
	return s
}

func (s *addedSet) empty() bool { return len(s.tokens) == 0 }

// longestAt returns the index of the longest token that starts at
// text[i], or -1.
func (s *addedSet) longestAt(text string, i int) int {
	best := -1
	n := int32(0)
	for j := i; j < len(text); j++ {
		nx, ok := s.nodes[n].next[text[j]]
		if !ok {
			break
		}
		n = nx
		if k := s.nodes[n].token; k >= 0 {
			best = int(k)
		}
	}
	return best
}

// wordBoundaries reports whether text[start:end] is not glued to word
// characters on either side (the single_word option).
func wordBoundaries(text string, start, end int) bool {
	if start > 0 {
		if r, _ := utf8.DecodeLastRuneInString(text[:start]); isWordRune(r) {
			return false
		}
	}
	if end < len(text) {
		if r, _ := utf8.DecodeRuneInString(text[end:]); isWordRune(r) {
			return false
		}
	}
	return true
}

// isWordRune approximates \w of Rust's regex crate: alphabetic, marks,
// decimal digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Nl, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

// split calls fn for the consecutive segments of text: plain text (tok
// nil, never empty) and added tokens (tok set, at the byte offset where its
// content matched). Whitespace swallowed by lstrip/rstrip belongs to no
// segment.
func (s *addedSet) split(text string, fn func(seg string, at int, tok *addedToken)) {
	if s.empty() {
		if text != "" {
			fn(text, 0, nil)
		}
		return
	}
	pos := 0 // start of the pending plain text
	for i := 0; i < len(text); i++ {
		if !s.first[text[i]] {
			continue
		}
		k := s.longestAt(text, i)
		if k < 0 {
			continue
		}
		tok := &s.tokens[k]
		start, end := i, i+len(tok.content)
		if tok.singleWord && !wordBoundaries(text, start, end) {
			// Hugging Face discards the match and searches on after it,
			// leaving its bytes to the surrounding text.
			i = end - 1
			continue
		}
		if tok.lstrip {
			for start > pos {
				r, w := utf8.DecodeLastRuneInString(text[pos:start])
				if !unicode.Is(unicode.White_Space, r) {
					break
				}
				start -= w
			}
		}
		if tok.rstrip {
			for end < len(text) {
				r, w := utf8.DecodeRuneInString(text[end:])
				if !unicode.Is(unicode.White_Space, r) {
					break
				}
				end += w
			}
		}
		if start > pos {
			fn(text[pos:start], pos, nil)
		}
		fn(tok.content, i, tok)
		pos = end
		i = end - 1
	}
	if pos < len(text) {
		fn(text[pos:], pos, nil)
	}
}
