package openai

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The fast request decoder.
//
// encoding/json decodes a request body by reflection, allocates each
// optional field (*int64, *float64, *bool) on its own and copies every raw
// value; for the bodies clients send, that was most of a request's decode
// cost. decodeChatFast and decodeCompletionFast decode the same structs by
// hand: optional values live in the request itself (optStore, one
// allocation for all of them), raw values (content, tools, stop) are views
// of the body, which is read once per request and never modified.
//
// They handle a subset of what encoding/json accepts, and decode it to
// exactly the value json.Unmarshal would (FuzzFastDecode checks both
// against each other): a body they do not handle (invalid JSON, a type
// that does not match, a duplicate or case-folded member name, an escaped
// name, nesting past maxFastDepth) makes them report false, and the caller
// decodes it with json.Unmarshal, which then gives the value or the error
// message it always gave. Nothing they accept is something json.Unmarshal
// refuses: every byte of the body is validated as JSON on the way.

// maxFastDepth bounds the nesting the fast decoder follows; deeper bodies
// go to encoding/json (which has its own limit and error).
const maxFastDepth = 100

// optStore holds the values of a fast-decoded request's optional fields;
// the fields point into it.
type optStore struct {
	ints       [8]int64
	floats     [6]float64
	bools      [2]bool
	str        string
	ni, nf, nb int
}

func (o *optStore) int(v int64) *int64 {
	p := &o.ints[o.ni]
	o.ni++
	*p = v
	return p
}

func (o *optStore) float(v float64) *float64 {
	p := &o.floats[o.nf]
	o.nf++
	*p = v
	return p
}

func (o *optStore) bool(v bool) *bool {
	p := &o.bools[o.nb]
	o.nb++
	*p = v
	return p
}

// lexer reads JSON values from b, validating them as encoding/json's
// scanner does. Its methods report false for input the fast path does not
// take, invalid or not.
type lexer struct {
	b     []byte
	i     int
	depth int
}

func (l *lexer) ws() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (l *lexer) peek() byte {
	l.ws()
	if l.i >= len(l.b) {
		return 0
	}
	return l.b[l.i]
}

// end reports whether only white space is left.
func (l *lexer) end() bool {
	l.ws()
	return l.i == len(l.b)
}

// open consumes c ('{' or '[') and counts the nesting.
func (l *lexer) open(c byte) bool {
	if l.peek() != c || l.depth >= maxFastDepth {
		return false
	}
	l.i++
	l.depth++
	return true
}

// key reads the name of an object's next member and its colon; first says
// that the object's '{' was just read. done is true at the closing brace.
// An escaped name is not taken.
func (l *lexer) key(first bool) (name []byte, done, ok bool) {
	switch c := l.peek(); {
	case c == '}':
		l.i++
		l.depth--
		return nil, true, true
	case first:
	case c == ',':
		l.i++
	default:
		return nil, false, false
	}
	raw, escaped, ok := l.stringRaw()
	if !ok || escaped || l.peek() != ':' {
		return nil, false, false
	}
	l.i++
	return raw[1 : len(raw)-1], false, true
}

// elem reports whether an array has another element (and consumes the
// comma before it); first says that the array's '[' was just read.
func (l *lexer) elem(first bool) (more, ok bool) {
	switch c := l.peek(); {
	case c == ']':
		l.i++
		l.depth--
		return false, true
	case first:
		return true, true
	case c == ',':
		l.i++
		return true, true
	}
	return false, false
}

