package adapter

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// Log probabilities, as vLLM's OpenAI completions endpoint gives them
// (vllm/entrypoints/openai/protocol.py and serving_completion.py, v0.11):
//
//   - of generated tokens, with "logprobs": N, in each choice's legacy
//     logprobs object {tokens, token_logprobs, top_logprobs, text_offset};
//     with "return_tokens_as_token_ids": true the tokens, and the keys of
//     each top_logprobs map, are "token_id:<id>" rather than text, which is
//     what a worker answers in (ids, not text);
//   - of the prompt, with "prompt_logprobs": N, in each choice's
//     prompt_logprobs: a list with one entry per prompt token, null for the
//     first (nothing precedes it) and otherwise a map from the token id (a
//     string) to {logprob, rank, decoded_token}, holding the prompt token
//     itself and the N most likely tokens at its position (rank 1 is the
//     most likely). vLLM refuses prompt_logprobs on a streamed request, so
//     a request asking for them is sent unstreamed and answered in one
//     response.

// engineLogprobs is a choice's legacy logprobs object.
type engineLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

// enginePromptLogprob is one alternative at a prompt position.
type enginePromptLogprob struct {
	Logprob float64 `json:"logprob"`
	Rank    *int    `json:"rank"`
}

// tokenIDPrefix marks a token written as its id
// (return_tokens_as_token_ids).
const tokenIDPrefix = "token_id:"

// tokenID reads a "token_id:<id>" token; ok is false for any other form
// (an engine that writes tokens as text).
func tokenID(s string) (uint32, bool) {
	rest, ok := strings.CutPrefix(s, tokenIDPrefix)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(rest, 10, 32)
	return uint32(v), err == nil
}

// generatedLogprobs turns a chunk's logprobs for n generated tokens into one
// entry per token, top alternatives most likely first and at most top of
// them. It returns nil when the engine sent none, or not one per token (a
// partial list would put probabilities on the wrong tokens); alternatives
// the engine wrote as text, not ids, are left out.
func generatedLogprobs(l *engineLogprobs, n int, top uint32) []*workerv1.TokenLogprob {
	if l == nil || n == 0 || len(l.TokenLogprobs) != n {
		return nil
	}
	out := make([]*workerv1.TokenLogprob, n)
	for i, lp := range l.TokenLogprobs {
		e := &workerv1.TokenLogprob{}
		if lp != nil {
			e.Logprob = float32(*lp)
		}
		if i < len(l.TopLogprobs) {
			for tok, v := range l.TopLogprobs[i] {
				if id, ok := tokenID(tok); ok {
					e.Top = append(e.Top, &workerv1.TopLogprob{TokenId: id, Logprob: float32(v)})
				}
			}
			sortTop(e, top)
		}
		out[i] = e
	}
	return out
}

// sortTop orders e's alternatives most likely first (ties by id, so that
// the order does not depend on a map's) and keeps at most top.
func sortTop(e *workerv1.TokenLogprob, top uint32) {
	slices.SortFunc(e.Top, func(a, b *workerv1.TopLogprob) int {
		if c := cmp.Compare(b.Logprob, a.Logprob); c != 0 {
			return c
		}
		return cmp.Compare(a.TokenId, b.TokenId)
	})
	if uint32(len(e.Top)) > top {
		e.Top = e.Top[:top]
	}
}

// promptLogprobs turns the engine's prompt_logprobs for prompt into the
// worker's: one entry per token after the first, each the prompt token's
// log probability and the alternatives of rank 1..top, most likely first.
func promptLogprobs(raw []map[string]enginePromptLogprob, prompt []uint32, top uint32) ([]*workerv1.TokenLogprob, error) {
	if len(raw) != len(prompt) {
		return nil, fmt.Errorf("engine: %d prompt log probabilities for a prompt of %d tokens", len(raw), len(prompt))
	}
	out := make([]*workerv1.TokenLogprob, 0, max(len(prompt)-1, 0))
	for i := 1; i < len(prompt); i++ {
		own, ok := raw[i][strconv.FormatUint(uint64(prompt[i]), 10)]
		if !ok {
			return nil, fmt.Errorf("engine: prompt position %d has no log probability for its token %d", i, prompt[i])
		}
		e := &workerv1.TokenLogprob{Logprob: float32(own.Logprob)}
		for tok, v := range raw[i] {
			id, err := strconv.ParseUint(tok, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("engine: prompt position %d: token %q is not an id", i, tok)
			}
			if v.Rank == nil || *v.Rank < 1 || uint32(*v.Rank) > top {
				continue // the prompt token itself, less likely than the top asked for
			}
			e.Top = append(e.Top, &workerv1.TopLogprob{TokenId: uint32(id), Logprob: float32(v.Logprob)})
		}
		sortTop(e, top)
		out = append(out, e)
	}
	return out, nil
}

