package toolcall

import (
	"encoding/json"
	"strings"
)

// Streaming mode.
//
// OpenAI streams a tool call as it is generated: one delta with the call's
// index, id and name, then deltas with fragments of its arguments. In
// streaming mode the parser does the same: once the body of a call has
// read `{"name": "...", "arguments": {` (or "parameters"; any whitespace), it
// returns CallBegin with the name, then the arguments as ArgumentsDelta
// fragments as they arrive (compacted: whitespace outside strings is
// dropped, so the fragments join to what Parse returns for a well-formed
// call), and CallEnd at </tool_call>. A call of another form (arguments
// before the name, arguments as a JSON string) is held and returned whole,
// or as content when malformed, as without streaming.
//
// The price of streaming is that a call cannot turn back into content once
// its name was sent: when the arguments of a begun call turn out malformed,
// or the text ends inside the call, the call ends with the fragments sent so
// far (as OpenAI's and vLLM's streams do). Without streaming mode a
// malformed call is returned as content.

// StreamArguments turns streaming mode on; call it before the first Add.
func (p *Parser) StreamArguments() { p.stream = true }

type streamPhase int

const (
	phaseHeader streamPhase = iota // reading {"name": "...", "arguments": {
	phaseArgs                      // streaming the arguments object
	phaseAfter                     // the arguments closed; waiting for </tool_call>
	phaseHold                      // not the streamable form: held whole
)

// callStream is the state of the open call in streaming mode.
type callStream struct {
	phase streamPhase
	body  strings.Builder // the call's text so far
	depth int
	inStr bool
	esc   bool
}

// streamCall consumes s, text inside an open call. done reports that the
// call ended (at its close tag, or at the end of the text when final), and
// rest is the text after it.
func (p *Parser) streamCall(out []Event, s string, final bool) (_ []Event, rest string, done bool) {
	end := strings.Index(s, closeTag)
	chunk := s
	switch {
	case end >= 0:
		chunk, rest = s[:end], s[end+len(closeTag):]
	case !final:
		keep := partialSuffix(s, closeTag)
		chunk = s[:len(s)-keep]
		p.buf.WriteString(s[len(s)-keep:])
	}
	sc := &p.sc
	sc.body.WriteString(chunk)
	out = p.feed(out, chunk)
	if end < 0 && !final {
		return out, "", false
	}
	body := sc.body.String()
	phase := sc.phase
	p.sc = callStream{}
	p.inCall = false
	switch {
	case phase == phaseArgs || phase == phaseAfter:
		out = append(out, Event{Kind: CallEnd})
		p.calls++
		p.afterCall = true
		if end < 0 {
			return p.content(out, "", true), "", false
		}
		return out, rest, true
	case end < 0: // the text ended inside a call that never began streaming
		return p.content(out, openTag+body, true), "", false
	}
	if c, ok := parseCall(body); ok {
		p.ws = ""
		p.calls++
		p.afterCall = true
		out = append(out, Event{Call: &c})
	} else {
		out = p.content(out, openTag+body+closeTag, false)
	}
	return out, rest, true
}

// feed advances the open call by chunk (already appended to its body).
func (p *Parser) feed(out []Event, chunk string) []Event {
	sc := &p.sc
	if sc.phase == phaseHeader {
		body := sc.body.String()
		name, args, st := matchHeader(body)
		switch st {
		case headerMore:
			return out
		case headerFail:
			sc.phase = phaseHold
			return out
		}
		// Whitespace before a call is dropped, as for whole calls.
		p.ws = ""
		out = append(out, Event{Kind: CallBegin, Name: name})
		sc.phase = phaseArgs
		chunk = body[args:]
	}
	if sc.phase != phaseArgs {
		return out
	}
	var frag strings.Builder
	for i := 0; i < len(chunk); i++ {
		b := chunk[i]
		if sc.inStr {
			frag.WriteByte(b)
			switch {
			case sc.esc:
				sc.esc = false
			case b == '\\':
				sc.esc = true
			case b == '"':
				sc.inStr = false
			}
			continue
		}
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			sc.inStr = true
		case '{', '[':
			sc.depth++
		case '}', ']':
			sc.depth--
		}
		frag.WriteByte(b)
		if sc.depth == 0 {
			sc.phase = phaseAfter
			break
		}
	}
	if frag.Len() > 0 {
		out = append(out, Event{Kind: ArgumentsDelta, Arguments: frag.String()})
	}
	return out
}

type headerState int

const (
	headerMore headerState = iota
	headerFail
	headerDone
)

// matchHeader matches the start of a call body against
// `{"name": <string>, "arguments": {` (or "parameters"), with any
// whitespace. When done, args is the offset of the arguments' '{'.
func matchHeader(s string) (name string, args int, st headerState) {
	i := 0
	ws := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	// lit matches one of words at i: done, more (s ends inside a match),
	// or fail.
	lit := func(words ...string) headerState {
		more := false
		for _, w := range words {
			if strings.HasPrefix(s[i:], w) {
				i += len(w)
				return headerDone
			}
			if strings.HasPrefix(w, s[i:]) {
				more = true
			}
		}
		if more {
			return headerMore
		}
		return headerFail
	}
	steps := []func() headerState{
		func() headerState { return lit("{") },
		func() headerState { return lit(`"name"`) },
		func() headerState { return lit(":") },
		func() headerState {
			if i >= len(s) {
				return headerMore
			}
			if s[i] != '"' {
				return headerFail
			}
			for j := i + 1; j < len(s); j++ {
				switch s[j] {
				case '\\':
					j++
				case '"':
					if json.Unmarshal([]byte(s[i:j+1]), &name) != nil || name == "" {
						return headerFail
					}
					i = j + 1
					return headerDone
				}
			}
			return headerMore
		},
		func() headerState { return lit(",") },
		func() headerState { return lit(`"arguments"`, `"parameters"`) },
		func() headerState { return lit(":") },
		func() headerState { return lit("{") },
	}
	for k, step := range steps {
		ws()
		if i >= len(s) {
			return "", 0, headerMore
		}
		if k == len(steps)-1 {
			args = i
		}
		if st := step(); st != headerDone {
			return "", 0, st
		}
	}
	return name, args, headerDone
}
