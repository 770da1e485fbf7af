// Package reasoning separates a reasoning model's thinking from its answer,
// for the frontend to return the thinking as reasoning_content (as vLLM and
// Dynamo do) instead of inside content. Which format a model writes is named
// by its worker in the model card (--reasoning-parser).
//
// The parsers, both of the <think>...</think> form:
//   - qwen3: the answer is reasoning only when it opens with <think> (leading
//     whitespace allowed); without it (Qwen3 with enable_thinking false,
//     whose template already closes an empty think block) it is all content.
//   - deepseek_r1: the answer starts as reasoning whether or not it opens with
//     <think> (DeepSeek-R1's template puts the tag in the prompt).
//   - none (or empty): everything is content.
//
// Reasoning ends at </think>; the text after it, without its leading
// whitespace, is content. Thinking still open when the text ends stays
// reasoning, the same streamed or not. The newline after <think> and the
// whitespace before </think> are dropped. A Parser works on a stream of text
// deltas and holds back only a tail that may still become a tag.
package reasoning

import (
	"errors"
	"fmt"
	"strings"
)

// Parser names, as worker flags and model cards spell them.
const (
	None       = "none"
	Qwen3      = "qwen3"
	DeepSeekR1 = "deepseek_r1"
)

// Names lists the valid parser names.
func Names() []string { return []string{None, Qwen3, DeepSeekR1} }

// ErrUnknownParser is returned by New and Validate for a name not in Names.
var ErrUnknownParser = errors.New("unknown reasoning parser")

// Validate reports whether name is a parser; the empty name means none.
func Validate(name string) error {
	switch name {
	case "", None, Qwen3, DeepSeekR1:
		return nil
	}
	return fmt.Errorf("%w %q: valid values are %s", ErrUnknownParser, name, strings.Join(Names(), ", "))
}

const (
	openTag  = "<think>"
	closeTag = "</think>"
)

type state int

const (
	// undecided: leading whitespace so far; it is not yet known whether
	// the text opens with <think>.
	undecided state = iota
	thinking
	// answering: after </think>, leading whitespace still to drop.
	answering
	content
)

// Parser splits one generation's text. It is not safe for concurrent use.
type Parser struct {
	st state
	// alwaysThinks is deepseek_r1: no <think> is needed to start thinking.
	alwaysThinks bool
	buf          string
	// ws is trailing whitespace of reasoning, dropped if </think> follows.
	ws string
	// thought is whether any reasoning text was returned.
	thought bool
	// closed is whether a reasoning block ended (</think> was read).
	closed bool
}

// Phase is where a parser is in a generation's text.
type Phase int

// The phases, in the order a text goes through them.
const (
	// Undecided: nothing but whitespace, or a prefix of <think>, so far.
	Undecided Phase = iota
	// Thinking: inside the reasoning.
	Thinking
	// Answered: past the end of the reasoning.
	Answered
	// Plain: the text did not open with reasoning; it is all answer.
	Plain
)

// Phase says where the parser is, after the text given so far. A caller
// that counts tokens (reasoning_tokens in usage) attributes a piece of
// text to the reasoning when the parser was Thinking before or after it,
// or went from Undecided to Answered over it.
func (p *Parser) Phase() Phase {
	switch {
	case p.st == undecided:
		return Undecided
	case p.st == thinking:
		return Thinking
	case p.closed:
		return Answered
	}
	return Plain
}

// New returns a parser of the named format; "" and none pass text through
// as content.
func New(name string) (*Parser, error) {
	if err := Validate(name); err != nil {
		return nil, err
	}
	p := &Parser{alwaysThinks: name == DeepSeekR1}
	if name == "" || name == None {
		p.st = content
	}
	return p, nil
}

// Add splits the next piece of text into reasoning and content.
func (p *Parser) Add(text string) (reasoning, answer string) {
	if p.st == content {
		return "", text
	}
	p.buf += text
	return p.scan(false)
}

// Flush returns what is left at the end of the text.
func (p *Parser) Flush() (reasoning, answer string) {
	if p.st == content && p.buf == "" {
		return "", ""
	}
	return p.scan(true)
}

func (p *Parser) scan(final bool) (reasoning, answer string) {
	var r, a strings.Builder
	s := p.buf
	p.buf = ""
	for s != "" || final {
		switch p.st {
		case undecided:
			t := strings.TrimLeft(s, " \t\r\n")
			switch {
			case strings.HasPrefix(t, openTag):
				s = strings.TrimLeft(t[len(openTag):], "\r\n")
				p.st = thinking
			case !final && strings.HasPrefix(openTag, t):
				p.buf = s // maybe <think> still to come
				return r.String(), a.String()
			case p.alwaysThinks:
				s = t
				p.st = thinking
			default:
				p.st = content
			}
		case thinking:
			end := strings.Index(s, closeTag)
			if end >= 0 {
				p.reason(&r, strings.TrimRight(s[:end], " \t\r\n"))
				p.ws = ""
				s = s[end+len(closeTag):]
				p.st, p.closed = answering, true
				continue
			}
			keep := 0
			if !final {
				keep = partialSuffix(s, closeTag)
			}
			body := s[:len(s)-keep]
			trimmed := strings.TrimRight(body, " \t\r\n")
			p.reason(&r, trimmed)
			p.ws += body[len(trimmed):]
			p.buf = s[len(s)-keep:]
			if final {
				p.ws, p.buf = "", ""
			}
			return r.String(), a.String()
		case answering:
			t := strings.TrimLeft(s, " \t\r\n")
			if t == "" && !final {
				return r.String(), a.String()
			}
			s = t
			p.st = content
		case content:
			a.WriteString(s)
			return r.String(), a.String()
		}
	}
	return r.String(), a.String()
}

// reason writes reasoning text, with the whitespace held before it.
func (p *Parser) reason(b *strings.Builder, text string) {
	if !p.thought {
		text = strings.TrimLeft(text, " \t\r\n") // the newline after <think>
	}
	if text == "" {
		return
	}
	if p.thought {
		b.WriteString(p.ws)
	}
	p.ws = ""
	p.thought = true
	b.WriteString(text)
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

// Split splits a whole text with the named parser.
func Split(name, text string) (reasoning, answer string, err error) {
	p, err := New(name)
	if err != nil {
		return "", "", err
	}
	r1, a1 := p.Add(text)
	r2, a2 := p.Flush()
	return r1 + r2, a1 + a2, nil
}