// wholeCompletion is the engine's unstreamed completions answer.
type wholeCompletion struct {
	Choices []struct {
		Text           string                           `json:"text"`
		TokenIDs       []uint32                         `json:"token_ids"`
		FinishReason   *string                          `json:"finish_reason"`
		Logprobs       *engineLogprobs                  `json:"logprobs"`
		PromptLogprobs []map[string]enginePromptLogprob `json:"prompt_logprobs"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        uint32 `json:"prompt_tokens"`
		CompletionTokens    uint32 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens uint32 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error  *engineError `json:"error"`
	Object string       `json:"object"`
	engineError
}

// maxWholeAnswer bounds an unstreamed answer: prompt log probabilities are
// about 100 bytes per prompt token and alternative.
const maxWholeAnswer = 64 << 20

// generateWhole sends cr unstreamed (a request asking for the prompt's log
// probabilities) and answers with one response: the generated tokens, their
// log probabilities when asked, the prompt's, the finish reason and usage.
func generateWhole(ctx context.Context, client *http.Client, hreq *http.Request, req *workerv1.GenerateRequest,
	send func(*workerv1.GenerateResponse) error) error {
	resp, err := client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("engine: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWholeAnswer+1))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("engine: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body[:min(len(body), 4096)]))
		if resp.StatusCode == http.StatusBadRequest {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "engine: " + msg}
		}
		return fmt.Errorf("engine: %s: %s", resp.Status, msg)
	}
	if len(body) > maxWholeAnswer {
		return fmt.Errorf("engine: answer past %d bytes", maxWholeAnswer)
	}
	out, err := decodeWhole(body, req)
	if err != nil {
		return err
	}
	return send(out)
}

// decodeWhole reads the engine's unstreamed answer to req as one response.
func decodeWhole(body []byte, req *workerv1.GenerateRequest) (*workerv1.GenerateResponse, error) {
	var wc wholeCompletion
	if err := json.Unmarshal(body, &wc); err != nil {
		return nil, fmt.Errorf("engine: bad answer: %w", err)
	}
	if wc.Error != nil {
		return nil, wc.Error.err()
	}
	if wc.Object == "error" {
		return nil, wc.engineError.err()
	}
	if len(wc.Choices) == 0 {
		return nil, fmt.Errorf("engine: an answer without choices")
	}
	ch := wc.Choices[0]
	out := &workerv1.GenerateResponse{TokenIds: ch.TokenIDs, FinishReason: workerv1.FinishReason_FINISH_REASON_STOP}
	text := ch.Text
	out.Text = &text
	if ch.FinishReason != nil && *ch.FinishReason != "" {
		out.FinishReason = finishReason(*ch.FinishReason)
	}
	if req.Logprobs != nil {
		out.Logprobs = generatedLogprobs(ch.Logprobs, len(ch.TokenIDs), req.GetLogprobs())
	}
	if ch.PromptLogprobs == nil {
		return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "engine: the answer has no prompt_logprobs (the engine does not compute them)"}
	}
	var err error
	if out.PromptLogprobs, err = promptLogprobs(ch.PromptLogprobs, req.TokenIds, req.GetPromptLogprobs()); err != nil {
		return nil, err
	}
	out.Usage = &workerv1.Usage{PromptTokens: uint32(len(req.TokenIds)), CompletionTokens: uint32(len(ch.TokenIDs))}
	if u := wc.Usage; u != nil {
		out.Usage.PromptTokens, out.Usage.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if d := u.PromptTokensDetails; d != nil {
			out.Usage.CachedPromptTokens = d.CachedTokens
		}
	}
	return out, nil
}
