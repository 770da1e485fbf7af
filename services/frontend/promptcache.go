package frontend

import (
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// The chat prefix cache.
//
// A chat client re-sends the whole conversation every turn, so the prompt
// of turn n+1 starts with the prompt of turn n. The cache keeps each chat
// prompt's rendered text, ids and the tokenizer's marks (the added tokens
// where its encoding split), indexed by a hash of every prefix of its
// messages. The next turn still renders its template (cheap), then finds
// the entry of the longest message prefix it shares, and encodes only the
// text after the last mark at which the tokenizer proves that the encoding
// of the new text splits (tokenizer.Resumes): the ids are exactly those of a
// full encoding. The hashes only pick a candidate; what is reused is decided
// by comparing the texts byte for byte, so a hash collision costs a miss,
// never a wrong id.
//
// Memory is bounded by a byte budget (--chat-prefix-cache-bytes), least
// recently used entries first. An entry that a longer one supersedes (every
// message prefix of it now points to the newer entry) is dropped at once,
// so a conversation holds about one prompt's worth of memory, not one per
// turn.

// promptCache is the chat prefix cache, shared by every model (an entry
// belongs to one assets, which is checked).
type promptCache struct {
	budget int64
	seed   maphash.Seed

	mu    sync.Mutex
	used  int64
	index map[uint64]*promptEntry
	// head is the most recently used entry, tail the least; entries link
	// through prev/next.
	head, tail *promptEntry

	lookups      *prometheus.CounterVec // result: hit, miss
	hits, misses prometheus.Counter
	reused       prometheus.Counter
	encoded      prometheus.Counter
	evicted      prometheus.Counter
	bytes        prometheus.Gauge
}

// promptEntry is one cached prompt. Its text, ids and marks never change
// after it is made, so they are read without the lock.
type promptEntry struct {
	a     *preprocess.Assets
	text  string
	ids   []uint32
	marks []tokenizer.Mark
	keys  []uint64
	refs  int // index keys that point to this entry
	size  int64

	prev, next *promptEntry
}

// Per-entry bookkeeping the byte budget counts besides text, ids and marks.
const (
	promptEntryOverhead = 160
	promptKeyOverhead   = 48 // a map slot plus the key in keys
)

func newPromptCache(budget int64, reg prometheus.Registerer) *promptCache {
	c := &promptCache{budget: budget, seed: maphash.MakeSeed(), index: map[uint64]*promptEntry{},
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_chat_prefix_cache_lookups_total",
			Help: "Chat prompts looked up in the chat prefix cache, by result: hit (a cached prefix's tokens were reused) or miss.",
		}, []string{"result"}),
		reused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_frontend_chat_prefix_cache_reused_tokens_total",
			Help: "Prompt tokens taken from the chat prefix cache instead of being tokenized again.",
		}),
		encoded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_frontend_chat_prefix_cache_encoded_tokens_total",
			Help: "Chat prompt tokens that were tokenized (the part no cached prefix covered).",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_frontend_chat_prefix_cache_evictions_total",
			Help: "Entries dropped from the chat prefix cache to stay within its byte budget.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_frontend_chat_prefix_cache_bytes",
			Help: "Bytes held by the chat prefix cache (rendered text, token ids and bookkeeping).",
		}),
	}
	c.hits, c.misses = c.lookups.WithLabelValues("hit"), c.lookups.WithLabelValues("miss")
	if reg != nil {
		reg.MustRegister(c.lookups, c.reused, c.encoded, c.evicted, c.bytes)
	}
	return c
}

// keys returns the index keys of a chat prompt: keys[k] hashes everything
// the template reads besides the messages (tools, template arguments, the
// model's assets) and messages[:k+1].
func (c *promptCache) keys(a *preprocess.Assets, msgs []chattemplate.Message, tools []json.RawMessage, extra map[string]any) []uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], a.ID())
	h.Write(b[:])
	for _, t := range tools {
		writeField(&h, string(t))
	}
	if len(extra) > 0 {
		if raw, err := json.Marshal(extra); err == nil {
			writeField(&h, string(raw))
		}
	}
	prev := h.Sum64()
	out := make([]uint64, len(msgs))
	for i, m := range msgs {
		h.Reset()
		binary.LittleEndian.PutUint64(b[:], prev)
		h.Write(b[:])
		writeField(&h, m.Role)
		writeField(&h, m.Content)
		if m.ReasoningContent != nil {
			writeField(&h, "r"+*m.ReasoningContent)
		}
		writeField(&h, m.Name)
		writeField(&h, m.ToolCallID)
		for _, tc := range m.ToolCalls {
			writeField(&h, tc.ID)
			writeField(&h, tc.Type)
			writeField(&h, tc.Function.Name)
			writeField(&h, string(tc.Function.Arguments))
		}
		prev = h.Sum64()
		out[i] = prev
	}
	return out
}

