package frontend_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// completionBody is what the echo tests read of a completion, whole or one
// streamed chunk.
type completionBody struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// TestCompletionEcho asks for the prompt back (echo), with and without log
// probabilities, streamed and not, the prompt as text and as token ids, and
// in the shape lm-evaluation-harness's local-completions model sends to
// score a continuation (a batch of one tokenized prompt, max_tokens 1,
// logprobs 1, echo, temperature 0). The text starts with the prompt; the
// logprobs list every prompt token, then every generated one (usage's
// counts), the first with a null log probability and null top_logprobs
// (nothing precedes it), every other with a log probability <= 0 and 1 to
// logprobs top alternatives; text_offset counts the text before each
// token, and the tokens join to the text.
func TestCompletionEcho(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	s.addMocker(0)
	s.waitInstances(1)
	ids, _ := json.Marshal([][]int{{785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562}})
	const story = "Once upon a time"
	cases := []struct {
		name, body string
		stream     bool
		// prompt is the text the answer starts with ("" for token ids:
		// the prompt tokens' pieces); top the logprobs asked (-1: none).
		prompt string
		top    int
	}{
		{"text", `"prompt":"` + story + `","max_tokens":6`, false, story, -1},
		{"text streamed", `"prompt":"` + story + `","max_tokens":6`, true, story, -1},
		{"text logprobs", `"prompt":"` + story + `","max_tokens":4,"logprobs":2`, false, story, 2},
		{"text logprobs streamed", `"prompt":"` + story + `","max_tokens":4,"logprobs":2`, true, story, 2},
		{"lm-eval loglikelihood", `"prompt":` + string(ids) + `,"max_tokens":1,"logprobs":1,"temperature":0,"seed":1234`, false, "", 1},
		{"lm-eval streamed", `"prompt":` + string(ids) + `,"max_tokens":1,"logprobs":1,"temperature":0`, true, "", 1},
		{"one-token prompt", `"prompt":[785],"max_tokens":2,"logprobs":0`, false, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":%q,"echo":true,"stream":%v,%s}`, testModel, tc.stream, tc.body)
			if tc.stream {
				body = strings.TrimSuffix(body, "}") + `,"stream_options":{"include_usage":true}}`
			}
			resp, raw := s.rawPost("/v1/completions", body, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			var bodies []completionBody
			if tc.stream {
				data, _ := sseEvents(t, raw)
				for _, d := range data {
					if d == "[DONE]" {
						continue
					}
					var c completionBody
					if err := json.Unmarshal([]byte(d), &c); err != nil {
						t.Fatalf("chunk %q: %v", d, err)
					}
					bodies = append(bodies, c)
				}
			} else {
				var c completionBody
				if err := json.Unmarshal(raw, &c); err != nil {
					t.Fatalf("body %q: %v", raw, err)
				}
				bodies = append(bodies, c)
			}
			// The one choice, concatenated over the chunks.
			var text strings.Builder
			var tokens []string
			var lps []*float64
			var tops []map[string]float64
			var offsets []int
			promptTokens, completionTokens := -1, -1
			withLogprobs := false
			for _, c := range bodies {
				if c.Usage != nil {
					promptTokens, completionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Text)
					if l := ch.Logprobs; l != nil {
						withLogprobs = true
						if len(l.TokenLogprobs) != len(l.Tokens) || len(l.TopLogprobs) != len(l.Tokens) || len(l.TextOffset) != len(l.Tokens) {
							t.Fatalf("logprobs arrays of unequal lengths: %+v", l)
						}
						tokens, lps, tops = append(tokens, l.Tokens...), append(lps, l.TokenLogprobs...), append(tops, l.TopLogprobs...)
						offsets = append(offsets, l.TextOffset...)
					}
				}
			}
			if promptTokens < 1 || completionTokens < 1 {
				t.Fatalf("usage: %d prompt and %d completion tokens", promptTokens, completionTokens)
			}
			if !strings.HasPrefix(text.String(), tc.prompt) {
				t.Fatalf("text %q does not start with the prompt %q", text.String(), tc.prompt)
			}
			if withLogprobs != (tc.top >= 0) {
				t.Fatalf("logprobs in the answer: %v, asked: %v", withLogprobs, tc.top >= 0)
			}
			if !withLogprobs {
				return
			}
			if len(tokens) != promptTokens+completionTokens {
				t.Fatalf("%d logprobs entries, want %d prompt + %d generated", len(tokens), promptTokens, completionTokens)
			}
			if lps[0] != nil || tops[0] != nil {
				t.Fatalf("first entry: token_logprob %v, top_logprobs %v; want null, null", lps[0], tops[0])
			}
			for i := 1; i < len(tokens); i++ {
				if lps[i] == nil || *lps[i] > 0 {
					t.Fatalf("entry %d (%q): log probability %v, want a number <= 0", i, tokens[i], lps[i])
				}
				if n := len(tops[i]); n > tc.top || (tc.top > 0 && n == 0) {
					t.Fatalf("entry %d: %d top alternatives, want 1 to %d", i, n, tc.top)
				}
			}
			joined := ""
			for i, tok := range tokens {
				if offsets[i] != len(joined) {
					t.Fatalf("text_offset[%d] = %d, want %d", i, offsets[i], len(joined))
				}
				joined += tok
			}
			if joined != text.String() {
				t.Fatalf("tokens join to %q, the text is %q", joined, text.String())
			}
			if p := strings.Join(tokens[:promptTokens], ""); tc.prompt != "" && p != tc.prompt {
				t.Fatalf("prompt tokens join to %q, want %q", p, tc.prompt)
			}
		})
	}
}
