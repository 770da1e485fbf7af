package frontend

import (
	"net/http"
	"slices"
	"sync"

	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// choiceGroup joins the n choices of one request (OpenAI's n) into one
// response: streamed, their chunks interleave on one event stream, each
// with its index, and the usage chunk and [DONE] follow the last; not
// streamed, one body carries every choice. Usage counts the prompt once and
// the completions of all choices. The first failure is the response's
// error; what other choices write after it is dropped. With n = 1 sinks
// write to the response directly.
type choiceGroup struct {
	n  int
	w  http.ResponseWriter
	rc *http.ResponseController

	mu          sync.Mutex
	wroteHeader bool
	// failed: a choice failed, so no choice ends the response; closed:
	// the response is complete, later writes are dropped.
	failed bool
	closed bool
	ended  int
	usage  openai.Usage
	chat   []openai.ChatChoice
	comp   []openai.CompletionChoice
}

func newChoiceGroup(w http.ResponseWriter, p genParams) *choiceGroup {
	g := &choiceGroup{n: max(p.n, 1), w: w}
	if g.n > 1 {
		// Only choiceWriter flushes through the group; with one choice the
		// sink writes to w itself.
		g.rc = http.NewResponseController(w)
	}
	return g
}

// writer is what one choice's sink writes to.
func (g *choiceGroup) writer() http.ResponseWriter {
	if g.n == 1 {
		return g.w
	}
	return &choiceWriter{g: g, h: http.Header{}}
}

// end records a choice's usage and reports whether it was the last choice
// to end (and nothing failed), with the usage of all choices.
func (g *choiceGroup) end(u openai.Usage) (bool, openai.Usage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.endLocked(u)
}

// endLocked is end with g.mu held.
func (g *choiceGroup) endLocked(u openai.Usage) (bool, openai.Usage) {
	g.ended++
	if g.ended == 1 {
		g.usage = u
	} else {
		g.usage.CompletionTokens += u.CompletionTokens
		g.usage.TotalTokens += u.CompletionTokens
	}
	return g.ended == g.n && !g.failed, g.usage
}

// addChat adds a finished chat choice; it reports whether it was the last,
// and then returns every choice in index order.
func (g *choiceGroup) addChat(c openai.ChatChoice, u openai.Usage) (bool, []openai.ChatChoice, openai.Usage) {
	// One hold for both: the choice that ends last must find every
	// other choice added (a second hold let it answer without one that
	// had ended but not yet been added, and sort under its encoding).
	g.mu.Lock()
	defer g.mu.Unlock()
	last, total := g.endLocked(u)
	g.chat = append(g.chat, c)
	slices.SortFunc(g.chat, func(a, b openai.ChatChoice) int { return a.Index - b.Index })
	return last, g.chat, total
}

// addCompletion is addChat for text completions.
func (g *choiceGroup) addCompletion(c openai.CompletionChoice, u openai.Usage) (bool, []openai.CompletionChoice, openai.Usage) {
	// One hold for both, as in addChat.
	g.mu.Lock()
	defer g.mu.Unlock()
	last, total := g.endLocked(u)
	g.comp = append(g.comp, c)
	slices.SortFunc(g.comp, func(a, b openai.CompletionChoice) int { return a.Index - b.Index })
	return last, g.comp, total
}

// fail reports whether this failure is the first (the one to write).
func (g *choiceGroup) fail() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first := !g.failed
	g.failed = true
	return first
}

// close marks the response complete: what choices still write is dropped.
func (g *choiceGroup) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// started reports whether w is a choice of a response whose header is
// already out (another choice started the stream).
func started(w http.ResponseWriter) bool {
	c, ok := w.(*choiceWriter)
	if !ok {
		return false
	}
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	return c.g.wroteHeader
}

// choiceWriter is one choice's view of the shared response: writes are
// serialised (one SSE event per Write), the header is written once, and
// nothing is written once the group has failed and its error is out.
type choiceWriter struct {
	g *choiceGroup
	h http.Header
}

func (c *choiceWriter) Header() http.Header { return c.h }

func (c *choiceWriter) WriteHeader(code int) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	c.writeHeaderLocked(code)
}

func (c *choiceWriter) writeHeaderLocked(code int) {
	if c.g.wroteHeader {
		return
	}
	c.g.wroteHeader = true
	for k, v := range c.h {
		c.g.w.Header()[k] = v
	}
	c.g.w.WriteHeader(code)
}

func (c *choiceWriter) Write(b []byte) (int, error) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if c.g.closed {
		return len(b), nil
	}
	c.writeHeaderLocked(http.StatusOK)
	return c.g.w.Write(b)
}

// FlushError lets http.ResponseController flush the shared response.
func (c *choiceWriter) FlushError() error {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	return c.g.rc.Flush()
}