// writeField writes s with its length, so that field boundaries count.
func writeField(h *maphash.Hash, s string) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
	h.Write(b[:])
	h.WriteString(s)
}

// encode returns the ids of text (a chat prompt of a's model whose message
// prefixes have keys), reusing the ids of the cached prompt that shares the
// longest message prefix where the tokenizer allows it, and caches text.
// The ids are exactly a.Encode(text); the caller must not modify them.
func (c *promptCache) encode(a *preprocess.Assets, keys []uint64, text string) []uint32 {
	var base *promptEntry
	c.mu.Lock()
	for k := len(keys) - 1; k >= 0 && base == nil; k-- {
		if e := c.index[keys[k]]; e != nil && e.a == a {
			base = e
			c.unlink(e) // most recently used
			c.pushFront(e)
		}
	}
	c.mu.Unlock()

	var ids []uint32
	var marks []tokenizer.Mark
	if base != nil {
		if m, ok := resumeAt(a, base, text); ok {
			ids = make([]uint32, m.Tokens, m.Tokens+(len(text)-m.Offset)/3+16)
			copy(ids, base.ids[:m.Tokens])
			marks = make([]tokenizer.Mark, 0, len(base.marks)+8)
			for _, bm := range base.marks {
				if bm.Offset >= m.Offset {
					break
				}
				marks = append(marks, bm)
			}
			start := len(marks)
			ids, marks = a.Tokenizer().AppendEncodeMarks(ids, marks, text[m.Offset:])
			for i := start; i < len(marks); i++ {
				marks[i].Offset += m.Offset
			}
			c.hits.Inc()
			c.reused.Add(float64(m.Tokens))
			c.encoded.Add(float64(len(ids) - m.Tokens))
		}
	}
	if ids == nil {
		ids, marks = a.EncodeMarks(text)
		c.misses.Inc()
		c.encoded.Add(float64(len(ids)))
	}
	ids = ids[:len(ids):len(ids)]
	c.put(&promptEntry{a: a, text: text, ids: ids, marks: marks, keys: keys})
	return ids
}

// resumeAt finds the last mark of base at which text's encoding may resume
// from base's ids.
func resumeAt(a *preprocess.Assets, base *promptEntry, text string) (tokenizer.Mark, bool) {
	if bos := a.Config().BOSToken; a.AddsBOS() && strings.HasPrefix(text, bos) != strings.HasPrefix(base.text, bos) {
		return tokenizer.Mark{}, false
	}
	common := commonPrefix(base.text, text)
	// The marks whose token lies inside the common prefix; the tokenizer
	// decides, from the last one back, where the encoding resumes (it
	// refuses a mark that a token of the new text crosses, which a few
	// steps back always clears).
	n := sort.Search(len(base.marks), func(i int) bool { return base.marks[i].Offset+base.marks[i].Len > common })
	for i := n - 1; i >= 0 && i >= n-4; i-- {
		if a.Tokenizer().Resumes(base.text, text, base.marks[i]) {
			return base.marks[i], true
		}
	}
	return tokenizer.Mark{}, false
}

// commonPrefix returns the length of the longest common prefix of a and b,
// comparing large blocks first (string equality is vectorised).
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for block := 4096; block >= 1; block /= 8 {
		for i+block <= n && a[i:i+block] == b[i:i+block] {
			i += block
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// put caches e as the newest entry of all its keys. An older entry left
// with no key is dropped; then the least recently used entries go until the
// cache fits its budget.
func (c *promptCache) put(e *promptEntry) {
	e.size = promptEntryOverhead + int64(len(e.text)) + 4*int64(cap(e.ids)) + int64(len(e.marks))*int64(32) +
		int64(len(e.keys))*promptKeyOverhead
	if e.size > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range e.keys {
		old := c.index[k]
		if old == e {
			continue
		}
		c.index[k] = e
		e.refs++
		if old != nil {
			if old.refs--; old.refs == 0 {
				c.unlink(old)
			}
		}
	}
	if e.refs == 0 {
		return
	}
	c.pushFront(e)
	for c.used > c.budget && c.tail != nil {
		c.evict(c.tail)
		c.evicted.Inc()
	}
	c.bytes.Set(float64(c.used))
}

func (c *promptCache) pushFront(e *promptEntry) {
	e.prev, e.next = nil, c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
	c.used += e.size
}

func (c *promptCache) unlink(e *promptEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
	c.used -= e.size
}

// evict drops e and the keys that still point to it.
func (c *promptCache) evict(e *promptEntry) {
	for _, k := range e.keys {
		if c.index[k] == e {
			delete(c.index, k)
		}
	}
	e.refs = 0
	c.unlink(e)
}

// stats returns the entry count and bytes held (for tests).
func (c *promptCache) stats() (entries int, used int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.head; e != nil; e = e.next {
		entries++
	}
	return entries, c.used
}
