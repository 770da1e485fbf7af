// Package tokenizer implements Hugging Face byte-level BPE tokenizers
// (tokenizer.json) exactly as the Hugging Face tokenizers library does, so
// that the ids a KV-aware router hashes are the ids the engine caches.
//
// Encoding splits out added and special tokens first (leftmost longest
// match), then normalizes the remaining text (NFC, NFKC, ...), splits it
// into pre-tokens with the model's pattern, maps bytes to the byte-level
// alphabet and merges adjacent symbols by merge rank. The Qwen2/Qwen3 and
// GPT-2 split patterns have hand-written scanners (Go's regexp lacks the
// lookahead they use); any other pattern runs on regexp2. Merged words are
// cached in a bounded, lock-free table.
//
// A Tokenizer is safe for concurrent use. A StreamDecoder is not: use one
// per generated sequence.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/text/unicode/norm"
)

var normForms = map[string]norm.Form{"NFC": norm.NFC, "NFKC": norm.NFKC, "NFD": norm.NFD, "NFKD": norm.NFKD}

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	normalizers    []norm.Form
	split          splitter
	addPrefixSpace bool

	// byteID is the id of each single byte's byte-level symbol.
	byteID [256]uint32
	// merges maps a pair of ids (left<<32 | right) to rank<<32 | merged id.
	merges       map[uint64]uint64
	ignoreMerges bool
	// rawVocab maps raw (not byte-level) token bytes to ids, for
	// ignore_merges and TokenID.
	rawVocab map[string]uint32

	// pieces holds each id's raw bytes as a string ("" for unused ids).
	pieces  []string
	special []bool

	added     *addedSet // added tokens matched on the raw text
	addedNorm *addedSet // added tokens with normalized true, matched after normalization

	cache *wordCache
}

func (t *Tokenizer) buildModel(m *modelJSON) error {
	if m.Type != "BPE" {
		typ := m.Type
		if typ == "" {
			typ = "(missing)"
		}
		return fmt.Errorf("%w: model type %s (supported: BPE)", ErrUnsupported, typ)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return fmt.Errorf("%w: BPE dropout %v", ErrUnsupported, *m.Dropout)
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") || (m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return fmt.Errorf("%w: BPE continuing_subword_prefix or end_of_word_suffix", ErrUnsupported)
	}
	if len(m.Vocab) == 0 {
		return fmt.Errorf("%w: BPE model has an empty vocab", ErrInvalid)
	}
	t.ignoreMerges = m.IgnoreMerges
	maxID := uint32(0)
	for _, id := range m.Vocab {
		maxID = max(maxID, id)
	}
	if maxID >= math.MaxInt32 {
		return fmt.Errorf("%w: vocab id %d out of range", ErrInvalid, maxID)
	}
	t.pieces = make([]string, maxID+1)
	t.rawVocab = make(map[string]uint32, len(m.Vocab))
	for tok, id := range m.Vocab {
		raw := fromByteLevel(tok)
		t.pieces[id] = raw
		t.rawVocab[raw] = id
	}
	for b := range 256 {
		id, ok := m.Vocab[string(byteToRune[b])]
		if !ok {
			return fmt.Errorf("%w: vocab lacks the byte-level symbol for byte %#x", ErrInvalid, b)
		}
		t.byteID[b] = id
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return err
	}
	t.merges = make(map[uint64]uint64, len(pairs))
	for rank, p := range pairs {
		a, okA := m.Vocab[p[0]]
		b, okB := m.Vocab[p[1]]
		c, okC := m.Vocab[p[0]+p[1]]
		if !okA || !okB || !okC {
			return fmt.Errorf("%w: merge %d (%q %q) uses a token missing from the vocab", ErrInvalid, rank, p[0], p[1])
		}
		key := uint64(a)<<32 | uint64(b)
		if _, dup := t.merges[key]; !dup {
			t.merges[key] = uint64(rank)<<32 | uint64(c)
		}
	}
	return nil
}

