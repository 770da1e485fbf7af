package tokenizer

import "unicode/utf8"

// appendLossy appends b to dst with each maximal invalid UTF-8 subpart
// replaced by U+FFFD, as Rust's String::from_utf8_lossy (and so Hugging
// Face's decoders) does.
func appendLossy(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			dst = append(dst, b[i])
			i++
			continue
		}
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			dst = append(dst, b[i:i+w]...)
			i += w
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return dst
}

// seqInfo returns the number of continuation bytes a lead byte needs and
// the valid range of the first one, or need -1 for a byte that cannot
// start a sequence.
func seqInfo(c byte) (need int, lo, hi byte) {
	lo, hi = 0x80, 0xBF
	switch {
	case 0xC2 <= c && c <= 0xDF:
		return 1, lo, hi
	case c == 0xE0:
		return 2, 0xA0, hi
	case c == 0xED:
		return 2, lo, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		return 2, lo, hi
	case c == 0xF0:
		return 3, 0x90, hi
	case 0xF1 <= c && c <= 0xF3:
		return 3, lo, hi
	case c == 0xF4:
		return 3, lo, 0x8F
	}
	return -1, lo, hi
}

// maximalSubpart returns the length of the longest prefix of b that is a
// prefix of some valid UTF-8 sequence, at least 1.
func maximalSubpart(b []byte) int {
	need, lo, hi := seqInfo(b[0])
	i := 1
	for k := 0; k < need && i < len(b); k++ {
		x := b[i]
		if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
			break
		}
		i++
	}
	return i
}

// incompleteTail returns how many trailing bytes of b form the start of a
// valid UTF-8 sequence that more bytes could complete.
func incompleteTail(b []byte) int {
	for p := len(b) - 1; p >= 0 && p >= len(b)-3; p-- {
		c := b[p]
		if c < 0x80 {
			return 0
		}
		if c < 0xC0 {
			continue // continuation byte: look further back for the lead
		}
		need, _, _ := seqInfo(c)
		if need < 0 {
			return 0
		}
		n := len(b) - p
		if n < need+1 && maximalSubpart(b[p:]) == n {
			return n
		}
		return 0
	}
	return 0
}

// StreamDecoder turns generated token ids into text deltas. A character
// split across tokens is held back until it is complete, so no delta ends
// in a broken UTF-8 sequence. It is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
	out         []byte
}

// NewStreamDecoder returns a StreamDecoder; with skipSpecial set, special
// tokens produce no text.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add decodes one more id and returns the text that became complete, which
// may be empty.
func (d *StreamDecoder) Add(id uint32) string {
	if int(id) >= len(d.t.pieces) || (d.skipSpecial && d.t.IsSpecial(id)) {
		return ""
	}
	d.pending = append(d.pending, d.t.pieces[id]...)
	keep := incompleteTail(d.pending)
	ready := len(d.pending) - keep
	if ready == 0 {
		return ""
	}
	d.out = appendLossy(d.out[:0], d.pending[:ready])
	d.pending = append(d.pending[:0], d.pending[ready:]...)
	return string(d.out)
}

// Flush returns the held-back bytes (as U+FFFD when they never completed a
// character) and resets the decoder.
func (d *StreamDecoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	s := string(appendLossy(nil, d.pending))
	d.pending = d.pending[:0]
	return s
}
