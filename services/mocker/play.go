package mocker

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/guided"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
)

// player makes the mocker answer the way Qwen3 does, read from the rendered
// prompt as a real model reads it: a <think> block first unless the prompt
// already closes an empty one (the template's enable_thinking false), and,
// when the prompt offers tools (the template's <tools> block) and the last
// turn is not a tool result, one call of the first tool in Qwen3's
// <tool_call> form, after which the answer ends. Answers are deterministic.
type player struct {
	tok *tokenizer.Tokenizer
	// think is the mocker's reasoning, <think> to the blank line after
	// </think>.
	think []uint32
}

const (
	// headTokens and tailTokens bound how much of a prompt is decoded:
	// tools sit in the first system turn, the turn to answer at the end.
	headTokens = 8192
	tailTokens = 2048
	thinkText  = "<think>\nA short answer will do.\n</think>\n\n"
	toolsOpen  = "<tools>\n"
	toolsClose = "\n</tools>"
	assistant  = "<|im_start|>assistant\n"
	userTurn   = "<|im_start|>user\n"
	noThinking = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)

func newPlayer(tok *tokenizer.Tokenizer) *player {
	return &player{tok: tok, think: tok.Encode(thinkText)}
}

// script returns the tokens the answer to prompt starts with and whether the
// answer ends after them.
func (p *player) script(prompt []uint32) ([]uint32, bool) {
	tail := p.tok.Decode(prompt[max(0, len(prompt)-tailTokens):])
	var out []uint32
	switch {
	case strings.HasSuffix(tail, noThinking):
	case strings.HasSuffix(tail, assistant):
		out = append(out, p.think...)
	default:
		// Not a chat turn of this template (a completion, or a migrated
		// request that already holds part of its answer): no script.
		return nil, false
	}
	if i := strings.LastIndex(tail, userTurn); i >= 0 && strings.HasPrefix(tail[i+len(userTurn):], "<tool_response>") {
		return out, false // answer the tool's result in words
	}
	head := p.tok.Decode(prompt[:min(len(prompt), headTokens)])
	call, ok := firstToolCall(head)
	if !ok {
		return out, false
	}
	return append(out, p.tok.Encode(call)...), true
}

// structured returns the tokens of an answer held to a structure: the
// reasoning a chat turn starts with (as script gives it), then text, after
// which the answer ends.
func (p *player) structured(prompt []uint32, text string) []uint32 {
	tail := p.tok.Decode(prompt[max(0, len(prompt)-tailTokens):])
	var out []uint32
	if strings.HasSuffix(tail, assistant) && !strings.HasSuffix(tail, noThinking) {
		out = append(out, p.think...)
	}
	return append(out, p.tok.Encode(text)...)
}

// guidedAnswer is the text of an answer held to g: {} for any JSON object,
// the simplest value a JSON schema accepts (guided.Schema.Example) for a
// schema. A schema the mocker finds no value for is refused, never
// answered with text that does not match it.
func guidedAnswer(g *workerv1.GuidedDecoding) (string, error) {
	switch f := g.GetFormat().(type) {
	case *workerv1.GuidedDecoding_JsonObject:
		return "{}", nil
	case *workerv1.GuidedDecoding_JsonSchema:
		s, err := guided.Compile([]byte(f.JsonSchema))
		if err != nil {
			return "", fmt.Errorf("guided_decoding: %w", err)
		}
		ex, err := s.Example()
		if err != nil {
			return "", fmt.Errorf("guided_decoding: the mocker cannot produce output for this schema: %w", err)
		}
		return string(ex), nil
	}
	return "", errors.New("guided_decoding: unknown format; this mocker knows json_object and json_schema")
}

// firstToolCall writes a Qwen3 tool call of the first tool in the prompt's
// <tools> block, with arguments made from its JSON schema.
func firstToolCall(prompt string) (string, bool) {
	i := strings.Index(prompt, toolsOpen)
	if i < 0 {
		return "", false
	}
	block := prompt[i+len(toolsOpen):]
	if j := strings.Index(block, toolsClose); j >= 0 {
		block = block[:j]
	}
	line, _, _ := strings.Cut(block, "\n")
	var tool struct {
		Name     string `json:"name"`
		Function *struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal([]byte(line), &tool) != nil {
		return "", false
	}
	name, params := tool.Name, tool.Parameters
	if tool.Function != nil {
		name, params = tool.Function.Name, tool.Function.Parameters
	}
	if name == "" {
		return "", false
	}
	args, _ := json.Marshal(exampleOf(params, 0))
	nameJSON, _ := json.Marshal(name)
	return "<tool_call>\n{\"name\": " + string(nameJSON) + ", \"arguments\": " + string(args) + "}\n</tool_call>", true
}

// exampleOf returns a value that fits a JSON schema: the first enum value,
// or a fixed value of its type; objects get every property.
func exampleOf(raw json.RawMessage, depth int) any {
	var s struct {
		Type       any                        `json:"type"`
		Enum       []any                      `json:"enum"`
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	if json.Unmarshal(raw, &s) != nil || depth > 8 {
		return map[string]any{}
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ, _ := s.Type.(string)
	if list, ok := s.Type.([]any); ok && len(list) > 0 {
		typ, _ = list[0].(string)
	}
	switch typ {
	case "string":
		return "switchyard"
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "array":
		if len(s.Items) > 0 {
			return []any{exampleOf(s.Items, depth+1)}
		}
		return []any{}
	case "null":
		return nil
	}
	out := map[string]any{}
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = exampleOf(s.Properties[k], depth+1)
	}
	return out
}

// logprobs makes up log probabilities for tokens at positions from start
// (generated ones, or the prompt's): the token itself is the most likely at
// its position, followed by its neighbours in the vocabulary, each less
// likely; deterministic in the token and position.
func logprobs(tokens []uint32, start int, top uint32, vocab uint32) []*workerv1.TokenLogprob {
	out := make([]*workerv1.TokenLogprob, len(tokens))
	for i, t := range tokens {
		pos := uint64(start + i)
		h := (uint64(t)*0x9e3779b97f4a7c15 ^ pos*0xbf58476d1ce4e5b9) >> 40
		lp := -float32(h%1000) / 4000 // in (-0.25, 0]
		tl := &workerv1.TokenLogprob{Logprob: lp}
		for k := uint32(0); k < top; k++ {
			id, l := t, lp
			if k > 0 {
				id = (t + k) % max(vocab, 1)
				l = lp - float32(math.Log1p(float64(k))) - 1
			}
			tl.Top = append(tl.Top, &workerv1.TopLogprob{TokenId: id, Logprob: l})
		}
		out[i] = tl
	}
	return out
}