// parseMerges accepts both ["a b", ...] and [["a", "b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, fmt.Errorf("%w: merges are not a list", ErrInvalid)
	}
	// Peek at the first element rather than trying one form and then the
	// other: each attempt scans the whole (multi-megabyte) array.
	trimmed := bytes.TrimLeft(raw[1:], " \t\r\n")
	var strs []string
	if len(trimmed) > 0 && trimmed[0] == '"' {
		if err := json.Unmarshal(raw, &strs); err != nil {
			return nil, fmt.Errorf("%w: merges: %w", ErrInvalid, err)
		}
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" {
				return nil, fmt.Errorf("%w: merge %d %q is not two space-separated tokens", ErrInvalid, i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("%w: merges are neither strings nor pairs: %w", ErrInvalid, err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%w: merge %d has %d parts, want 2", ErrInvalid, i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

func (t *Tokenizer) buildAdded(tokens []addedTokenJSON) error {
	var raw, normalized []addedToken
	for _, a := range tokens {
		if a.Content == "" {
			return fmt.Errorf("%w: added token %d has empty content", ErrInvalid, a.ID)
		}
		if a.ID >= math.MaxInt32 {
			return fmt.Errorf("%w: added token id %d out of range", ErrInvalid, a.ID)
		}
		for int(a.ID) >= len(t.pieces) {
			t.pieces = append(t.pieces, "")
		}
		// Hugging Face's ByteLevel decoder maps an added token through the
		// byte-level alphabet too when all its characters belong to it.
		t.pieces[a.ID] = fromByteLevel(a.Content)
		if a.Special {
			for len(t.special) <= int(a.ID) {
				t.special = append(t.special, false)
			}
			t.special[a.ID] = true
		}
		tok := addedToken{id: a.ID, content: a.Content, lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord}
		if a.Normalized {
			tok.content = t.normalize(a.Content)
			normalized = append(normalized, tok)
		} else {
			raw = append(raw, tok)
		}
	}
	t.added = newAddedSet(raw)
	t.addedNorm = newAddedSet(normalized)
	for _, a := range tokens {
		if _, ok := t.rawVocab[a.Content]; !ok {
			t.rawVocab[a.Content] = a.ID
		}
	}
	return nil
}

// VocabSize returns one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// TokenID returns the id of the token whose text is s (an added token's
// content, or a vocab token's raw text).
func (t *Tokenizer) TokenID(s string) (uint32, bool) {
	id, ok := t.rawVocab[s]
	return id, ok
}

// IsSpecial reports whether id is a special added token (such as
// <|im_end|>), which DecodeSkipSpecial omits.
func (t *Tokenizer) IsSpecial(id uint32) bool {
	return int(id) < len(t.special) && t.special[id]
}

func (t *Tokenizer) normalize(s string) string {
	for _, f := range t.normalizers {
		if !f.IsNormalString(s) {
			s = f.String(s)
		}
	}
	return s
}

// scratch holds the per-call buffers of Encode.
type scratch struct {
	ends  []int
	ids   []uint32
	ranks []uint64
	syms  []symbol
	heap  []mergeItem
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Encode returns the token ids of text, without adding special tokens
// (add_special_tokens false). Added and special tokens that occur in text
// are recognised and encoded as their ids.
func (t *Tokenizer) Encode(text string) []uint32 {
	return t.AppendEncode(make([]uint32, 0, len(text)/3+4), text)
}

// AppendEncode appends the token ids of text to dst and returns the
// extended slice.
func (t *Tokenizer) AppendEncode(dst []uint32, text string) []uint32 {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	t.added.split(text, func(seg string, _ int, tok *addedToken) {
		if tok != nil {
			dst = append(dst, tok.id)
			return
		}
		dst = t.encodeText(dst, seg, sc)
	})
	return dst
}

// encodeText encodes a segment that contains no raw-matched added token.
func (t *Tokenizer) encodeText(dst []uint32, text string, sc *scratch) []uint32 {
	text = t.normalize(text)
	if t.addPrefixSpace && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	if t.addedNorm.empty() {
		return t.encodePieces(dst, text, sc)
	}
	t.addedNorm.split(text, func(seg string, _ int, tok *addedToken) {
		if tok != nil {
			dst = append(dst, tok.id)
			return
		}
		dst = t.encodePieces(dst, seg, sc)
	})
	return dst
}

func (t *Tokenizer) encodePieces(dst []uint32, text string, sc *scratch) []uint32 {
	sc.ends = t.split.appendEnds(text, sc.ends[:0])
	prev := 0
	for _, e := range sc.ends {
		dst = t.bpe(dst, text[prev:e], sc)
		prev = e
	}
	return dst
}

// Decode returns the text of ids, special tokens included. Invalid UTF-8
// (a sequence cut inside a character) becomes U+FFFD, as in Hugging Face.
// Unknown ids are ignored.
func (t *Tokenizer) Decode(ids []uint32) string {
	return t.decode(ids, false)
}

// DecodeSkipSpecial is Decode with special tokens omitted
// (skip_special_tokens true).
func (t *Tokenizer) DecodeSkipSpecial(ids []uint32) string {
	return t.decode(ids, true)
}

func (t *Tokenizer) decode(ids []uint32, skipSpecial bool) string {
	n := 0
	for _, id := range ids {
		if int(id) < len(t.pieces) {
			n += len(t.pieces[id])
		}
	}
	buf := make([]byte, 0, n)
	for _, id := range ids {
		if int(id) >= len(t.pieces) || (skipSpecial && t.IsSpecial(id)) {
			continue
		}
		buf = append(buf, t.pieces[id]...)
	}
	return string(appendLossy(nil, buf))
}

// cacheSlots is the number of entries of the merged-word cache (a power of
// two). Words are short, so this bounds the cache to a few MiB.
const cacheSlots = 1 << 16

// maxCachedWord is the longest word (in bytes) the cache keeps.
const maxCachedWord = 64

type cacheEntry struct {
	word string
	ids  []uint32
}

// wordCache is a direct-mapped, lock-free cache from a pre-token's bytes to
// its ids. A colliding word replaces the previous entry, which bounds its
// size without eviction bookkeeping.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cacheEntry]
}

func newWordCache(n int) *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[cacheEntry], n)}
}

func (c *wordCache) slot(word string) *atomic.Pointer[cacheEntry] {
	return &c.slots[maphash.String(c.seed, word)&uint64(len(c.slots)-1)]
}
