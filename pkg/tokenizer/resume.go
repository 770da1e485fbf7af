package tokenizer

// Resuming an encoding from a cached prefix.
//
// A long chat is re-sent whole every turn, and the prompt of the next turn
// starts with (most of) the prompt of the last one. Its ids cannot simply be
// the cached ids of that prefix followed by the ids of the rest: BPE merges
// and the pre-tokenizer's pattern (with its lookaheads) may join bytes
// across any point of the text, so where a prefix ends is in general not a
// point where the encoding of the longer text splits. One kind of point is:
// the start of an added token (such as <|im_start|>) that the encoding of the
// whole text matched, because added tokens are split out first and every
// segment between them is encoded on its own. A Mark records such a point,
// and Resumes checks, on the new text, the conditions under which the
// encoding of the new text also matches that token there (see Resumes).

// A Mark is a point where an encoding split: the added token ID, Len bytes
// long, matched at byte Offset of the text, and Tokens ids came before it.
type Mark struct {
	Offset, Len, Tokens int
	ID                  uint32
}

// AppendEncodeMarks is AppendEncode that also appends a Mark to marks for
// each added token the encoding matched at which it may resume: every one
// but single_word tokens (whose match depends on the character before it)
// and tokens whose content is not valid UTF-8.
// The marks come in text order.
func (t *Tokenizer) AppendEncodeMarks(dst []uint32, marks []Mark, text string) ([]uint32, []Mark) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	t.added.split(text, func(seg string, at int, tok *addedToken) {
		if tok != nil {
			if tok.resumable {
				marks = append(marks, Mark{Offset: at, Len: len(tok.content), Tokens: len(dst), ID: tok.id})
			}
			dst = append(dst, tok.id)
			return
		}
		dst = t.encodeText(dst, seg, sc)
	})
	return dst, marks
}

// Resumes reports whether the encoding of text is the first m.Tokens ids of
// the encoding of recorded followed by the encoding of text[m.Offset:],
// where m is a Mark that AppendEncodeMarks returned for recorded. (The ids
// before m are in any case only those of recorded's encoding; the caller
// keeps them.)
//
// It holds when:
//   - text and recorded agree up to the end of m's token, so every decision
//     the added-token split made before m looked at the same bytes;
//   - no added token occurs in text starting before m.Offset and ending
//     after it, so no match of text's split can cross m (recorded's cannot
//     either, since its split matched m's token there);
//   - the longest added token at m.Offset in text is m's token, so text's
//     split matches the same token there.
//
// Each segment between added tokens is then normalized, pre-tokenized and
// merged on its own, identically in both texts up to m and in text[m.Offset:]
// after it. The property tests check this against full encodings.
func (t *Tokenizer) Resumes(recorded, text string, m Mark) bool {
	end := m.Offset + m.Len
	if m.Offset < 0 || m.Len <= 0 || end > len(text) || end > len(recorded) || text[:end] != recorded[:end] {
		return false
	}
	s := t.added
	k := s.longestAt(text, m.Offset)
	if k < 0 || s.tokens[k].id != m.ID || len(s.tokens[k].content) != m.Len || !s.tokens[k].resumable {
		return false
	}
	for at := max(0, m.Offset-s.maxLen+1); at < m.Offset; at++ {
		if !s.first[text[at]] {
			continue
		}
		if k := s.longestAt(text, at); k >= 0 && at+len(s.tokens[k].content) > m.Offset {
			return false
		}
	}
	return true
}
