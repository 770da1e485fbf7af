// Package toolcall finds the tool (function) calls in a model's generated
// text, for the frontend to return them as OpenAI tool_calls instead of
// plain text. Which format a model writes is named by its worker in the
// model card (--tool-call-parser), as in vLLM, SGLang and Dynamo.
//
// The parsers:
//   - hermes and qwen3: each call is a JSON object {"name": ..., "arguments":
//     {...}} between <tool_call> and </tool_call> (Hermes 2 Pro, Qwen2.5,
//     Qwen3). "parameters" is accepted for "arguments", and arguments given as
//     a JSON string holding an object are unwrapped.
//   - none (or empty): no parsing; every byte is content.
//
// A Parser works on a stream of text deltas: Add returns what can be decided
// so far, holding back a tail that may still become a tag, and Flush returns
// the rest at the end. Text of a call is held until its closing tag, so a
// call is returned whole, with its arguments as compact JSON. A call whose
// JSON does not parse, or that is still open when the text ends, is returned
// as content, byte for byte: malformed model output is never an error and
// never lost. Whitespace between a call and the content next to it (the
// newlines models put around tags) is dropped; content without calls is
// returned exactly. In streaming mode (StreamArguments, stream.go) a call's
// name and argument fragments come as they are generated instead.
package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Parser names, as worker flags and model cards spell them.
const (
	None   = "none"
	Hermes = "hermes"
	Qwen3  = "qwen3"
)

// Names lists the valid parser names.
func Names() []string { return []string{None, Hermes, Qwen3} }

// ErrUnknownParser is returned by New and Validate for a name not in Names.
var ErrUnknownParser = errors.New("unknown tool call parser")

// Validate reports whether name is a parser; the empty name means none.
func Validate(name string) error {
	switch name {
	case "", None, Hermes, Qwen3:
		return nil
	}
	return fmt.Errorf("%w %q: valid values are %s", ErrUnknownParser, name, strings.Join(Names(), ", "))
}

// Call is one parsed tool call.
type Call struct {
	// Name is the function's name.
	Name string
	// Arguments is a JSON object, compact.
	Arguments string
}

// Event is one piece of parsed output: content text, one whole call, or
// in streaming mode (StreamArguments) a piece of a call.
type Event struct {
	// Text is content, when Call is nil and Kind is Content.
	Text string
	// Call is a whole tool call (Kind Content). In streaming mode, a call
	// whose header did not have the streamable form comes whole too.
	Call *Call
	// Kind tells the streaming pieces apart.
	Kind Kind
	// Name is the function of a CallBegin; Arguments the fragment of an
	// ArgumentsDelta.
	Name, Arguments string
}

// Kind is the kind of an Event.
type Kind int

// Event kinds. Content is text or a whole call; the others come only in
// streaming mode, in the order CallBegin, ArgumentsDelta..., CallEnd.
const (
	Content Kind = iota
	CallBegin
	ArgumentsDelta
	CallEnd
)

const (
	openTag  = "<tool_call>"
	closeTag = "</tool_call>"
)

// Parser parses one generation's text. It is not safe for concurrent use.
type Parser struct {
	enabled bool
	// buf is text not yet decided: a possible tag prefix outside a call,
	// or the body of an open call.
	buf    strings.Builder
	inCall bool
	// ws is trailing whitespace of content, held so that whitespace right
	// before a call can be dropped.
	ws string
	// afterCall drops whitespace that follows a call.
	afterCall bool
	calls     int

	// stream is streaming mode; sc the state of the open call in it.
	stream bool
	sc     callStream
}

// New returns a parser of the named format; "" and none pass text through.
func New(name string) (*Parser, error) {
	if err := Validate(name); err != nil {
		return nil, err
	}
	return &Parser{enabled: name != "" && name != None}, nil
}

// Calls is the number of calls returned so far.
func (p *Parser) Calls() int { return p.calls }

