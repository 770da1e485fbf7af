package adapter

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	// Type is the event: field; "message" when the event named none.
	Type string
	// Data is the event's data: lines joined with "\n".
	Data string
	// ID is the last event id seen so far (it carries over events).
	ID string
}

// errSSEEventTooLarge is an event whose data passes maxSSEEvent.
var errSSEEventTooLarge = errors.New("server-sent event too large")

// maxSSEEvent bounds one event's data (and one line), so that a broken
// engine cannot make the adapter buffer without end.
const maxSSEEvent = 16 << 20

// sseReader parses a text/event-stream as the WHATWG HTML standard's
// "Parsing an event stream" says: lines end in CRLF, LF or CR; a leading
// BOM is dropped; a line starting with ':' is a comment; "field: value"
// (one space after the colon removed, a line without a colon is a field
// with an empty value); data lines accumulate, joined with "\n", and an
// empty line dispatches the event (none when no data came); event sets the
// type, id the last event id (unless it holds NUL), retry the reconnection
// time (digits only); unknown fields are ignored; an event not ended by an
// empty line when the stream ends is discarded.
type sseReader struct {
	sc     *bufio.Scanner
	first  bool
	lastID string
	// Retry is the last valid retry: field, 0 when none came. The adapter
	// does not reconnect (a generation cannot resume), but keeps what the
	// stream said.
	Retry time.Duration
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSEEvent)
	sc.Split(sseLines())
	return &sseReader{sc: sc, first: true}
}

// sseLines splits at CRLF, LF or CR. A CR at the end of the buffered input
// ends its line at once (an event must not wait for the next byte), and a
// LF right after it is then skipped.
func sseLines() bufio.SplitFunc {
	skipLF := false
	return func(data []byte, atEOF bool) (int, []byte, error) {
		if skipLF && len(data) > 0 {
			skipLF = false
			if data[0] == '\n' {
				return 1, nil, nil
			}
		}
		if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
			if data[i] == '\n' {
				return i + 1, data[:i], nil
			}
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			skipLF = true
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	}
}

// Next returns the next event; io.EOF once the stream has ended.
func (s *sseReader) Next() (sseEvent, error) {
	var data strings.Builder
	hasData := false
	typ := ""
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if s.first {
			s.first = false
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		if len(line) == 0 {
			if !hasData {
				typ = "" // an event without data is not dispatched
				continue
			}
			if typ == "" {
				typ = "message"
			}
			return sseEvent{Type: typ, Data: data.String(), ID: s.lastID}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "data":
			if data.Len()+len(value)+1 > maxSSEEvent {
				return sseEvent{}, errSSEEventTooLarge
			}
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "event":
			typ = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 31); err == nil && isDigits(value) {
				s.Retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