// object reads an object member by member. member is called with each
// name, the lexer at its value; it reads the value and reports whether it
// knew the name and whether the value was taken. A name it does not know is
// skipped with its value, unless it folds to one of names (encoding/json
// matches names without regard to case: that one is left to it).
func (l *lexer) object(names []string, member func(name []byte) (known, ok bool)) bool {
	if !l.open('{') {
		return false
	}
	for first := true; ; first = false {
		name, done, ok := l.key(first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		known, ok := member(name)
		if !ok {
			return false
		}
		if !known {
			if folds(name, names) {
				return false
			}
			if _, ok := l.value(); !ok {
				return false
			}
		}
	}
}

// str1 reads a string member's value into v as the first member with
// bit in s; anything else (a second one, another kind of value, a null:
// encoding/json decodes that as nothing) is not taken.
func (l *lexer) str1(s *seen, bit uint, v *string) (ok bool) {
	if !s.first(bit) || l.peek() != '"' {
		return false
	}
	*v, ok = l.str()
	return ok
}

// stringRaw reads a string token, quotes included; escaped says it holds
// a backslash escape.
func (l *lexer) stringRaw() (raw []byte, escaped, ok bool) {
	if l.peek() != '"' {
		return nil, false, false
	}
	start := l.i
	for i := l.i + 1; i < len(l.b); i++ {
		switch c := l.b[i]; {
		case c == '"':
			l.i = i + 1
			return l.b[start:l.i], escaped, true
		case c == '\\':
			escaped = true
			i++
			if i >= len(l.b) {
				return nil, false, false
			}
			switch l.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(l.b) {
					return nil, false, false
				}
				for _, h := range l.b[i+1 : i+5] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				i += 4
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// str reads a string value. Text without escapes that is valid UTF-8 is
// the bytes between the quotes; anything else is unquoted by encoding/json
// itself (escapes, and the replacement of invalid UTF-8).
func (l *lexer) str() (string, bool) {
	raw, escaped, ok := l.stringRaw()
	if !ok {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if !escaped && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// number reads a number token as JSON writes it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (l *lexer) number() ([]byte, bool) {
	l.ws()
	b, i := l.b, l.i
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false
		}
	}
	l.i = i
	return b[start:i], true
}

// literal consumes word (true, false or null) if it comes next.
func (l *lexer) literal(word string) bool {
	l.ws()
	if len(l.b)-l.i < len(word) || string(l.b[l.i:l.i+len(word)]) != word {
		return false
	}
	l.i += len(word)
	return true
}

// null consumes a null if it comes next.
func (l *lexer) null() bool {
	return l.peek() == 'n' && l.literal("null")
}

// boolean reads true or false.
func (l *lexer) boolean() (v, ok bool) {
	switch l.peek() {
	case 't':
		return true, l.literal("true")
	case 'f':
		return false, l.literal("false")
	}
	return false, false
}

// int64 reads an integer as encoding/json does for an int64 (a fraction,
// an exponent or an overflow is its type error: not taken).
func (l *lexer) int64() (int64, bool) {
	tok, ok := l.number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(tok), 10, 64)
	return v, err == nil
}

// float64 reads a number as encoding/json does for a float64.
func (l *lexer) float64() (float64, bool) {
	tok, ok := l.number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(tok), 64)
	return v, err == nil
}

// value reads any value and returns its bytes, validated.
func (l *lexer) value() ([]byte, bool) {
	c := l.peek()
	start := l.i
	var ok bool
	switch c {
	case '"':
		_, _, ok = l.stringRaw()
	case '{':
		ok = l.open('{')
		for first := true; ok; first = false {
			var done bool
			if _, done, ok = l.key(first); !ok || done {
				break
			}
			_, ok = l.value()
		}
	case '[':
		ok = l.open('[')
		for first := true; ok; first = false {
			var more bool
			if more, ok = l.elem(first); !ok || !more {
				break
			}
			_, ok = l.value()
		}
	case 't':
		ok = l.literal("true")
	case 'f':
		ok = l.literal("false")
	case 'n':
		ok = l.literal("null")
	default:
		_, ok = l.number()
	}
	if !ok {
		return nil, false
	}
	return l.b[start:l.i], true
}

// raw reads a value for a json.RawMessage field: its bytes (null included,
// as json.RawMessage keeps it).
func (l *lexer) raw() (json.RawMessage, bool) {
	v, ok := l.value()
	return json.RawMessage(v), ok
}

// anyValue reads a value as encoding/json decodes it into an interface:
// map[string]any, []any, string, float64, bool or nil.
func (l *lexer) anyValue() (any, bool) {
	switch l.peek() {
	case '"':
		return l.str()
	case '{':
		if !l.open('{') {
			return nil, false
		}
		m := map[string]any{}
		for first := true; ; first = false {
			raw, done, ok := l.key(first)
			if !ok {
				return nil, false
			}
			if done {
				return m, true
			}
			k := string(raw)
			if !utf8.ValidString(k) {
				return nil, false // json replaces invalid UTF-8
			}
			v, ok := l.anyValue()
			if !ok {
				return nil, false
			}
			m[k] = v
		}
	case '[':
		if !l.open('[') {
			return nil, false
		}
		s := []any{}
		for first := true; ; first = false {
			more, ok := l.elem(first)
			if !ok {
				return nil, false
			}
			if !more {
				return s, true
			}
			v, ok := l.anyValue()
			if !ok {
				return nil, false
			}
			s = append(s, v)
		}
	case 't', 'f':
		return l.boolean()
	case 'n':
		return nil, l.literal("null")
	}
	return l.float64()
}

// folds reports whether an unknown member name could be matched to one of
// names by encoding/json, which also matches names case-insensitively: a
// non-ASCII name, or one equal to a name but for ASCII case.
func folds(name []byte, names []string) bool {
	for _, c := range name {
		if c >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if len(n) != len(name) {
			continue
		}
		eq := true
		for i := 0; i < len(n) && eq; i++ {
			eq = lower(n[i]) == lower(name[i])
		}
		if eq {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// seen tracks the member names of one object by bit, to leave duplicates
// (which encoding/json merges in ways of its own) to encoding/json.
type seen uint64

func (s *seen) first(bit uint) bool {
	if *s&(1<<bit) != 0 {
		return false
	}
	*s |= 1 << bit
	return true
}

// commonNames are the member names of CommonRequest (and of the structs
// that embed it, which add their own).
var commonNames = []string{"stream", "stream_options", "max_tokens", "n", "temperature", "top_p", "top_k", "min_p", "seed",
	"frequency_penalty", "presence_penalty", "repetition_penalty", "stop", "stop_token_ids", "ignore_eos", "min_tokens", "cache_salt"}

var (
	chatNames       = append([]string{"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "max_completion_tokens", "logprobs", "top_logprobs", "response_format"}, commonNames...)
	completionNames = append([]string{"model", "prompt", "echo", "suffix", "logprobs"}, commonNames...)
	messageNames    = []string{"role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content"}
)

// common decodes a member of CommonRequest; known is false for other
// names. Bits 0-15 and 40 of s are its members'.
func (l *lexer) common(name []byte, c *CommonRequest, o *optStore, s *seen) (known, ok bool) {
	var bit uint
	switch string(name) {
	case "stream":
		bit = 0
	case "stream_options":
		bit = 1
	case "max_tokens":
		bit = 2
	case "n":
		bit = 3
	case "temperature":
		bit = 4
	case "top_p":
		bit = 5
	case "top_k":
		bit = 6
	case "min_p":
		bit = 7
	case "seed":
		bit = 8
	case "frequency_penalty":
		bit = 9
	case "presence_penalty":
		bit = 10
	case "repetition_penalty":
		bit = 11
	case "stop":
		bit = 12
	case "stop_token_ids":
		bit = 13
	case "ignore_eos":
		bit = 14
	case "min_tokens":
		bit = 15
	case "cache_salt":
		bit = 40
	default:
		return false, true
	}
	if !s.first(bit) {
		return true, false
	}
	switch bit {
	case 40:
		if l.null() {
			return true, true
		}
		if l.peek() != '"' {
			return true, false
		}
		var v string
		if v, ok = l.str(); ok {
			c.CacheSalt = &v
		}
		return true, ok
	case 1:
		return true, l.streamOptions(c)
	case 12:
		c.Stop, ok = l.raw()
		return true, ok
	case 13:
		return true, l.stopTokenIDs(c)
	}
	if l.null() {
		return true, true // json leaves a null's field as it is: nil or false
	}
	switch bit {
	case 0:
		c.Stream, ok = l.boolean()
	case 14:
		c.IgnoreEOS, ok = l.boolean()
	case 2, 3, 6, 8, 15:
		var v int64
		if v, ok = l.int64(); ok {
			p := o.int(v)
			switch bit {
			case 2:
				c.MaxTokens = p
			case 3:
				c.N = p
			case 6:
				c.TopK = p
			case 8:
				c.Seed = p
			case 15:
				c.MinTokens = p
			}
		}
	default:
		var v float64
		if v, ok = l.float64(); ok {
			p := o.float(v)
			switch bit {
			case 4:
				c.Temperature = p
			case 5:
				c.TopP = p
			case 7:
				c.MinP = p
			case 9:
				c.FrequencyPenalty = p
			case 10:
				c.PresencePenalty = p
			case 11:
				c.RepetitionPenalty = p
			}
		}
	}
	return true, ok
}

func (l *lexer) streamOptions(c *CommonRequest) bool {
	if l.null() {
		return true
	}
	c.StreamOptions = &StreamOptions{}
	var s seen
	return l.object(streamOptionsNames, func(name []byte) (known, ok bool) {
		if string(name) != "include_usage" {
			return false, true
		}
		if !s.first(0) {
			return true, false
		}
		c.StreamOptions.IncludeUsage, ok = l.boolean()
		return true, ok
	})
}

func (l *lexer) stopTokenIDs(c *CommonRequest) bool {
	if l.null() {
		return true
	}
	if !l.open('[') {
		return false
	}
	c.StopTokenIDs = []uint32{}
	for first := true; ; first = false {
		more, ok := l.elem(first)
		if !ok || !more {
			return ok
		}
		tok, ok := l.number()
		if !ok {
			return false
		}
		v, err := strconv.ParseUint(string(tok), 10, 32)
		if err != nil {
			return false
		}
		c.StopTokenIDs = append(c.StopTokenIDs, uint32(v))
	}
}

// decodeChatFast decodes a chat completion body into r as json.Unmarshal
// would, or reports false (see the top of this file).
func decodeChatFast(body []byte, r *ChatRequest) bool {
	l := lexer{b: body}
	o := &r.opt
	var s seen
	return l.object(chatNames, func(name []byte) (known, ok bool) {
		if known, ok := l.common(name, &r.CommonRequest, o, &s); known || !ok {
			return known, ok
		}
		var bit uint
		switch string(name) {
		case "model":
			bit = 16
		case "messages":
			bit = 17
		case "tools":
			bit = 18
		case "tool_choice":
			bit = 19
		case "parallel_tool_calls":
			bit = 20
		case "chat_template_kwargs":
			bit = 21
		case "max_completion_tokens":
			bit = 22
		case "logprobs":
			bit = 23
		case "top_logprobs":
			bit = 24
		case "response_format":
			bit = 25
		default:
			// A member json.Unmarshal ignores (the field policy judges it).
			return false, true
		}
		if !s.first(bit) {
			return true, false
		}
		switch bit {
		case 17:
			ok = l.messages(r)
		case 18:
			ok = l.tools(r)
		case 19:
			r.ToolChoice, ok = l.raw()
		case 25:
			r.ResponseFormat, ok = l.raw()
		case 21:
			ok = l.templateKwargs(r)
		default:
			if l.null() {
				return true, true
			}
			switch bit {
			case 16:
				r.Model, ok = l.str()
			case 20, 23:
				var v bool
				if v, ok = l.boolean(); ok {
					if bit == 20 {
						r.ParallelToolCalls = o.bool(v)
					} else {
						r.Logprobs = o.bool(v)
					}
				}
			case 22, 24:
				var v int64
				if v, ok = l.int64(); ok {
					if bit == 22 {
						r.MaxCompletionTokens = o.int(v)
					} else {
						r.TopLogprobs = o.int(v)
					}
				}
			}
		}
		return true, ok
	}) && l.end()
}

func (l *lexer) messages(r *ChatRequest) bool {
	if l.null() {
		return true
	}
	if !l.open('[') {
		return false
	}
	r.Messages = make([]ChatMessage, 0, 4)
	for first := true; ; first = false {
		more, ok := l.elem(first)
		if !ok || !more {
			return ok
		}
		r.Messages = append(r.Messages, ChatMessage{})
		if !l.message(&r.Messages[len(r.Messages)-1]) {
			return false
		}
	}
}

// message decodes one message; null (which json decodes as nothing) is
// left to encoding/json.
func (l *lexer) message(m *ChatMessage) bool {
	var s seen
	return l.object(messageNames, func(name []byte) (known, ok bool) {
		var bit uint
		switch string(name) {
		case "role":
			bit = 0
		case "content":
			bit = 1
		case "name":
			bit = 2
		case "tool_call_id":
			bit = 3
		case "tool_calls":
			bit = 4
		case "reasoning_content":
			bit = 5
		default:
			return false, true
		}
		if !s.first(bit) {
			return true, false
		}
		switch bit {
		case 1:
			m.Content, ok = l.raw()
		case 4:
			// What the fast path does not take here, encoding/json
			// decodes (into a zero field, as it would in the whole body).
			ok = l.try(func() bool { return l.toolCalls(m) }, func(raw []byte) bool {
				m.ToolCalls = nil
				return json.Unmarshal(raw, &m.ToolCalls) == nil
			})
		default:
			if l.null() {
				return true, true
			}
			var v string
			if bit == 0 {
				v, ok = l.role()
			} else {
				v, ok = l.str()
			}
			switch bit {
			case 0:
				m.Role = v
			case 2:
				m.Name = v
			case 3:
				m.ToolCallID = v
			case 5:
				m.ReasoningContent = new(string)
				*m.ReasoningContent = v
			}
		}
		return true, ok
	})
}

// try decodes the value that comes next with fast; when fast reports false,
// the lexer goes back to the value's start and passes its bytes to slow.
func (l *lexer) try(fast func() bool, slow func(raw []byte) bool) bool {
	at, depth := l.i, l.depth
	if fast() {
		return true
	}
	l.i, l.depth = at, depth
	raw, ok := l.value()
	return ok && slow(raw)
}

var (
	toolCallNames      = []string{"id", "type", "function"}
	functionCallNames  = []string{"name", "arguments"}
	toolNames          = []string{"type", "function"}
	toolFunctionNames  = []string{"name"}
	streamOptionsNames = []string{"include_usage"}
)

// toolCalls decodes a message's tool_calls: an array of
// {"id","type","function":{"name","arguments"}}.
func (l *lexer) toolCalls(m *ChatMessage) bool {
	if !l.open('[') {
		return false
	}
	m.ToolCalls = []ToolCall{}
	for first := true; ; first = false {
		more, ok := l.elem(first)
		if !ok || !more {
			return ok
		}
		var tc ToolCall
		var s seen
		if !l.object(toolCallNames, func(name []byte) (known, ok bool) {
			switch string(name) {
			case "id":
				return true, l.str1(&s, 0, &tc.ID)
			case "type":
				return true, l.str1(&s, 1, &tc.Type)
			case "function":
				return true, s.first(2) && l.functionCall(&tc.Function)
			}
			return false, true
		}) {
			return false
		}
		m.ToolCalls = append(m.ToolCalls, tc)
	}
}

func (l *lexer) functionCall(f *FunctionCall) bool {
	var s seen
	return l.object(functionCallNames, func(name []byte) (known, ok bool) {
		switch string(name) {
		case "name":
			return true, l.str1(&s, 0, &f.Name)
		case "arguments":
			if !s.first(1) {
				return true, false
			}
			f.Arguments, ok = l.raw()
			return true, ok
		}
		return false, true
	})
}

// ToolFunctionName reads the type and function name of a tool definition
// (an element of ChatRequest.Tools) as json.Unmarshal into
//
//	struct {
//		Type     string `json:"type"`
//		Function *struct{ Name string `json:"name"` } `json:"function"`
//	}
//
// would; hasFunction says that the function member is there. ok is false
// for what it does not take: the caller then decodes raw with
// encoding/json.
func ToolFunctionName(raw []byte) (typ, name string, hasFunction, ok bool) {
	l := lexer{b: raw}
	var s, fs seen
	ok = l.object(toolNames, func(key []byte) (known, ok bool) {
		switch string(key) {
		case "type":
			return true, l.str1(&s, 0, &typ)
		case "function":
			hasFunction = true
			return true, s.first(1) && l.object(toolFunctionNames, func(key []byte) (known, ok bool) {
				if string(key) != "name" {
					return false, true
				}
				return true, l.str1(&fs, 0, &name)
			})
		}
		return false, true
	}) && l.end()
	if !ok {
		return "", "", false, false
	}
	return typ, name, hasFunction, true
}

// role reads a message's role: a known one is its constant, not a copy.
func (l *lexer) role() (string, bool) {
	at := l.i
	if raw, escaped, ok := l.stringRaw(); ok && !escaped {
		for _, r := range [...]string{"user", "assistant", "system", "tool", "developer"} {
			if string(raw[1:len(raw)-1]) == r {
				return r, true
			}
		}
	}
	l.i = at
	return l.str()
}

func (l *lexer) tools(r *ChatRequest) bool {
	if l.null() {
		return true
	}
	if !l.open('[') {
		return false
	}
	r.Tools = []json.RawMessage{}
	for first := true; ; first = false {
		more, ok := l.elem(first)
		if !ok || !more {
			return ok
		}
		raw, ok := l.raw()
		if !ok {
			return false
		}
		r.Tools = append(r.Tools, raw)
	}
}

func (l *lexer) templateKwargs(r *ChatRequest) bool {
	if l.null() {
		return true
	}
	if l.peek() != '{' {
		return false
	}
	v, ok := l.anyValue()
	if !ok {
		return false
	}
	r.ChatTemplateKwargs = v.(map[string]any)
	return true
}

// decodeCompletionFast is decodeChatFast for a completion body.
func decodeCompletionFast(body []byte, r *CompletionRequest) bool {
	l := lexer{b: body}
	o := &r.opt
	var s seen
	return l.object(completionNames, func(name []byte) (known, ok bool) {
		if known, ok := l.common(name, &r.CommonRequest, o, &s); known || !ok {
			return known, ok
		}
		var bit uint
		switch string(name) {
		case "model":
			bit = 16
		case "prompt":
			bit = 17
		case "echo":
			bit = 18
		case "suffix":
			bit = 19
		case "logprobs":
			bit = 20
		default:
			return false, true
		}
		if !s.first(bit) {
			return true, false
		}
		if bit == 17 {
			r.Prompt, ok = l.raw()
			return true, ok
		}
		if l.null() {
			return true, true
		}
		switch bit {
		case 16:
			r.Model, ok = l.str()
		case 18:
			r.Echo, ok = l.boolean()
		case 19:
			if o.str, ok = l.str(); ok {
				r.Suffix = &o.str
			}
		case 20:
			var v int64
			if v, ok = l.int64(); ok {
				r.Logprobs = o.int(v)
			}
		}
		return true, ok
	}) && l.end()
}

// fastStrings reads a string or an array of strings (a stop value) as
// json.Unmarshal into a string, else into a []string, would; ok is false
// for what it does not take.
func fastStrings(raw []byte) ([]string, bool) {
	l := lexer{b: raw}
	if l.peek() == '"' {
		v, ok := l.str()
		return []string{v}, ok && l.end()
	}
	if !l.open('[') {
		return nil, false
	}
	list := []string{}
	for first := true; ; first = false {
		more, ok := l.elem(first)
		if !ok {
			return nil, false
		}
		if !more {
			return list, l.end()
		}
		if l.peek() != '"' {
			return nil, false
		}
		v, ok := l.str()
		if !ok {
			return nil, false
		}
		list = append(list, v)
	}
}

// fastTokenIDs reads an array of token ids as json.Unmarshal into a
// []uint32 would; ok is false for what it does not take.
func fastTokenIDs(raw []byte) ([]uint32, bool) {
	l := lexer{b: raw}
	var c CommonRequest
	if !l.stopTokenIDs(&c) || !l.end() {
		return nil, false
	}
	return c.StopTokenIDs, true
}
