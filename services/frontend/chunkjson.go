package frontend

import (
	"strconv"
	"unicode/utf8"
)

// A streamed answer is one chunk per token batch, and encoding/json's
// reflection over chatChunk was the largest share of the frontend's CPU per
// chunk. appendTextChunk writes the chunks that carry only text (role,
// content, reasoning_content, finish_reason) directly, byte for byte as
// json.Marshal writes them (chunkjson_test.go holds it to that); tool call
// and log probability chunks still go through json.Marshal.

// appendTextChunk appends the JSON of c.chunk(d, finish), which must carry
// no tool calls and no log probabilities.
func (c *chatSink) appendTextChunk(b []byte, d chatDelta, finish *string) []byte {
	if c.prefix == nil {
		// What every chunk of this choice starts with.
		p := []byte(`{"id":`)
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
	sep := false
	field := func(b []byte, name, v string) []byte {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(append(append(b, '"'), name...), `":`...)
		return appendJSONString(b, v)
	}
	if d.Role != "" {
		b = field(b, "role", d.Role)
	}
	if d.Content != nil {
		b = field(b, "content", *d.Content)
	}
	if d.ReasoningContent != nil {
		b = field(b, "reasoning_content", *d.ReasoningContent)
	}
	b = append(b, `},"finish_reason":`...)
	if finish == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *finish)
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