// Add parses the next piece of text.
func (p *Parser) Add(text string) []Event {
	if !p.enabled {
		if text == "" {
			return nil
		}
		return []Event{{Text: text}}
	}
	p.buf.WriteString(text)
	return p.scan(nil, false)
}

// Flush returns what is left at the end of the text.
func (p *Parser) Flush() []Event {
	if !p.enabled {
		return nil
	}
	return p.scan(nil, true)
}

// scan decides as much of buf as it can.
func (p *Parser) scan(out []Event, final bool) []Event {
	s := p.buf.String()
	p.buf.Reset()
	for {
		if p.inCall && p.stream {
			var done bool
			if out, s, done = p.streamCall(out, s, final); !done {
				return out
			}
			continue
		}
		if p.inCall {
			end := strings.Index(s, closeTag)
			if end < 0 {
				if final {
					// An open call at the end is content, tag and all.
					p.inCall = false
					return p.content(out, openTag+s, true)
				}
				p.buf.WriteString(s)
				return out
			}
			body := s[:end]
			s = s[end+len(closeTag):]
			p.inCall = false
			if c, ok := parseCall(body); ok {
				p.ws = "" // whitespace before a call is dropped
				p.calls++
				p.afterCall = true
				out = append(out, Event{Call: &c})
			} else {
				out = p.content(out, openTag+body+closeTag, false)
			}
			continue
		}
		start := strings.Index(s, openTag)
		if start >= 0 {
			out = p.content(out, s[:start], false)
			s = s[start+len(openTag):]
			p.inCall = true
			continue
		}
		keep := 0
		if !final {
			keep = partialSuffix(s, openTag)
		}
		out = p.content(out, s[:len(s)-keep], final)
		p.buf.WriteString(s[len(s)-keep:])
		return out
	}
}

// content emits text as content, holding its trailing whitespace until it
// is known not to precede a call.
func (p *Parser) content(out []Event, text string, final bool) []Event {
	if p.afterCall {
		trimmed := strings.TrimLeft(text, " \t\r\n")
		if trimmed == "" && !final {
			return out
		}
		text = trimmed
		if text != "" {
			p.afterCall = false
		}
	}
	if text == "" {
		if final && p.ws != "" && !p.afterCall {
			out = appendText(out, p.ws)
			p.ws = ""
		}
		return out
	}
	body := strings.TrimRight(text, " \t\r\n")
	tail := text[len(body):]
	if body != "" {
		out = appendText(out, p.ws+body)
		p.ws = ""
	}
	p.ws += tail
	if final && p.ws != "" {
		out = appendText(out, p.ws)
		p.ws = ""
	}
	return out
}

func appendText(out []Event, text string) []Event {
	if n := len(out); n > 0 && out[n-1].Call == nil && out[n-1].Kind == Content {
		out[n-1].Text += text
		return out
	}
	return append(out, Event{Text: text})
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

// parseCall reads the JSON of one call.
func parseCall(body string) (Call, bool) {
	var raw struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil || raw.Name == nil || *raw.Name == "" {
		return Call{}, false
	}
	args := bytes.TrimSpace(raw.Arguments)
	if len(args) == 0 {
		args = bytes.TrimSpace(raw.Parameters)
	}
	if len(args) > 0 && args[0] == '"' {
		// Arguments as a string that holds the JSON object.
		var s string
		if json.Unmarshal(args, &s) != nil {
			return Call{}, false
		}
		args = bytes.TrimSpace([]byte(s))
	}
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if args[0] != '{' {
		return Call{}, false
	}
	var compact bytes.Buffer
	if json.Compact(&compact, args) != nil {
		return Call{}, false
	}
	return Call{Name: *raw.Name, Arguments: compact.String()}, true
}

// Parse parses a whole text with the named parser: the content (calls
// removed) and the calls in order.
func Parse(name, text string) (string, []Call, error) {
	p, err := New(name)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var calls []Call
	for _, e := range append(p.Add(text), p.Flush()...) {
		if e.Call != nil {
			calls = append(calls, *e.Call)
		} else {
			b.WriteString(e.Text)
		}
	}
	return b.String(), calls, nil
}
