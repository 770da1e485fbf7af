package openai

import (
	"encoding/json"
	"io"
	"net/http"
)

// SSE writes a streamed response as server-sent events: one "data: <JSON>"
// event per chunk and "data: [DONE]" at the end. The zero SSE is ready once
// W is set; the first event writes the status (200) and the event-stream
// headers.
type SSE struct {
	// W is the response the events are written to.
	W http.ResponseWriter
	// Batch, while set, leaves sent events in the server's write buffer
	// (which still writes when full) instead of flushing each: the next
	// event sent with Batch false flushes them all.
	Batch bool

	rc      *http.ResponseController
	started bool
	buf     []byte
}

// Start writes the status and headers of the stream, once.
func (e *SSE) Start() {
	if e.started {
		return
	}
	e.started = true
	h := e.W.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	e.W.WriteHeader(http.StatusOK)
	e.rc = http.NewResponseController(e.W)
}

// Started reports whether Start wrote the stream's headers.
func (e *SSE) Started() bool { return e.started }

// Send writes v as an event's JSON.
func (e *SSE) Send(v any) error {
	f := e.Frame()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.SendFrame(append(f, b...))
}

// Frame starts an event: the caller appends its JSON and passes the result
// to SendFrame. The buffer is the SSE's own, reused by the next Frame.
func (e *SSE) Frame() []byte {
	e.Start()
	if e.buf == nil {
		// One allocation of a typical chunk's size rather than a few
		// growing ones on the first event.
		e.buf = make([]byte, 0, 512)
	}
	return append(e.buf[:0], "data: "...)
}

// SendFrame writes the event b holds and flushes it unless batched.
func (e *SSE) SendFrame(b []byte) error {
	e.buf = append(b, "\n\n"...)
	if _, err := e.W.Write(e.buf); err != nil {
		return err
	}
	if e.Batch {
		return nil
	}
	return e.rc.Flush()
}

// Done writes data: [DONE] and flushes it.
func (e *SSE) Done() error {
	if err := e.Last(); err != nil {
		return err
	}
	return e.rc.Flush()
}

// Last writes data: [DONE] as a response's last event, without a flush: the
// handler returns right after it, and net/http then flushes what is
// buffered together with the chunked body's end, in one write (a flush
// here would cost a write of its own, and a wake-up of the client, for the
// five bytes of that end).
func (e *SSE) Last() error {
	e.Start()
	_, err := io.WriteString(e.W, "data: [DONE]\n\n")
	return err
}
