package frontend

import (
	"strconv"
	"unicode/utf8"

	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// A streamed answer is one chunk per token batch, and encoding/json's
// reflection over openai.ChatChunk was the largest share of the frontend's
// CPU per chunk. appendTextChunk writes the chunks that carry only text
// (role, content, reasoning_content, finish_reason) directly, byte for byte
// as json.Marshal writes them (chunkjson_internal_test.go holds it to that);
// tool call and log probability chunks still go through json.Marshal.

// textDelta is a text-only chunk: its delta's role and one text field
// (content or reasoning_content, or none), and its finish reason ("" is
// null). It holds no pointers, so building one allocates nothing.
type textDelta struct {
	role   string
	field  string // fieldContent, fieldReasoning or ""
	text   string
	finish string
}

const (
	fieldContent   = "content"
	fieldReasoning = "reasoning_content"
)

// chatDelta is d as the chunk types have it.
func (d textDelta) chatDelta() (openai.ChatDelta, *string) {
	cd := openai.ChatDelta{Role: d.role}
	switch d.field {
	case fieldContent:
		cd.Content = &d.text
	case fieldReasoning:
		cd.ReasoningContent = &d.text
	}
	if d.finish == "" {
		return cd, nil
	}
	return cd, &d.finish
}

// appendTextChunk appends the JSON of the chunk d is, as json.Marshal
// writes c.chunk(d.chatDelta()).
func (c *chatSink) appendTextChunk(b []byte, d textDelta) []byte {
	if c.prefix == nil {
		// What every chunk of this choice starts with.
		p := make([]byte, 0, 96+len(c.id)+len(c.model)+len(c.fingerprint)) // the fixed parts fit in 96
		p = append(p, `{"id":`...)
		p = appendJSONString(p, c.id)
		p = append(p, `,"object":"chat.completion.chunk","created":`...)
		p = strconv.AppendInt(p, c.created, 10)
		p = append(p, `,"model":`...)
		p = appendJSONString(p, c.model)
		p = append(p, `,"system_fingerprint":`...)
		p = appendJSONString(p, c.fingerprint)
		p = append(p, `,"choices":[{"index":`...)
		p = strconv.AppendInt(p, int64(c.index), 10)
		c.prefix = append(p, `,"delta":{`...)
	}
	b = append(b, c.prefix...)
	if d.role != "" {
		b = appendJSONString(append(b, `"role":`...), d.role)
		if d.field != "" {
			b = append(b, ',')
		}
	}
	if d.field != "" {
		b = append(append(append(b, '"'), d.field...), `":`...)
		b = appendJSONString(b, d.text)
	}
	b = append(b, `},"finish_reason":`...)
	if d.finish == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, d.finish)
	}
	return append(b, `,"logprobs":null}]}`...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes strings: <, >
// and & escaped for HTML, control characters as \n, \r, \t, \b, \f or
// \u00XX, invalid UTF-8 as \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
